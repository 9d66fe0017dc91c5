//! Restarts that forget, kept by the client: when a node's "yes" may count
//! toward a new grant.
//!
//! A node that restarted and lost keys breaks quorum intersection: the old
//! holder's key is gone there, so a new quorum can form while the old
//! lease is valid. The Redlock specification's answer is the *delayed
//! restart* — keep such a node out for the longest TTL — and redquorum keeps
//! it itself: a node that may have forgotten is **quarantined** until it has
//! been up for the deployment's longest TTL (`Builder::max_ttl`; longer TTLs
//! are refused, so every key it lost has expired by then on every other
//! node). It still gets every call; only its "yes" to a new grant does not
//! count. docs/design.md §4b argues why that closes the hole.
//!
//! A node's word on its own persistence is no proof that it kept its data:
//! `appendonly` switched off at run time, an old AOF restored or a lost
//! volume all bring a node back with a durable config and old or no data.
//! So by default **every** restart may have forgotten: a process new to the
//! client (a `run_id` it had not seen, or a node it meets for the first
//! time) is quarantined until it has been up for `max_ttl`, whatever it
//! says of its persistence. A deployment that trusts its durable nodes
//! (`Builder::trust_durable_restarts`) counts a restart at once only where
//! the node shows that its dataset is continuous: the dataset mark, stamped
//! by the clients every second, was last stamped by the previous process
//! just before this one started (`Facts::continuous`).
//!
//! ```
//! use std::time::Duration;
//! use redquorum::internals::restart::{quarantine, Facts, Reason};
//!
//! let max_ttl = Duration::from_secs(60);
//! let fresh = Facts {
//!     run_id: Some("b".into()),
//!     uptime: Some(Duration::from_secs(5)),
//!     durable: Some(true),
//!     continuous: None,
//! };
//! // A process that started 5 s ago: 56 s more (it may have been up only
//! // 4.01 s), durable or not.
//! let q = quarantine(&fresh, Some("a"), max_ttl, false).unwrap();
//! assert_eq!((q.left, q.reason), (Duration::from_secs(56), Reason::Restarted));
//! // Met for the first time, it may be a restart all the same.
//! assert_eq!(quarantine(&fresh, None, max_ttl, false).unwrap().reason, Reason::FirstSeen);
//! // The same process, met again after a network blip: nothing new.
//! assert_eq!(quarantine(&fresh, Some("b"), max_ttl, false), None);
//! // Trusting durable restarts: its dataset has been continuous for 10 min.
//! let kept = Facts { continuous: Some(Duration::from_secs(600)), ..fresh.clone() };
//! assert_eq!(quarantine(&kept, Some("a"), max_ttl, true), None);
//! // …or only since this process started: lost, whatever the config says.
//! let lost = Facts { continuous: Some(Duration::from_secs(4)), ..fresh };
//! let q = quarantine(&lost, Some("a"), max_ttl, true).unwrap();
//! assert_eq!((q.left, q.reason), (Duration::from_secs(56), Reason::DataLost));
//! ```

use std::time::Duration;

/// What a connection learnt of the node at its handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The server process (`INFO server`'s `run_id`); `None` where `INFO`
    /// is denied.
    pub run_id: Option<String>,
    /// How long the process has been up, as it says (`uptime_in_seconds`:
    /// whole seconds, up to one more than it really has, [`SECOND_CUT`]).
    pub uptime: Option<Duration>,
    /// Every write persisted before it is acknowledged (`appendonly yes`
    /// with `appendfsync always`); `None` where it could not be read.
    pub durable: Option<bool>,
    /// How long the node's dataset has been continuous, as its mark shows
    /// (clients that trust durable restarts stamp it): since the previous
    /// process's dataset where this process took it over whole, else since
    /// this process started, or since the dataset was wiped while it ran.
    /// `None`: not read (not trusting durable restarts, a cluster shard,
    /// no `run_id`, the stamp refused).
    pub continuous: Option<Duration>,
}

