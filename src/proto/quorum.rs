//! The quorum and validity arithmetic of Redlock, with no I/O.
//!
//! Everything the coordinator decides is decided here, from numbers it is
//! handed: how many nodes make a quorum, how much clock drift to allow for,
//! how long a lock stays valid, how long to wait for one node, and — through
//! [`Count`] — whether a round of node replies has already settled. Keeping it
//! free of tokio and redis is what lets it be property-tested exhaustively
//! (`tests/quorum_props.rs`) and driven by a simulation.
//!
//! All durations are whole milliseconds where Redis sees them (`PX`), and all
//! rounding is in the direction that makes a lock look *shorter*: a holder
//! that trusts these numbers never outlives its keys.

use std::time::Duration;

/// Milliseconds always added to the drift: Redis expires keys with 1 ms
/// precision, plus 1 ms of minimum clock drift between client and node.
pub const DRIFT_FLOOR_MS: u64 = 2;

/// The largest TTL accepted, in milliseconds (2^40 ms, about 34 years).
///
/// It keeps every sum of a TTL and an instant far from overflow, and TTLs
/// exactly representable in a Lua number (a double) on the node.
pub const MAX_TTL_MS: u64 = 1 << 40;

/// The default per-node timeout ceiling: `min(50 ms, ttl / 20)`.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// How many of `n` nodes make a majority: `n / 2 + 1`.
///
/// Any two sets of this size drawn from the same `n` nodes share at least one
/// node, which is what makes two simultaneous grants impossible. It is always
/// computed from the *configured* `n`, never from the nodes that happen to be
/// reachable.
///
/// ```
/// assert_eq!(redquorum::quorum::quorum(5), 3);
/// assert_eq!(redquorum::quorum::quorum(4), 3);
/// assert_eq!(redquorum::quorum::quorum(1), 1);
/// ```
pub const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// A clock-drift factor in `[0, 1)`, held as the exact decimal fraction it
/// was written as (`0.01` is 1/100, not the binary double just above it),
/// so that `ceil(ttl × factor)` is computed exactly, in integers.
///
/// ```
/// use redquorum::quorum::DriftFactor;
/// assert!(DriftFactor::new(0.01).is_some());
/// assert!(DriftFactor::new(1.0).is_none());
/// assert!(DriftFactor::new(f64::NAN).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriftFactor {
    value: f64,
    /// `value` is `digits / 10^scale`, from its shortest round-trip decimal.
    digits: u64,
    scale: u32,
}

impl DriftFactor {
    /// No drift beyond the 2 ms floor.
    pub const ZERO: DriftFactor = DriftFactor {
        value: 0.0,
        digits: 0,
        scale: 0,
    };

    /// `None` unless `value` is finite and in `[0, 1)`.
    pub fn new(value: f64) -> Option<Self> {
        if !(value.is_finite() && (0.0..1.0).contains(&value)) {
            return None;
        }
        if value == 0.0 {
            return Some(DriftFactor::ZERO); // also -0.0, which prints a sign
        }
        // `{:e}` prints the shortest decimal that reads back as `value`
        // (at most 17 significant digits): "1e-2", "7.161e-1", "0e0".
        let text = format!("{value:e}");
        let (mantissa, exponent) = text.split_once('e')?;
        let exponent: i32 = exponent.parse().ok()?;
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits: u64 = format!("{int}{frac}").parse().ok()?;
        let frac_len = i32::try_from(frac.len()).ok()?;
        // value = digits × 10^(exponent − frac_len), and value < 1 makes that
        // power negative (or digits 0).
        let scale = u32::try_from(frac_len - exponent).unwrap_or(0);
        Some(DriftFactor {
            value,
            digits,
            scale,
        })
    }

    /// The factor as given.
    pub fn get(&self) -> f64 {
        self.value
    }

