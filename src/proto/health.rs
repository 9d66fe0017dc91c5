//! When a node counts as degraded, from the outcomes of its calls: the
//! decision behind the one warning an operator sees when a node starts
//! failing and the one note when it recovers.
//!
//! A node is degraded after [`FAILURES_TO_DEGRADE`] failed calls in a row
//! (no answer within the node timeout, over the in-flight bound, or an error
//! reply) — or at once when it is unreachable (no connection: that is no
//! passing hiccup) — and recovers at its next call answered in time. Each
//! change is reported once, never per call; a degradation is announced at
//! most once per [`QUIET`] per node (a flapping node does not flood the
//! log), and a recovery only when its degradation was announced.

use std::fmt;
use std::time::{Duration, Instant};

/// Failed calls in a row that make a node degraded.
pub(crate) const FAILURES_TO_DEGRADE: u32 = 2;

/// A node's degradation is announced at most once per this long.
pub(crate) const QUIET: Duration = Duration::from_secs(10);

/// How a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No answer within the node timeout.
    TimedOut,
    /// No connection: refused, reset, or dropped after the grace.
    Unreachable,
    /// The client's bound on calls in flight to the node was reached.
    Overloaded,
    /// The node answered with an error (permissions, a script error…).
    Error,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Failure::TimedOut => "timing out",
            Failure::Unreachable => "unreachable",
            Failure::Overloaded => "overloaded",
            Failure::Error => "answering with errors",
        })
    }
}

/// A change of a node's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The node is degraded now.
    Degraded {
        /// How its last call failed.
        why: Failure,
        /// Whether to tell the operator (not within [`QUIET`] of the last
        /// announcement).
        announce: bool,
    },
    /// The node answered again.
    Recovered {
        /// How long it was degraded.
        after: Duration,
        /// How many calls failed meanwhile (the ones that made it degraded
        /// included).
        failed: u64,
        /// Whether to tell the operator (its degradation was announced).
        announce: bool,
    },
}

/// One node's state, fed with the outcome of every call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tracker {
    in_a_row: u32,
    degraded: Option<Degraded>,
    last_announced: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Degraded {
    since: Instant,
    failed: u64,
    announced: bool,
}

impl Tracker {
    /// Whether the node is degraded now.
    pub(crate) fn is_degraded(&self) -> bool {
        self.degraded.is_some()
    }

    /// A call ended at `now`: answered (`None`) or failed. Returns the
    /// change of state, if any.
    pub(crate) fn on(&mut self, failure: Option<Failure>, now: Instant) -> Option<Change> {
        let Some(why) = failure else {
            self.in_a_row = 0;
            let was = self.degraded.take()?;
            return Some(Change::Recovered {
                after: now.saturating_duration_since(was.since),
                failed: was.failed,
                announce: was.announced,
            });
        };
        self.in_a_row = self.in_a_row.saturating_add(1);
        if let Some(degraded) = &mut self.degraded {
            degraded.failed += 1;
            return None;
        }
        if self.in_a_row < FAILURES_TO_DEGRADE && why != Failure::Unreachable {
            return None;
        }
        let announce = self
            .last_announced
            .is_none_or(|last| now.saturating_duration_since(last) >= QUIET);
        if announce {
            self.last_announced = Some(now);
        }
        self.degraded = Some(Degraded {
            since: now,
            failed: u64::from(self.in_a_row),
            announced: announce,
        });
        Some(Change::Degraded { why, announce })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_when_a_node_degrades_and_one_note_when_it_recovers() {
        let t0 = Instant::now();
        let mut node = Tracker::default();
        assert_eq!(node.on(Some(Failure::TimedOut), t0), None); // one is noise
        assert_eq!(
            node.on(Some(Failure::TimedOut), t0),
            Some(Change::Degraded {
                why: Failure::TimedOut,
                announce: true
            })
        );
        assert_eq!(node.on(Some(Failure::TimedOut), t0), None); // never per call
        assert_eq!(
            node.on(None, t0 + Duration::from_secs(3)),
            Some(Change::Recovered {
                after: Duration::from_secs(3),
                failed: 3,
                announce: true
            })
        );
    }

    #[test]
    fn an_answer_between_failures_keeps_a_node_healthy() {
        let t = Instant::now();
        let mut node = Tracker::default();
        for _ in 0..100 {
            assert_eq!(node.on(Some(Failure::TimedOut), t), None);
            assert_eq!(node.on(None, t), None);
        }
        assert!(!node.is_degraded());
    }

    #[test]
    fn an_unreachable_node_is_degraded_at_once() {
        let t = Instant::now();
        let mut node = Tracker::default();
        assert!(matches!(
            node.on(Some(Failure::Unreachable), t),
            Some(Change::Degraded {
                why: Failure::Unreachable,
                announce: true
            })
        ));
    }

    #[test]
    fn a_flapping_node_is_announced_once_per_quiet_period() {
        let t0 = Instant::now();
        let mut node = Tracker::default();
        let mut announced = 0;
        // Down and up again every second for a minute.
        for s in 0..60 {
            let now = t0 + Duration::from_secs(s);
            for _ in 0..3 {
                if let Some(Change::Degraded { announce: true, .. }) =
                    node.on(Some(Failure::TimedOut), now)
                {
                    announced += 1;
                }
            }
            let recovered = node.on(None, now + Duration::from_millis(500));
            assert!(matches!(recovered, Some(Change::Recovered { .. })));
        }
        assert_eq!(announced, 6, "one announcement per 10 s over 60 s");
    }

    #[test]
    fn a_recovery_is_announced_only_after_an_announced_degradation() {
        let t0 = Instant::now();
        let mut node = Tracker::default();
        node.on(Some(Failure::Overloaded), t0);
        node.on(Some(Failure::Overloaded), t0);
        assert!(matches!(
            node.on(None, t0),
            Some(Change::Recovered {
                announce: true,
                failed: 2,
                ..
            })
        ));
        node.on(Some(Failure::Error), t0);
        assert!(matches!(
            node.on(Some(Failure::Error), t0),
            Some(Change::Degraded {
                announce: false,
                ..
            })
        ));
        assert!(matches!(
            node.on(None, t0),
            Some(Change::Recovered {
                announce: false,
                ..
            })
        ));
    }
}