impl Facts {
    /// Reads `INFO`'s `run_id`, `uptime_in_seconds` and `aof_enabled`;
    /// `appendfsync` is not in `INFO` (`CONFIG GET appendfsync`: `fsync`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redquorum::internals::restart::Facts;
    ///
    /// let info = "# Server\r\nrun_id:ab\r\nuptime_in_seconds:12\r\n# Persistence\r\naof_enabled:1\r\n";
    /// let facts = Facts::from_info(info, Some("always"));
    /// assert_eq!(facts.run_id.as_deref(), Some("ab"));
    /// assert_eq!(facts.uptime, Some(Duration::from_secs(12)));
    /// assert_eq!(facts.durable, Some(true));
    /// assert_eq!(Facts::from_info(info, Some("everysec")).durable, Some(false));
    /// assert_eq!(Facts::from_info(info, None).durable, None);
    /// ```
    pub fn from_info(info: &str, fsync: Option<&str>) -> Self {
        let aof = info_field(info, "aof_enabled").map(|v| v == "1");
        Facts {
            run_id: info_field(info, "run_id").map(str::to_owned),
            uptime: info_field(info, "uptime_in_seconds")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs),
            durable: match (aof, fsync) {
                (Some(false), _) => Some(false),
                (Some(true), Some(fsync)) => Some(fsync.eq_ignore_ascii_case("always")),
                _ => None,
            },
            continuous: None,
        }
    }
}

/// One `name:value` line of an `INFO` reply, trimmed; `None` if absent or
/// empty.
///
/// ```
/// use redquorum::internals::restart::info_field;
/// assert_eq!(info_field("a:1\r\nmaxmemory_policy:noeviction\r\n", "maxmemory_policy"), Some("noeviction"));
/// assert_eq!(info_field("a:1\r\n", "b"), None);
/// ```
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// How much `uptime_in_seconds` may exceed the time a process has really
/// been up: the server computes it as its clock in whole seconds less its
/// start time in whole seconds, each cut down.
pub const SECOND_CUT: Duration = Duration::from_secs(1);

/// Why a node is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The client meets the node for the first time and it has been up for
    /// less than `max_ttl`: it may have restarted just before.
    FirstSeen,
    /// A new process (its `run_id` changed, or cannot be read).
    Restarted,
    /// Its dataset mark shows a dataset younger than `max_ttl`: lost,
    /// rolled back or wiped, whatever its persistence settings say (only
    /// when trusting durable restarts).
    DataLost,
}

impl Reason {
    /// The words the logs and the CLI use.
    ///
    /// ```
    /// use redquorum::internals::restart::Reason;
    /// assert_eq!(Reason::FirstSeen.describe(), "first seen, up for less than the longest TTL");
    /// ```
    pub fn describe(self) -> &'static str {
        match self {
            Reason::FirstSeen => "first seen, up for less than the longest TTL",
            Reason::Restarted => "restarted",
            Reason::DataLost => "its dataset was lost, rolled back or wiped",
        }
    }
}

/// A quarantine begun at a connection: how long it lasts and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantine {
    /// How much longer the node's yes counts toward no new grant.
    pub left: Duration,
    /// Why.
    pub reason: Reason,
}

/// The quarantine of a node whose dataset has been `continuous` for that
/// long, trusting durable restarts: until the dataset is `max_ttl` old.
///
/// ```
/// use std::time::Duration;
/// use redquorum::internals::restart::{dataset_quarantine, Reason};
///
/// let max_ttl = Duration::from_secs(60);
/// let q = dataset_quarantine(Duration::from_secs(45), max_ttl).unwrap();
/// assert_eq!((q.left, q.reason), (Duration::from_secs(15), Reason::DataLost));
/// assert_eq!(dataset_quarantine(max_ttl, max_ttl), None);
/// ```
pub fn dataset_quarantine(continuous: Duration, max_ttl: Duration) -> Option<Quarantine> {
    let left = max_ttl.saturating_sub(continuous);
    (!left.is_zero()).then_some(Quarantine {
        left,
        reason: Reason::DataLost,
    })
}