    /// `ceil(ttl_ms × factor)`, exact.
    fn scaled(&self, ttl_ms: u64) -> u64 {
        // < 2^64 × 10^17 < 2^121: no overflow.
        let product = u128::from(ttl_ms) * u128::from(self.digits);
        let scaled = match 10u128.checked_pow(self.scale) {
            Some(denominator) => product.div_ceil(denominator),
            None => u128::from(product > 0), // a positive product below 1
        };
        // factor < 1, so scaled ≤ ttl_ms.
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// The drift allowance for `ttl_ms`: `ceil(ttl × factor) + 2 ms`.
    pub fn drift(&self, ttl_ms: u64) -> Duration {
        Duration::from_millis(self.scaled(ttl_ms).saturating_add(DRIFT_FLOOR_MS))
    }

    /// The validity of `ttl_ms`: `ttl − drift(ttl)`, or `None` when that is
    /// not positive or `ttl_ms` exceeds [`MAX_TTL_MS`].
    pub fn validity(&self, ttl_ms: u64) -> Option<Duration> {
        if ttl_ms > MAX_TTL_MS {
            return None;
        }
        Duration::from_millis(ttl_ms)
            .checked_sub(self.drift(ttl_ms))
            .filter(|v| !v.is_zero())
    }
}

impl Default for DriftFactor {
    /// 0.01.
    fn default() -> Self {
        DriftFactor {
            value: 0.01,
            digits: 1,
            scale: 2,
        }
    }
}

/// The clock-drift allowance for a TTL: `ceil(ttl × factor) + 2 ms`,
/// computed exactly (see [`DriftFactor`]).
///
/// A factor outside `[0, 1)` or not finite is treated as 0 here (the builder
/// rejects it before it gets this far).
///
/// ```
/// use std::time::Duration;
/// use redquorum::quorum::drift;
/// assert_eq!(drift(10_000, 0.01), Duration::from_millis(102));
/// assert_eq!(drift(1, 0.01), Duration::from_millis(3)); // ceil(0.01) = 1
/// ```
pub fn drift(ttl_ms: u64, factor: f64) -> Duration {
    DriftFactor::new(factor)
        .unwrap_or(DriftFactor::ZERO)
        .drift(ttl_ms)
}

/// The part of a TTL a holder may rely on: `ttl − drift(ttl)`, or `None`
/// when the drift eats all of it (such a TTL can never yield a valid lock) or
/// the TTL exceeds [`MAX_TTL_MS`].
///
/// ```
/// use std::time::Duration;
/// use redquorum::quorum::validity;
/// assert_eq!(validity(10_000, 0.01), Some(Duration::from_millis(9_898)));
/// assert_eq!(validity(2, 0.01), None);
/// ```
pub fn validity(ttl_ms: u64, factor: f64) -> Option<Duration> {
    DriftFactor::new(factor)
        .unwrap_or(DriftFactor::ZERO)
        .validity(ttl_ms)
}

/// Validity left after `elapsed` of a window of `validity`: rounded down to
/// whole milliseconds and never negative.
///
/// ```
/// use std::time::Duration;
/// use redquorum::quorum::remaining;
/// let v = Duration::from_millis(100);
/// assert_eq!(remaining(v, Duration::from_micros(10_500)), Duration::from_millis(89));
/// assert_eq!(remaining(v, Duration::from_secs(1)), Duration::ZERO);
/// ```
pub fn remaining(validity: Duration, elapsed: Duration) -> Duration {
    let left = validity.saturating_sub(elapsed);
    Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
}

/// How long to wait for one node in a round: `min(node_timeout, validity)`,
/// where `node_timeout` defaults to `min(50 ms, ttl / 20)`.
///
/// A node that has not answered by then counts as failed; waiting longer
/// could only produce a lock whose validity is already gone.
///
/// ```
/// use std::time::Duration;
/// use redquorum::internals::node_timeout;
/// let v = Duration::from_millis(9_898);
/// assert_eq!(node_timeout(None, 10_000, v), Duration::from_millis(50));
/// assert_eq!(node_timeout(None, 200, Duration::from_millis(196)), Duration::from_millis(10));
/// assert_eq!(node_timeout(Some(Duration::from_secs(5)), 1_000, Duration::from_millis(988)),
///            Duration::from_millis(988));
/// ```
pub fn node_timeout(configured: Option<Duration>, ttl_ms: u64, validity: Duration) -> Duration {
    let timeout =
        configured.unwrap_or_else(|| DEFAULT_NODE_TIMEOUT.min(Duration::from_millis(ttl_ms / 20)));
    // A zero timeout would fail every round without asking; 1 ms is the floor.
    timeout.max(Duration::from_millis(1)).min(validity)
}

/// The settled or unsettled state of a [`Count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Not yet decided: more replies are needed.
    Pending,
    /// A quorum of nodes said yes.
    Granted,
    /// So many nodes said no (or failed) that a quorum of yes is impossible.
    Refused,
}

/// One node's answer, as far as the vote count is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vote {
    /// The node did what was asked (set, extended, released).
    Yes,
    /// The node refused, failed, or did not answer in time.
    No,
}

/// The vote count of one round over `n` nodes, deciding at the earliest
/// possible moment.
///
/// It grants as soon as `yes ≥ Q` and refuses as soon as `no > n − Q`
/// (grants can no longer reach `Q`). Once decided, the decision never changes,
/// and it is the same decision that counting every reply would give. Every
/// sequence of `n` votes decides, for odd and even `n`.
///
/// ```
/// use redquorum::internals::{Decision, Count, Vote};
/// let mut round = Count::new(5);
/// assert_eq!(round.record(Vote::Yes), Decision::Pending);
/// assert_eq!(round.record(Vote::No), Decision::Pending);
/// assert_eq!(round.record(Vote::Yes), Decision::Pending);
/// assert_eq!(round.record(Vote::Yes), Decision::Granted); // 3 of 5
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    n: usize,
    yes: usize,
    no: usize,
    decision: Decision,
}

impl Count {
    /// A round over `n` nodes with no votes yet. A round over zero nodes is
    /// refused from the start (there is no majority of nothing).
    pub fn new(n: usize) -> Self {
        let decision = if n == 0 {
            Decision::Refused
        } else {
            Decision::Pending
        };
        Count {
            n,
            yes: 0,
            no: 0,
            decision,
        }
    }

    /// Counts one node's vote and returns the decision so far.
    ///
    /// Votes beyond `n` are ignored: a node answers once per round.
    pub fn record(&mut self, vote: Vote) -> Decision {
        if self.yes + self.no >= self.n {
            return self.decision;
        }
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
        }
        if self.decision == Decision::Pending {
            let q = quorum(self.n);
            if self.yes >= q {
                self.decision = Decision::Granted;
            } else if self.no > self.n - q {
                self.decision = Decision::Refused;
            }
        }
        self.decision
    }

    /// The decision so far.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Nodes that said yes so far.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn yes(&self) -> usize {
        self.yes
    }

    /// Nodes that said no (or failed) so far.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn no(&self) -> usize {
        self.no
    }

    /// Nodes not heard from yet.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn pending(&self) -> usize {
        self.n - self.yes - self.no
    }

    /// The number of nodes in the round.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn nodes(&self) -> usize {
        self.n
    }
}
