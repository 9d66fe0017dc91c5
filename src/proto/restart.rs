//! Restarts that forget, kept by the client: when a node's "yes" may count
//! toward a new grant.
//!
//! A node that restarted without persisting every write has forgotten the
//! keys it held. Counting its "yes" at once breaks quorum intersection: the
//! old holder's key is gone there, so a new quorum can form while the old
//! lease is valid. The Redlock specification's answer is the *delayed
//! restart* — keep such a node out for the longest TTL — and redquorum keeps
//! it itself: a node that may have forgotten is **quarantined** until it has
//! been up for the deployment's longest TTL (`Builder::max_ttl`; longer TTLs
//! are refused, so every key it lost has expired by then on every other
//! node). It still gets every call; only its "yes" to a new grant does not
//! count. docs/design.md §4b argues why that closes the hole.
//!
//! What a connection learns of the node ([`Facts`]) and what it knew before
//! (the last `run_id`) decide the quarantine ([`quarantine`]):
//!
//! ```
//! use std::time::Duration;
//! use redquorum::restart::{quarantine, Facts};
//!
//! let max_ttl = Duration::from_secs(60);
//! let fresh = Facts {
//!     run_id: Some("b".into()),
//!     uptime: Some(Duration::from_secs(5)),
//!     durable: Some(false),
//!     born_here: None,
//! };
//! // A node that says it restarted 5 s ago without persistence: 56 s more
//! // (it may have been up only 4.01 s).
//! assert_eq!(quarantine(&fresh, Some("a"), max_ttl), Some(Duration::from_secs(56)));
//! // The same process, met again after a network blip: nothing new.
//! assert_eq!(quarantine(&fresh, Some("b"), max_ttl), None);
//! // Persisting every write, it forgot nothing.
//! let durable = Facts { durable: Some(true), ..fresh.clone() };
//! assert_eq!(quarantine(&durable, Some("a"), max_ttl), None);
//! // …unless its data is younger than the process that had it (wiped).
//! let wiped = Facts { born_here: Some(true), ..durable };
//! assert_eq!(quarantine(&wiped, Some("a"), max_ttl), Some(Duration::from_secs(56)));
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
    /// The node's dataset was born in this process (redquorum's dataset
    /// mark names this `run_id`, or was missing): whatever the persistence
    /// settings say, its keys did not survive a restart. `None`: unknown.
    pub born_here: Option<bool>,
}

impl Facts {
    /// Reads `INFO`'s `run_id`, `uptime_in_seconds` and `aof_enabled`;
    /// `appendfsync` is not in `INFO` (`CONFIG GET appendfsync`: `fsync`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redquorum::restart::Facts;
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
            born_here: None,
        }
    }
}

/// One `name:value` line of an `INFO` reply, trimmed; `None` if absent or
/// empty.
///
/// ```
/// use redquorum::restart::info_field;
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

/// How much longer a node just connected to is quarantined, from what its
/// connection learnt (`facts`) and the `run_id` the client knew it by
/// (`previous`: `None` if it is new to the client); `None`: it counts now.
///
/// A node is quarantined when all three hold:
///
/// - it is **new to the client, or a new process** (its `run_id` changed,
///   or cannot be read);
/// - it **may have forgotten**: it does not persist every write (or that
///   cannot be read), or it does but its dataset was born in this process
///   (wiped, or its files lost);
/// - it may have been up for less than `max_ttl` (its uptime is below
///   `max_ttl` and one second).
///
/// It then stays quarantined until it has been up for `max_ttl`: the
/// result is `max_ttl` and one second less its uptime (all of `max_ttl`
/// when the uptime cannot be read). The second: the server reports its
/// clock in whole seconds less its start in whole seconds, so a process
/// started at 10.97 s and asked at 11.02 s says 1 ([`SECOND_CUT`]). The caller keeps a quarantine already running
/// across reconnections to the same process (this returns `None` for
/// those) and adds its clock's drift.
pub fn quarantine(facts: &Facts, previous: Option<&str>, max_ttl: Duration) -> Option<Duration> {
    let same_process = match (&facts.run_id, previous) {
        (Some(now), Some(before)) => now == before,
        _ => false,
    };
    if same_process {
        return None;
    }
    // A new process of a node the client knew, whose run id it could read.
    let restarted = previous.is_some() || facts.run_id.is_none();
    let forgot = match facts.durable {
        Some(true) => restarted && facts.born_here == Some(true),
        Some(false) | None => true,
    };
    if !forgot {
        return None;
    }
    let left = match facts.uptime {
        // Up to a second more than the process has really been up (both
        // ends of the subtraction are cut to whole seconds): take it as up
        // a second less.
        Some(uptime) => (max_ttl + SECOND_CUT).saturating_sub(uptime),
        None => max_ttl,
    };
    (!left.is_zero()).then_some(left)
}

/// A node's memory policy as it matters to locks: `Some(policy)` when the
/// node may evict lock keys — a memory limit (`maxmemory` above 0) with a
/// policy other than `noeviction` (every `allkeys-*` policy, and every
/// `volatile-*` one: lock keys have a TTL).
///
/// ```
/// use redquorum::restart::evicting;
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
            born_here: None,
        }
    }

    #[test]
    fn every_case_of_the_rule() {
        let secs = |s| Some(Duration::from_secs(s));
        // New to the client, not durable: until it is max_ttl old, taking
        // its uptime as a second less than it says.
        assert_eq!(
            quarantine(&facts(Some("a"), Some(0), Some(false)), None, MAX),
            secs(61)
        );
        assert_eq!(
            quarantine(&facts(Some("a"), Some(60), Some(false)), None, MAX),
            secs(1)
        );
        assert_eq!(
            quarantine(&facts(Some("a"), Some(61), Some(false)), None, MAX),
            None
        );
        // Durable and new to the client: trusted (a fresh node cannot be
        // told from a wiped one; its settings say it keeps what it is told).
        assert_eq!(
            quarantine(&facts(Some("a"), Some(0), Some(true)), None, MAX),
            None
        );
        // Persistence unknown (CONFIG denied): taken as not durable.
        assert_eq!(
            quarantine(&facts(Some("a"), Some(10), None), None, MAX),
            secs(51)
        );
        // Restarted (run id changed), not durable.
        assert_eq!(
            quarantine(&facts(Some("b"), Some(1), Some(false)), Some("a"), MAX),
            secs(60)
        );
        // Restarted, durable, with its data: trusted.
        assert_eq!(
            quarantine(&facts(Some("b"), Some(1), Some(true)), Some("a"), MAX),
            None
        );
        // Same process again (a reconnection): nothing new here.
        assert_eq!(
            quarantine(&facts(Some("a"), Some(1), Some(false)), Some("a"), MAX),
            None
        );
        // No run id, no uptime: every connection may be a restart.
        assert_eq!(
            quarantine(&facts(None, None, None), Some("a"), MAX),
            secs(60)
        );
        assert_eq!(quarantine(&facts(None, None, Some(true)), None, MAX), None);
        // A durable node whose dataset was born in this process: wiped.
        let wiped = Facts {
            born_here: Some(true),
            ..facts(Some("b"), Some(3), Some(true))
        };
        assert_eq!(quarantine(&wiped, Some("a"), MAX), secs(58));
        // …but a client meeting it first cannot tell it from a fresh node.
        assert_eq!(quarantine(&wiped, None, MAX), None);
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
            let left = quarantine(&facts(Some("b"), Some(uptime), Some(false)), Some("a"), max)
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