/// How much longer a node just connected to is quarantined, from what its
/// connection learnt (`facts`) and the `run_id` the client knew it by
/// (`previous`: `None` if it is new to the client); `None`: it counts now.
/// `trust_durable`: the client trusts durable restarts
/// (`Builder::trust_durable_restarts`).
///
/// By default a node is quarantined when it is **new to the client, or a
/// new process** (its `run_id` changed, or cannot be read) and it may have
/// been up for less than `max_ttl` (its uptime is below `max_ttl` and one
/// second): whatever its persistence settings say, it may have forgotten.
/// It then stays quarantined until it has been up for `max_ttl`: the
/// result is `max_ttl` and one second less its uptime (all of `max_ttl`
/// when the uptime cannot be read). The second: the server reports its
/// clock in whole seconds less its start in whole seconds, so a process
/// started at 10.97 s and asked at 11.02 s says 1 ([`SECOND_CUT`]).
///
/// Trusting durable restarts, where the dataset mark was read
/// ([`Facts::continuous`]), the node is quarantined until its dataset has
/// been continuous for `max_ttl`, whichever process it is: a restart that
/// kept its data counts at once, one that lost it (or a dataset wiped
/// while the process ran) does not. Where the mark could not be read, the
/// default rule holds.
///
/// The caller keeps a quarantine already running across reconnections to
/// the same process and adds its clock's drift.
pub fn quarantine(
    facts: &Facts,
    previous: Option<&str>,
    max_ttl: Duration,
    trust_durable: bool,
) -> Option<Quarantine> {
    if let (true, Some(continuous)) = (trust_durable, facts.continuous) {
        return dataset_quarantine(continuous, max_ttl);
    }
    let same_process = match (&facts.run_id, previous) {
        (Some(now), Some(before)) => now == before,
        _ => false,
    };
    if same_process {
        return None;
    }
    let left = match facts.uptime {
        // Up to a second more than the process has really been up (both
        // ends of the subtraction are cut to whole seconds): take it as up
        // a second less.
        Some(uptime) => (max_ttl + SECOND_CUT).saturating_sub(uptime),
        None => max_ttl,
    };
    let reason = if previous.is_some() {
        Reason::Restarted
    } else {
        Reason::FirstSeen
    };
    (!left.is_zero()).then_some(Quarantine { left, reason })
}

