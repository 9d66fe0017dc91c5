//! The builder's settings for what a client checks of its nodes: the
//! longest TTL and the delayed restart it bounds, and eviction.

use std::time::Duration;

use super::Builder;
#[cfg(doc)]
use crate::proto::input::InputError;
#[cfg(doc)]
use crate::settings::DEFAULT_MAX_TTL;
#[cfg(doc)]
use crate::settings::config_error::ConfigError;

impl Builder {
    /// The deployment's longest TTL (default [`DEFAULT_MAX_TTL`], 60 s): a
    /// lock, lease, permit or leadership asked with a longer TTL is refused
    /// ([`InputError::TtlAboveMax`]), and a node that restarted without
    /// persisting every write counts toward no new grant until it has been
    /// up this long (see [`restart_quarantine`](Builder::restart_quarantine)).
    /// Every client of the same nodes should use the same value, at least
    /// the longest TTL any of them asks for.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// use redquorum::{InputError, LockError, Redlock};
    ///
    /// let nodes = (0..3).map(|i| redquorum::testing::MemoryNode::new(i) as _);
    /// let redlock = Redlock::builder()
    ///     .custom_nodes(nodes)
    ///     .max_ttl(Duration::from_secs(30))
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// let too_long = redlock.try_lock("job", Duration::from_secs(31)).await;
    /// assert!(matches!(too_long, Err(LockError::Input(InputError::TtlAboveMax { .. }))));
    /// # }
    /// ```
    pub fn max_ttl(mut self, ttl: Duration) -> Self {
        self.max_ttl = Some(ttl);
        self
    }

    /// The delayed restart, kept by the client (default: on). A node that
    /// may have forgotten keys — new to the client or restarted (its
    /// `run_id` changed), not persisting every write (`appendonly yes` with
    /// `appendfsync always`), or whose dataset was wiped — and that has
    /// been up for less than [`max_ttl`](Builder::max_ttl) is
    /// *quarantined* until it has: it gets every call, but its yes counts
    /// toward no new grant of any kind. This is what keeps a lock exclusive
    /// when nodes restart empty one after another (the Redlock
    /// specification's delayed restart; docs/design.md §4b).
    ///
    /// A fresh node cannot be told from a restarted one, so nodes without
    /// persistence also wait out the quarantine after their first start:
    /// with five nodes started together, no lock is granted for `max_ttl`.
    ///
    /// **Off (`false`), a node that restarted empty counts at once: two
    /// holders of one lock at the same time become possible** when a
    /// majority of nodes restart within a TTL (or one does, while other
    /// nodes are down). Turn it off only where every node persists every
    /// write, or for throwaway nodes in tests. The CLI's
    /// `--no-restart-quarantine` (`REDQUORUM_NO_RESTART_QUARANTINE=1`).
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().restart_quarantine(false);
    /// ```
    pub fn restart_quarantine(mut self, on: bool) -> Self {
        self.no_quarantine = !on;
        self
    }

    /// Refuses, at connect, a node that may evict lock keys — a memory
    /// limit (`maxmemory`) with an evicting `maxmemory-policy` (any but
    /// `noeviction`): [`ConfigError::Evicting`] (default: off, a warning in
    /// the log, `redquorum nodes` and the metric `redquorum_node_evicting`).
    /// An evicted lock key can be granted to a second holder while the
    /// first's lock is valid. CLI `--strict`.
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().strict(true);
    /// ```
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }
}
