//! What a lock connection checks of its node at every connection — the
//! delayed restart's quarantine, persistence, memory policy, role — and
//! what it keeps of them (`crate::proto::restart` decides; the link's task
//! applies it at each handshake).
//!
//! # Checks at connect
//!
//! What a lock connection's handshake learnt is checked once per connection, never per
//! call:
//!
//! - **Restarts.** The quarantine rule of docs/design.md §4b (`restart::quarantine`); a node found
//!   quarantined is logged at `WARN` with its uptime and the quarantine left, and
//!   counted (`redquorum_node_quarantines_total`, `redquorum_node_quarantine_seconds`).
//! - **Permissions.** The probe is a script (the function `probe` of the library, or
//!   `EVAL` of its source where the library cannot be loaded) that calls
//!   `redis.acl_check_cmd` for every command the scripts call, the native `SET` and
//!   `INFO` (`scripts::COMMANDS`: set get del exists type time incr pexpire pexpireat pttl
//!   hdel hexists hgetall hincrby hset hsetnx zadd zcard zincrby zrange zrangebyscore
//!   zrem zremrangebyscore zscore info) and returns those denied; running it checks
//!   `FCALL` (or `EVAL`) itself, a `NOPERM` on the probe meaning the script command is
//!   denied. `SPUBLISH`/`PUBLISH` are not checked: the scripts call them through `pcall`, and where they are
//!   denied waiters poll instead of being woken. `FUNCTION LOAD` may be denied (then
//!   `EVAL`). A denied command fails the attempt with `NodeError::NoPermission`: if the
//!   first attempt ends within the build's wait, `build()` fails with
//!   `ConfigError::Permission { node, message }`; otherwise every call to that node is
//!   refused with `NoPermission` until a connection passes. Servers without
//!   `redis.acl_check_cmd` (before Redis 7) are not probed. Each command is checked with
//!   arguments of its arity, a lock key of the client's layout (`{prefix}{redquorum:probe}:lock`)
//!   where it takes a key: the user's key patterns are checked on that key (other keys —
//!   a fence counter, a line — are a `NOPERM` at the call if denied), and Redis 7.0.15
//!   crashes (SIGSEGV) when `acl_check_cmd` is handed a keyed command without keys for a
//!   user with key patterns. Channel patterns are not probed.
//! - **Eviction.** A memory limit with a policy other than `noeviction`
//!   (`restart::evicting`) is logged at `WARN` and shown (`redquorum_node_evicting`,
//!   `NodeHealth::evicting`); with `Builder::strict(true)` the attempt fails: `build()`
//!   fails with `ConfigError::Evicting { node, policy }` if it was the first attempt and
//!   ended within the build's wait, and otherwise calls to the node are refused
//!   (`NotConnected`, naming the policy) until a connection passes.
//! - **Replicas.** `role:slave` is logged at `WARN` and shown (`NodeHealth::replica`).
//!
//! `Nodes::probe` reports what the last connection learnt (`NodeHealth`:
//! `quarantined_for`, `durable`, `evicting`, `replica`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Hello;
use crate::proto::restart;

/// What a lock connection checks of its node, at every connection (never
/// per call): docs/operations.md.
#[derive(Debug, Clone)]
pub(crate) struct Checks {
    /// The delayed restart: a node that may have forgotten counts toward
    /// no new grant until it has been up this long (the longest TTL plus
    /// the clock's drift over it); `None`: off
    /// (`Builder::restart_quarantine(false)`).
    pub(crate) quarantine: Option<Duration>,
    /// Restarts that kept their data count at once: the connection stamps
    /// the dataset mark (`Builder::trust_durable_restarts`).
    pub(crate) trust_durable: bool,
    /// A node that may evict lock keys is refused (`Builder::strict`).
    pub(crate) strict: bool,
    /// The key of redquorum's dataset mark: since when the node's dataset
    /// has been continuous (`crate::proto::restart::Facts::continuous`).
    pub(crate) mark: Arc<str>,
    /// A lock key in the client's layout, for the permission probe's
    /// commands (the user's key patterns are checked on it).
    pub(crate) probe_key: Arc<str>,
    /// The client's agreement with the deployment record, and which of
    /// its nodes this is (`None`: a client of cluster or custom members,
    /// which keeps no record).
    pub(crate) agreement: Option<(Arc<crate::transport::agreement::Agreement>, usize)>,
}

/// What a node's connections have told of it, for the rounds and for
/// `nodes`: the process, the quarantine, persistence and memory policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct Standing {
    /// The process last connected to.
    pub(crate) run_id: Option<String>,
    /// The `at` of the last stamp of its dataset mark it acknowledged, on
    /// its clock (ms; clients that trust durable restarts).
    pub(crate) stamped_at: Option<u64>,
    /// Quarantined until then (`crate::proto::restart`).
    pub(crate) quarantine: Option<Instant>,
    /// Persists every write (`None`: unknown).
    pub(crate) durable: Option<bool>,
    /// May evict lock keys: its `maxmemory-policy`.
    pub(crate) evicting: Option<Arc<str>>,
    /// It is a replica.
    pub(crate) replica: bool,
}