/// A node's memory policy as it matters to locks: `Some(policy)` when the
/// node may evict lock keys — a memory limit (`maxmemory` above 0) with a
/// policy other than `noeviction` (every `allkeys-*` policy, and every
/// `volatile-*` one: lock keys have a TTL).
///
/// ```
/// use redquorum::internals::restart::evicting;
/// let info = |limit, policy| format!("maxmemory:{limit}\r\nmaxmemory_policy:{policy}\r\n");
/// assert_eq!(evicting(&info(1000, "volatile-lru")), Some("volatile-lru"));
/// assert_eq!(evicting(&info(0, "allkeys-lru")), None); // no limit
/// assert_eq!(evicting(&info(1000, "noeviction")), None);
/// ```
pub fn evicting(info: &str) -> Option<&str> {
    let limit: u64 = info_field(info, "maxmemory")?.parse().ok()?;
    let policy = info_field(info, "maxmemory_policy")?;
    (limit > 0 && policy != "noeviction").then_some(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(60);

    fn facts(run_id: Option<&str>, uptime: Option<u64>, durable: Option<bool>) -> Facts {
        Facts {
            run_id: run_id.map(str::to_owned),
            uptime: uptime.map(Duration::from_secs),
            durable,
            continuous: None,
        }
    }

    fn left(q: Option<Quarantine>) -> Option<Duration> {
        q.map(|q| q.left)
    }

    #[test]
    fn every_case_of_the_default_rule() {
        let secs = |s| Some(Duration::from_secs(s));
        // New to the client: until it is max_ttl old, taking its uptime as
        // a second less than it says, durable or not.
        for durable in [Some(false), Some(true), None] {
            let q = |uptime| {
                left(quarantine(
                    &facts(Some("a"), Some(uptime), durable),
                    None,
                    MAX,
                    false,
                ))
            };
            assert_eq!(q(0), secs(61));
            assert_eq!(q(60), secs(1));
            assert_eq!(q(61), None);
        }
        // Restarted (run id changed), durable or not: the same.
        for durable in [Some(false), Some(true)] {
            let q = quarantine(&facts(Some("b"), Some(1), durable), Some("a"), MAX, false);
            assert_eq!(
                q,
                Some(Quarantine {
                    left: Duration::from_secs(60),
                    reason: Reason::Restarted
                })
            );
        }
        // Same process again (a reconnection): nothing new here.
        assert_eq!(
            quarantine(
                &facts(Some("a"), Some(1), Some(false)),
                Some("a"),
                MAX,
                false
            ),
            None
        );
        // No run id, no uptime: every connection may be a restart.
        assert_eq!(
            left(quarantine(&facts(None, None, None), Some("a"), MAX, false)),
            secs(60)
        );
        assert_eq!(
            left(quarantine(&facts(None, None, Some(true)), None, MAX, false)),
            secs(60)
        );
        // A mark read while not trusting durable restarts changes nothing.
        let marked = Facts {
            continuous: Some(Duration::from_secs(3600)),
            ..facts(Some("b"), Some(1), Some(true))
        };
        assert_eq!(left(quarantine(&marked, Some("a"), MAX, false)), secs(60));
    }

    #[test]
    fn trusting_durable_restarts_follows_the_dataset_not_the_process() {
        let with = |continuous: u64| Facts {
            continuous: Some(Duration::from_secs(continuous)),
            ..facts(Some("b"), Some(2), Some(true))
        };
        // Kept across the restart: counts at once, for a client that knew
        // the old process and for one meeting it first.
        for previous in [Some("a"), None] {
            assert_eq!(quarantine(&with(600), previous, MAX, true), None);
            // Lost: until the dataset is max_ttl old.
            let q = quarantine(&with(3), previous, MAX, true).unwrap();
            assert_eq!(
                (q.left, q.reason),
                (Duration::from_secs(57), Reason::DataLost)
            );
        }
        // Wiped while the same process ran: quarantined from the wipe.
        let q = quarantine(&with(0), Some("b"), MAX, true).unwrap();
        assert_eq!(q.left, MAX);
        // The mark unread (a cluster shard, the stamp refused): the
        // default rule.
        let unread = facts(Some("b"), Some(2), Some(true));
        assert_eq!(
            left(quarantine(&unread, Some("a"), MAX, true)),
            Some(Duration::from_secs(59))
        );
    }

    /// `uptime_in_seconds` is the server's clock in whole seconds less its
    /// start in whole seconds, both cut down: a node started at x.97 s and
    /// asked 50 ms later says 1. Up to a second too many, never too few, so
    /// the quarantine must run a second longer than `max_ttl − uptime`.
    #[test]
    fn an_uptime_read_across_a_second_boundary_shortens_nothing() {
        let max = Duration::from_secs(2);
        let started = 10.97_f64;
        for asked_after in [0.0, 0.03, 0.05, 0.5, 0.99, 1.0, 1.2, 2.5] {
            let now: f64 = started + asked_after;
            let uptime = (now.floor() - started.floor()) as u64;
            let left = left(quarantine(
                &facts(Some("b"), Some(uptime), Some(false)),
                Some("a"),
                max,
                false,
            ))
            .unwrap_or_default();
            // It must last until the start plus max_ttl, whenever it is asked.
            let needed = (2.0 - asked_after).max(0.0);
            assert!(
                left.as_secs_f64() >= needed,
                "asked {asked_after} s after the start, uptime {uptime}: {left:?} left, {needed} s needed"
            );
        }
    }

    #[test]
    fn reads_info() {
        let info = "# Server\r\nrun_id:r1\r\nuptime_in_seconds:7\r\n\r\n# Persistence\r\n\
                    aof_enabled:0\r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n";
        let f = Facts::from_info(info, Some("always"));
        assert_eq!(f, facts(Some("r1"), Some(7), Some(false)));
        assert_eq!(evicting(info), None);
        assert_eq!(Facts::from_info("", None), facts(None, None, None));
        // A field is matched by its whole name.
        assert_eq!(
            info_field("maxmemory_human:0B\r\nmaxmemory:5\r\n", "maxmemory"),
            Some("5")
        );
    }
}
