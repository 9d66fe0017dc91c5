//! One acquisition as a state machine: what follows each round.
//!
//! ```text
//! acquire round ──▶ granted, with fencing counters ──▶ WriteBack(max counter, to the grants)
//!        │                                                   │ write-back round
//!        ▼                                                   ▼
//!   granted and still valid ──▶ Granted { fence }   ◀── granted and still valid
//!   otherwise ──▶ Refused: release where the *acquire* granted (waiting), and
//!                 where it may have applied (silent, unreadable: behind it)
//! ```
//!
//! The driver runs the rounds and says how long the acquisition has taken
//! so far; everything decided from that is here: whether a grant is still
//! valid, and how long each round waits for a node.

use std::time::Duration;

use crate::proto::error::Answer;
use crate::proto::per_node::PerNode;
use crate::proto::quorum::{Decision, node_timeout};
use crate::proto::round::Tally;

/// What the driver does after a round of an acquisition.
#[derive(Debug)]
pub(crate) enum Next {
    /// Fenced phase 2: write `fence` back to the nodes marked in `to`,
    /// waiting `node_timeout` at most for each (what is left of the
    /// validity bounds it).
    WriteBack {
        fence: u64,
        to: PerNode<bool>,
        node_timeout: Duration,
    },
    /// The lock is held (with its fencing token, for a fenced lock).
    Granted { fence: Option<u64> },
    /// No lock: release on `wait_for` (waiting for their answers) and on
    /// `behind` (without waiting), then report `decision` and `answers`.
    Refused {
        wait_for: PerNode<bool>,
        behind: PerNode<bool>,
        decision: Decision,
        answers: PerNode<Answer>,
    },
}

/// An acquisition between its rounds.
#[derive(Debug)]
pub(crate) struct Acquisition {
    /// How long a grant stays valid from the first request
    /// ([`Ttl`](crate::proto::input::Ttl)'s validity).
    validity: Duration,
    ttl_ms: u64,
    /// The node timeout the client was given, if any.
    configured: Option<Duration>,
    /// The acquire round's tally, once a write-back round follows it.
    first: Option<Tally>,
    fence: Option<u64>,
}

impl Acquisition {
    /// An acquisition of a lock of `ttl_ms`, valid for `validity` from its
    /// first request, on a client given the node timeout `configured`.
    pub(crate) fn new(validity: Duration, ttl_ms: u64, configured: Option<Duration>) -> Self {
        Acquisition {
            validity,
            ttl_ms,
            configured,
            first: None,
            fence: None,
        }
    }

    /// How long the acquire round waits for each node
    /// ([`node_timeout`]).
    pub(crate) fn node_timeout(&self) -> Duration {
        node_timeout(self.configured, self.ttl_ms, self.validity)
    }