impl Standing {
    /// How much longer the node is quarantined at `now`.
    pub(crate) fn quarantined_for(&self, now: Instant) -> Option<Duration> {
        self.quarantine
            .map(|until| until.saturating_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// What a lock connection's handshake (`hello`) tells of the node
    /// `name`, kept here: a process that may have forgotten keys is quarantined
    /// ([`restart::quarantine`]; one already running is kept across
    /// reconnections to the same process), and the operator is told, once
    /// per connection. Returns until when the node is quarantined.
    pub(crate) fn update(
        &mut self,
        checks: Option<&Checks>,
        name: &str,
        hello: &Hello,
    ) -> Option<Instant> {
        let checks = checks?;
        let standing = self;
        let now = Instant::now();
        let same = hello.run_id.is_some() && hello.run_id == standing.run_id;
        let begun = checks.quarantine.and_then(|max_ttl| {
            restart::quarantine(
                &hello.facts,
                standing.run_id.as_deref(),
                max_ttl,
                checks.trust_durable,
            )
        });
        // The same process keeps the quarantine it had, unless its dataset
        // mark shows a later one (wiped while it ran).
        let kept = if same { standing.quarantine } else { None };
        let begun_until = begun.map(|q| now + q.left);
        standing.quarantine = match (kept, begun_until) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // Begun here: none was running, or this one ends over a second
        // later (a dataset wiped while the process ran).
        let begun = begun.filter(|_| match (kept, begun_until) {
            (Some(kept), Some(until)) => until > kept + restart::SECOND_CUT,
            _ => true,
        });
        standing.run_id.clone_from(&hello.run_id);
        standing.stamped_at = hello.stamped_at;
        standing.durable = hello.facts.durable;
        standing.evicting = hello.evicting.as_deref().map(Into::into);
        standing.replica = hello.replica;
        let left = standing.quarantined_for(now);
        if let Some(left) = left {
            let uptime = hello.facts.uptime.map_or(-1, |u| u.as_secs() as i64);
            let why = begun.map_or("restarted", |q| q.reason.describe());
            tracing::warn!(
                node = %name,
                uptime_s = uptime,
                quarantine_left_ms = left.as_millis() as u64,
                durable = ?hello.facts.durable,
                "node quarantined ({why}): it may have forgotten keys, so its yes counts toward \
                 no new lock until it has been up for the longest TTL (docs/operations.md, restarts)"
            );
        }
        if let Some(policy) = &hello.evicting {
            tracing::warn!(
                node = %name,
                policy = %policy,
                "node may evict lock keys (maxmemory with an evicting maxmemory-policy): a lock \
                 whose keys are evicted can be granted twice; set maxmemory-policy noeviction"
            );
        }
        if hello.replica {
            tracing::warn!(
                node = %name,
                "node is a replica: a lock node must be an independent master"
            );
        }
        crate::telemetry::node_checked(name, begun.is_some(), left, hello.evicting.is_some());
        if left.is_some() {
            standing.quarantine
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::log_capture::Lines;
    use crate::proto::restart::Facts;

    /// A process `run_id`, up for a second, that does not persist.
    fn bare(run_id: &str) -> Hello {
        Hello {
            run_id: Some(run_id.into()),
            facts: Facts {
                run_id: Some(run_id.into()),
                uptime: Some(Duration::from_secs(1)),
                durable: Some(false),
                continuous: None,
            },
            ..Hello::default()
        }
    }

    /// The value of `name{node="n1"}` in a scrape.
    fn sample(scrape: &str, name: &str) -> Option<f64> {
        scrape.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix("{node=\"n1\"} ")?;
            rest.parse().ok()
        })
    }

    /// A restarted bare node: a WARN naming it and the time left, the
    /// counter once, and the gauge the time left — at its first connection
    /// and at a reconnection to the same process (the gauge read 0 there).
    #[test]
    fn a_quarantine_is_logged_and_measured_at_every_connection() {
        let checks = Checks {
            agreement: None,
            quarantine: Some(Duration::from_secs(60)),
            trust_durable: false,
            strict: false,
            mark: "mark".into(),
            probe_key: "key".into(),
        };
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let lines = Lines::default();
        let subscriber = lines.subscriber();
        let mut standing = Standing::default();
        let (first, again) = tracing::subscriber::with_default(subscriber, || {
            metrics::with_local_recorder(&recorder, || {
                let first = standing.update(Some(&checks), "n1", &bare("a"));
                let again = standing.update(Some(&checks), "n1", &bare("a"));
                (first, again)
            })
        });
        assert!(first.is_some() && first == again, "{first:?} {again:?}");
        let logged = lines.text();
        assert_eq!(logged.matches("WARN").count(), 2, "{logged}");
        assert!(logged.contains("node=n1"), "{logged}");
        assert!(logged.contains("quarantine_left_ms=60"), "{logged}");
        let scrape = handle.render();
        assert_eq!(
            sample(&scrape, crate::telemetry::NODE_QUARANTINES),
            Some(1.0),
            "{scrape}"
        );
        let left = sample(&scrape, crate::telemetry::NODE_QUARANTINE).unwrap();
        assert!(left > 59.0 && left <= 60.0, "{scrape}");
    }
}
