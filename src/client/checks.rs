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
    /// `run_id` changed), whatever its persistence settings say — and that
    /// has been up for less than [`max_ttl`](Builder::max_ttl) is
    /// *quarantined* until it has: it gets every call, but its yes counts
    /// toward no new grant of any kind. This is what keeps a lock exclusive
    /// when nodes restart and forget (the Redlock specification's delayed
    /// restart; docs/design.md §4b): without persistence, with `appendonly`
    /// switched off at run time, from an old AOF or with a lost volume.
    /// A durable deployment can count restarts that kept their data at
    /// once: [`trust_durable_restarts`](Builder::trust_durable_restarts).
    ///
    /// A fresh node cannot be told from a restarted one, so nodes also wait
    /// out the quarantine after their first start: with five nodes started
    /// together, no lock is granted for `max_ttl`.
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

    /// Counts a restart of a durable node at once where the node shows that
    /// it kept its data (default: off, every restart is quarantined; see
    /// [`restart_quarantine`](Builder::restart_quarantine)). For a
    /// deployment whose nodes run `appendonly yes` with `appendfsync
    /// always` on storage that outlives the process, and whose operators
    /// never switch AOF off at run time nor restore an old AOF or snapshot
    /// (docs/operations.md, "Trusting durable restarts").
    ///
    /// On, the client stamps each node's *dataset mark* once a second: a
    /// small hash under the key prefix saying since when the node's
    /// dataset has been continuous. A new process that persists every
    /// write, and whose mark holds the last stamp its predecessor
    /// acknowledged to the first client stamping it again (or, for a client
    /// meeting it first, a stamp from at most 5 s before it started), took
    /// the dataset over whole and counts at once, for every client.
    /// Anything else — the mark missing (a wiped or new dataset), older
    /// than that (an old AOF, AOF switched off at run time), a node not
    /// persisting every write, or the mark gone while the process ran
    /// (`FLUSHALL`) — is quarantined until the dataset is
    /// [`max_ttl`](Builder::max_ttl) old. Cluster shards (the mark's key
    /// may live on another shard) follow the default rule. What it cannot
    /// see: writes lost in the last second before a restart (AOF switched
    /// off, or an AOF copied, just then), or a disk that acknowledges an
    /// fsync it did not do. CLI
    /// `--trust-durable-restarts` (`REDQUORUM_TRUST_DURABLE_RESTARTS=1`).
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().trust_durable_restarts(true);
    /// ```
    pub fn trust_durable_restarts(mut self, on: bool) -> Self {
        self.trust_durable = on;
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

    /// The deployment record (default: on). Every client of Redis masters
    /// reads, at each connection, what its nodes record of the deployment —
    /// the members, by ids the nodes hold whatever the URLs' spelling, and
    /// `max_ttl` — and creates it at first use. A client whose nodes or
    /// `max_ttl` differ is refused at connect ([`ConfigError::Deployment`];
    /// a client that chose no `max_ttl` takes the record's where it is not
    /// longer than the default), and a node that is no member counts toward
    /// no grant: clients that disagree on the member set would otherwise
    /// count different majorities and grant one lock twice. A member that
    /// lost its data (an empty restart) is known by its address and
    /// adopted back; a new server at another address is not
    /// (docs/agreement.md). Clients of clusters and custom nodes keep no
    /// record.
    ///
    /// Off (`false`), nothing is read or written: every client must then
    /// be configured alike by other means.
    ///
    /// [`ConfigError::Deployment`]: crate::ConfigError::Deployment
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().deployment_record(false);
    /// ```
    pub fn deployment_record(mut self, on: bool) -> Self {
        self.no_record = !on;
        self
    }
}