    /// After a round, `elapsed` after the first request: the acquire round
    /// first, then (for a fenced lock) the write-back round. A grant counts
    /// only while `elapsed` is within the validity.
    pub(crate) fn next(&mut self, tally: Tally, elapsed: Duration) -> Next {
        if self.first.is_none()
            && let (Decision::Granted, Some(fence)) = (tally.decision, tally.fence)
        {
            let to = tally.granted();
            self.first = Some(tally);
            self.fence = Some(fence);
            let left = self.validity.saturating_sub(elapsed);
            return Next::WriteBack {
                fence,
                to,
                node_timeout: node_timeout(self.configured, self.ttl_ms, left),
            };
        }
        if tally.decision == Decision::Granted && elapsed < self.validity {
            return Next::Granted { fence: self.fence };
        }
        // The keys were set by the acquire round: clean up where it acted.
        let acquire = self.first.as_ref().unwrap_or(&tally);
        let (wait_for, behind) = (acquire.granted(), acquire.touched());
        let decision = tally.decision;
        // A write-back asks only the nodes that granted: the others say
        // what they said to the acquire (held, failed), not "not waited
        // for".
        let mut answers = tally.answers;
        if let Some(first) = &self.first {
            for (second, first) in answers.iter_mut().zip(first.answers.iter()) {
                if *second == Answer::Undecided && *first != Answer::Yes {
                    *second = first.clone();
                }
            }
        }
        Next::Refused {
            wait_for,
            behind,
            decision,
            answers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::error::NodeError;
    use crate::proto::op::Reply;
    use crate::proto::round::{Round, Step};

    fn tally(step: Step, replies: Vec<Option<Result<Reply, NodeError>>>) -> Tally {
        let mut c = Round::new(
            step,
            &vec![true; replies.len()],
            &crate::proto::joint::Sets::all(replies.len()),
        );
        for (i, reply) in replies.into_iter().enumerate() {
            if let Some(reply) = reply {
                c.on_reply(i, reply, false);
            }
        }
        c.on_timeout();
        c.finish()
    }

    const ACQUIRE: Step = Step::Acquire { holder_ttl: false };
    const IN_TIME: Duration = Duration::from_millis(10);
    const TOO_LATE: Duration = Duration::from_millis(980);

    /// A lock of 1 s, valid for 980 ms, on a client of default settings.
    fn acquisition() -> Acquisition {
        Acquisition::new(Duration::from_millis(980), 1_000, None)
    }

    /// A write-back that fails reports, for the nodes it did not ask, what
    /// they answered the acquire: before, "not waited for", and an
    /// `Unavailable` whose message counted 0 answers with 4 nodes healthy.
    #[test]
    fn a_failed_write_back_reports_the_acquires_answers_for_the_others() {
        let mut a = acquisition();
        let held = || {
            Some(Ok(Reply::Held {
                pttl_ms: Some(5),
                ahead: None,
            }))
        };
        let t = tally(
            ACQUIRE,
            vec![
                Some(Ok(Reply::Fence(3))),
                Some(Ok(Reply::Fence(3))),
                Some(Ok(Reply::Fence(3))),
                held(),
                held(),
            ],
        );
        let Next::WriteBack { to, .. } = a.next(t, IN_TIME) else {
            panic!("a write-back follows")
        };
        let mut c = Round::new(
            Step::WriteBack(3),
            &to,
            &crate::proto::joint::Sets::all(to.len()),
        );
        c.on_reply(0, Ok(Reply::Done), false);
        c.on_reply(1, Err(NodeError::TimedOut), false);
        c.on_reply(2, Ok(Reply::NotHeld), false);
        match a.next(c.finish(), IN_TIME) {
            Next::Refused { answers, .. } => {
                assert_eq!(answers[0], Answer::Yes);
                assert!(matches!(answers[3], Answer::Held { .. }), "{answers:?}");
                assert!(matches!(answers[4], Answer::Held { .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plain_grant_in_time_is_held() {
        let t = tally(
            ACQUIRE,
            vec![Some(Ok(Reply::Done)), Some(Ok(Reply::Done)), None],
        );
        assert!(matches!(
            acquisition().next(t, IN_TIME),
            Next::Granted { fence: None }
        ));
    }

    #[test]
    fn a_grant_too_late_is_released_where_it_acted() {
        let t = tally(
            ACQUIRE,
            vec![Some(Ok(Reply::Done)), Some(Ok(Reply::Done)), None],
        );
        match acquisition().next(t, TOO_LATE) {
            Next::Refused {
                wait_for,
                behind,
                decision,
                ..
            } => {
                assert_eq!(decision, Decision::Granted);
                assert_eq!(*wait_for, [true, true, false]);
                assert_eq!(*behind, [true, true, true]); // the silent one too
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fenced_grant_writes_the_maximum_back_then_holds() {
        let mut a = acquisition();
        let t = tally(
            ACQUIRE,
            vec![
                Some(Ok(Reply::Fence(4))),
                Some(Ok(Reply::Fence(9))),
                Some(Ok(Reply::Held {
                    pttl_ms: None,
                    ahead: None,
                })),
            ],
        );
        match a.next(t, IN_TIME) {
            Next::WriteBack {
                fence,
                to,
                node_timeout,
            } => {
                assert_eq!(fence, 9);
                assert_eq!(*to, [true, true, false]);
                assert_eq!(node_timeout, a.node_timeout());
            }
            other => panic!("{other:?}"),
        }
        let back = tally(
            Step::WriteBack(9),
            vec![Some(Ok(Reply::Done)), Some(Ok(Reply::Done)), None],
        );
        assert!(matches!(
            a.next(back, IN_TIME),
            Next::Granted { fence: Some(9) }
        ));
    }

    #[test]
    fn a_failed_write_back_releases_where_the_acquire_granted() {
        let mut a = acquisition();
        let t = tally(
            ACQUIRE,
            vec![
                Some(Ok(Reply::Fence(1))),
                Some(Ok(Reply::Fence(1))),
                Some(Err(NodeError::NotConnected("down".into()))),
            ],
        );
        assert!(matches!(a.next(t, IN_TIME), Next::WriteBack { .. }));
        let back = tally(
            Step::WriteBack(1),
            vec![Some(Ok(Reply::NotHeld)), Some(Ok(Reply::NotHeld)), None],
        );
        match a.next(back, IN_TIME) {
            Next::Refused {
                wait_for,
                behind,
                decision,
                answers,
            } => {
                assert_eq!(decision, Decision::Refused);
                assert_eq!(*wait_for, [true, true, false]);
                // Node 3 refused before the acquire was sent: nothing there.
                assert_eq!(*behind, [true, true, false]);
                assert_eq!(answers[0], Answer::NotHeld);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Each round waits for a node the node timeout, never past the
    /// validity: the write-back, what is left of it.
    #[test]
    fn rounds_wait_at_most_the_validity_left() {
        let slow = Some(Duration::from_secs(5));
        let mut a = Acquisition::new(Duration::from_millis(980), 1_000, slow);
        assert_eq!(a.node_timeout(), Duration::from_millis(980));
        let t = tally(
            ACQUIRE,
            vec![Some(Ok(Reply::Fence(2))), Some(Ok(Reply::Fence(2))), None],
        );
        let Next::WriteBack { node_timeout, .. } = a.next(t, Duration::from_millis(900)) else {
            panic!("a write-back follows")
        };
        assert_eq!(node_timeout, Duration::from_millis(80));
        // The default: 50 ms, or a 20th of the TTL.
        let quick = Acquisition::new(Duration::from_millis(196), 200, None);
        assert_eq!(quick.node_timeout(), Duration::from_millis(10));
    }
}
