//! One round's tally: the replies and timeouts of the nodes in, the
//! decision, each node's answer, the fencing maximum, the nodes to clean up
//! and the error a failed round reports out.
//!
//! The driver makes the calls and reads the clock; everything a round
//! decides from what it heard is here:
//!
//! ```text
//! Round::new(step, asked, sets)   nodes not asked count as no; votes count in each member set
//!   on_reply(i, reply, quarantined)   a reply is a vote (see `vote`)
//!   on_timeout()                      every silent node counts as timed out (a
//!                                     release's: still being delivered)
//!   is_done(wait)                     stop listening? (a decision, or named nodes heard)
//! finish() -> Tally                   decision, answers, fence
//! Tally::granted() / touched()        who to release, waiting / behind the acquire
//! refusal(decision, votes)            the error of a round with no lock
//! ```

use std::time::Duration;

use crate::proto::error::{Answer, LockError, NodeError, Votes};
use crate::proto::joint::{Joint, Sets};
use crate::proto::op::{Reply, Snapshot};
use crate::proto::per_node::PerNode;
use crate::proto::quorum::{Decision, Vote};

/// What one node operation does to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `holder_ttl`: a refusal must say how long the holder's key lives (for
    /// a waiter, which sleeps on it).
    Acquire { holder_ttl: bool },
    /// `restore`: a node where the key is absent sets it again (plain and
    /// fenced locks; sent only to the nodes that did not confirm an
    /// extension a quorum granted: docs/design.md §4).
    Extend { restore: bool },
    /// The holder lets go: everything of the claim goes.
    Release,
    /// A refused round takes back what it was granted, and keeps what it
    /// marked for its retries (a writer's intent, where readers refused it).
    Undo,
    /// Fenced phase 2, carrying the fencing token to write back.
    WriteBack(u64),
    /// Read what the keys hold, changing nothing.
    Inspect,
}

impl Step {
    /// Whether a yes to this step makes a new grant (an acquire, a fenced
    /// write-back): what a quarantined node's yes does not count toward.
    pub(crate) fn grants(self) -> bool {
        matches!(self, Step::Acquire { .. } | Step::WriteBack(_))
    }

    /// Whether a yes to this step holds a lock: a grant, an extension or
    /// a write-back (releases, undos and inspections hold nothing).
    pub(crate) fn holds(self) -> bool {
        matches!(
            self,
            Step::Acquire { .. } | Step::Extend { .. } | Step::WriteBack(_)
        )
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Acquire { .. } => "acquire",
            Step::Extend { .. } => "extend",
            Step::Release | Step::Undo => "release",
            Step::WriteBack(_) => "fence-write-back",
            Step::Inspect => "inspect",
        }
    }
}

/// Node masks (which nodes, by index), inline for up to five nodes.
pub(crate) type Mask = smallvec::SmallVec<[bool; 5]>;

/// When a round stops listening.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// At the quorum decision (the calls still in flight go on).
    Decision,
    /// Once every node marked has answered (or the timer fired).
    Nodes(Mask),
}

/// A reply as a vote: done (or, for a release, already gone) is yes.
pub(crate) fn vote(step: Step, reply: &Result<Reply, NodeError>) -> Vote {
    match (step, reply) {
        (_, Ok(Reply::Done | Reply::Restored | Reply::Fence(_) | Reply::Snapshot(_)))
        | (Step::Release | Step::Undo, Ok(Reply::NotHeld)) => Vote::Yes,
        _ => Vote::No,
    }
}

/// A reply as the answer an error reports.
pub(crate) fn answer(reply: Result<Reply, NodeError>) -> Answer {
    match reply {
        Ok(Reply::Done | Reply::Restored | Reply::Fence(_) | Reply::Snapshot(_)) => Answer::Yes,
        Ok(Reply::Held { pttl_ms, ahead }) => Answer::Held {
            pttl: pttl_ms.map(Duration::from_millis),
            ahead,
        },
        Ok(Reply::NotHeld) => Answer::NotHeld,
        Ok(Reply::PermitsDiffer { permits }) => Answer::PermitsDiffer { permits },
        Err(e) => Answer::Failed(e),
    }
}

/// One round in progress.
#[derive(Debug)]
pub(crate) struct Round {
    step: Step,
    round: Joint,
    asked: PerNode<bool>,
    answers: PerNode<Answer>,
    fence: Option<u64>,
    /// What each node read, for an inspection (empty otherwise).
    snapshots: Vec<Option<Snapshot>>,
    /// Nodes where an extension set the lost key again.
    restored: usize,
}

impl Round {
    /// A round of `step` on the nodes marked in `asked` (the others count
    /// as no at once), granted by a majority of each of `sets`.
    pub(crate) fn new(step: Step, asked: &[bool], sets: &Sets) -> Self {
        let mut round = Joint::new(sets);
        for (i, _) in asked.iter().enumerate().filter(|(_, asked)| !**asked) {
            round.record(i, Vote::No);
        }
        Round {
            step,
            round,
            asked: asked.iter().copied().collect(),
            answers: PerNode::filled(Answer::Undecided, asked.len()),
            fence: None,
            restored: 0,
            snapshots: match step {
                Step::Inspect => vec![None; asked.len()],
                _ => Vec::new(),
            },
        }
    }

    /// Node `i` was asked and has not answered.
    pub(crate) fn waiting(&self, i: usize) -> bool {
        self.asked[i] && matches!(self.answers[i], Answer::Undecided)
    }

    /// Node `i` replied (once per node; a second reply is ignored).
    /// `quarantined`: the node restarted without persistence within the
    /// longest TTL, so its yes counts toward no new grant
    /// ([`restart`](crate::proto::restart)); it is still what the node did
    /// (released with the rest if the round fails).
    pub(crate) fn on_reply(
        &mut self,
        i: usize,
        reply: Result<Reply, NodeError>,
        quarantined: bool,
    ) {
        if !self.waiting(i) {
            return;
        }
        let vote = vote(self.step, &reply);
        if quarantined && self.step.grants() && vote == Vote::Yes {
            self.round.record(i, Vote::No);
            if let Ok(Reply::Fence(counter)) = reply {
                self.fence = self.fence.max(Some(counter));
            }
            self.answers[i] = Answer::Quarantined;
            return;
        }
        self.round.record(i, vote);
        let reply = match reply {
            Ok(Reply::Fence(counter)) => {
                self.fence = self.fence.max(Some(counter));
                Ok(Reply::Fence(counter))
            }
            Ok(Reply::Snapshot(snapshot)) if !self.snapshots.is_empty() => {
                self.snapshots[i] = Some(snapshot);
                Ok(Reply::Done)
            }
            Ok(Reply::Restored) => {
                self.restored += 1;
                Ok(Reply::Restored)
            }
            other => other,
        };
        self.answers[i] = answer(reply);
    }

    /// The round's timer fired: every node still silent timed out — but
    /// for a release (or a refused round's undo): one still on its way is
    /// delivered in the background, and sent again on the node's next
    /// connection if its own fails (design.md §11), so it stays undecided,
    /// and the round is refused only where so many nodes failed for good
    /// that the key may stay on a quorum until its TTL (docs/design.md §5).
    pub(crate) fn on_timeout(&mut self) {
        if matches!(self.step, Step::Release | Step::Undo) {
            return;
        }
        for i in 0..self.answers.len() {
            if self.waiting(i) {
                self.answers[i] = Answer::Failed(NodeError::TimedOut);
                self.round.record(i, Vote::No);
            }
        }
    }

    /// Whether the round may stop listening.
    pub(crate) fn is_done(&self, wait: &Wait) -> bool {
        match wait {
            Wait::Decision => self.round.decision() != Decision::Pending,
            Wait::Nodes(nodes) => (0..self.answers.len()).all(|i| !nodes[i] || !self.waiting(i)),
        }
    }

    /// Node `i`'s answer so far.
    pub(crate) fn answer(&self, i: usize) -> &Answer {
        &self.answers[i]
    }

    /// The decision so far, and the yes and no votes.
    pub(crate) fn counts(&self) -> (Decision, usize, usize) {
        (self.round.decision(), self.round.yes(), self.round.no())
    }

    /// The round's result.
    pub(crate) fn finish(self) -> Tally {
        Tally {
            decision: self.round.decision(),
            answers: self.answers,
            fence: self.fence,
            snapshots: self.snapshots,
            restored: self.restored,
        }
    }
}

/// A finished round.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) decision: Decision,
    /// Per node, in configured order.
    pub(crate) answers: PerNode<Answer>,
    /// The largest fencing counter granted.
    pub(crate) fence: Option<u64>,
    /// For an inspection: what each node read (`None` where it did not
    /// answer; its answer says why).
    pub(crate) snapshots: Vec<Option<Snapshot>>,
    /// For an extension: the nodes where it set the lost key again.
    pub(crate) restored: usize,
}

impl Tally {
    /// The nodes that answered yes.
    pub(crate) fn granted(&self) -> PerNode<bool> {
        self.answers.iter().map(|a| *a == Answer::Yes).collect()
    }

    /// The nodes an acquire may have changed: granted, no answer, or an
    /// unreadable one. A node that refused, that refused the call before it
    /// was sent (not connected, overloaded) or failed before running the
    /// script holds nothing of the claim — but for a writer's intent, which
    /// a refusing node marks and keeps while the writer retries (the driver
    /// takes it back when the writer gives up).
    pub(crate) fn touched(&self) -> PerNode<bool> {
        self.answers.iter().map(may_have_applied).collect()
    }
}

fn may_have_applied(answer: &Answer) -> bool {
    matches!(
        answer,
        Answer::Yes
            | Answer::Quarantined
            | Answer::Undecided
            | Answer::Failed(
                NodeError::TimedOut | NodeError::Connection(_) | NodeError::Protocol(_)
            )
    )
}

/// Whether a failed extension shows the lock gone for good: too few nodes
/// still hold the token to ever make a quorum of `quorum` (an operator
/// released it, or nodes lost their data), or no votes at all (it had
/// already expired). Written without a subtraction: `len − quorum` would
/// underflow for the empty votes of an expired lock.
pub(crate) fn gone_for_good(votes: &Votes, quorum: usize) -> bool {
    votes.not_held() + quorum > votes.len()
}

/// The error for a round that did not produce a lock.
pub(crate) fn refusal(decision: Decision, votes: Votes) -> LockError {
    let differ = votes.iter().find_map(|(_, a)| match a {
        Answer::PermitsDiffer { permits } => Some(*permits),
        _ => None,
    });
    if decision == Decision::Granted {
        // A quorum agreed, but after the validity window closed.
        LockError::Expired { votes }
    } else if let Some(held_under) = differ {
        LockError::PermitCount { held_under, votes }
    } else if votes.held() > 0 {
        LockError::Taken { votes }
    } else if votes.iter().any(|(_, a)| *a == Answer::NotHeld) {
        LockError::Expired { votes }
    } else if saturated(&votes) {
        LockError::Busy { votes }
    } else {
        LockError::Unavailable { votes }
    }
}

/// Whether the client's own bound kept the quorum out of reach: the nodes
/// that said yes and the healthy ones it did not call for want of room
/// ([`NodeError::Saturated`]) make a quorum.
fn saturated(votes: &Votes) -> bool {
    let refused = votes.count(|a| matches!(a, Answer::Failed(NodeError::Saturated(_))));
    refused > 0 && votes.yes() + refused >= crate::proto::quorum::quorum(votes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(step: Step, asked: &[bool]) -> Round {
        Round::new(step, asked, &Sets::all(asked.len()))
    }

    fn held() -> Result<Reply, NodeError> {
        Ok(Reply::Held {
            pttl_ms: Some(5),
            ahead: None,
        })
    }

    /// A release still on its way when the timer fires is no failure: it
    /// is delivered in the background (or sent again on the next
    /// connection). The round is refused only where so many nodes failed
    /// for good that the key may stay on a quorum. Before, every silent
    /// node counted as timed out, and a release merely slower than the
    /// node timeout was an error while its keys were gone a moment later.
    #[test]
    fn a_release_on_its_way_is_no_failure() {
        let mut late = round(Step::Release, &[true; 5]);
        late.on_reply(0, Ok(Reply::Done), false);
        late.on_reply(1, Ok(Reply::NotHeld), false);
        late.on_timeout();
        let tally = late.finish();
        assert_eq!(tally.decision, Decision::Pending);
        assert_eq!(tally.answers[4], Answer::Undecided);

        let mut failed = round(Step::Release, &[true; 5]);
        failed.on_reply(0, Ok(Reply::Done), false);
        for i in 1..4 {
            let denied = NodeError::NoPermission("NOPERM".into());
            failed.on_reply(i, Err(denied), false);
        }
        failed.on_timeout();
        assert_eq!(failed.finish().decision, Decision::Refused);

        // An acquire's silent nodes still time out.
        let mut acquire = round(Step::Acquire { holder_ttl: false }, &[true; 5]);
        acquire.on_reply(0, Ok(Reply::Done), false);
        acquire.on_timeout();
        assert_eq!(acquire.finish().decision, Decision::Refused);
    }

    #[test]
    fn decides_at_the_quorum_and_keeps_every_answer() {
        let step = Step::Acquire { holder_ttl: false };
        let mut c = round(step, &[true; 5]);
        c.on_reply(0, Ok(Reply::Done), false);
        c.on_reply(1, Ok(Reply::Done), false);
        assert!(!c.is_done(&Wait::Decision));
        c.on_reply(1, held(), false); // a second reply changes nothing
        c.on_reply(2, Ok(Reply::Done), false);
        assert!(c.is_done(&Wait::Decision));
        assert!(!c.is_done(&Wait::Nodes(smallvec::smallvec![
            false, false, false, true, false
        ])));
        c.on_timeout();
        let tally = c.finish();
        assert_eq!(tally.decision, Decision::Granted);
        assert_eq!(*tally.granted(), [true, true, true, false, false]);
        // Silent nodes may have applied it: they are released too.
        assert_eq!(*tally.touched(), [true; 5]);
        assert_eq!(tally.answers[4], Answer::Failed(NodeError::TimedOut));
    }

    #[test]
    fn nodes_not_asked_vote_no_and_are_never_waited_for() {
        let mut c = round(Step::Release, &[true, false, true]);
        assert!(!c.waiting(1));
        c.on_reply(0, Ok(Reply::NotHeld), false); // gone already: a yes for a release
        c.on_reply(2, Ok(Reply::Done), false);
        assert!(c.is_done(&Wait::Nodes(smallvec::smallvec![true, true, true])));
        assert_eq!(c.finish().decision, Decision::Granted);
    }

    #[test]
    fn a_quarantined_yes_counts_toward_no_grant_but_toward_extensions() {
        let acquire = Step::Acquire { holder_ttl: false };
        let mut c = round(acquire, &[true; 5]);
        for i in 0..3 {
            c.on_reply(i, Ok(Reply::Done), true);
        }
        c.on_reply(3, Ok(Reply::Done), false);
        c.on_reply(4, held(), false);
        let tally = c.finish();
        assert_eq!(tally.decision, Decision::Refused);
        assert_eq!(tally.answers[0], Answer::Quarantined);
        // What the quarantined nodes set is released with the rest.
        assert_eq!(*tally.touched(), [true, true, true, true, false]);
        assert_eq!(*tally.granted(), [false, false, false, true, false]);
        // A fenced write-back is part of a grant too.
        let mut c = round(Step::WriteBack(7), &[true; 3]);
        c.on_reply(0, Ok(Reply::Done), true);
        c.on_reply(1, Ok(Reply::Done), true);
        c.on_reply(2, Ok(Reply::Done), false);
        assert_eq!(c.finish().decision, Decision::Refused);
        // An extension (or a restore) on a quarantined node counts: the key
        // there is the holder's, and no one else can count that node.
        let mut c = round(Step::Extend { restore: true }, &[true; 3]);
        c.on_reply(0, Ok(Reply::Restored), true);
        c.on_reply(1, Ok(Reply::Done), true);
        assert!(c.is_done(&Wait::Decision));
        assert_eq!(c.finish().decision, Decision::Granted);
        // Refusals from quarantined nodes are refusals.
        let mut c = round(acquire, &[true; 3]);
        c.on_reply(0, held(), true);
        c.on_reply(1, held(), false);
        let tally = c.finish();
        assert_eq!(tally.decision, Decision::Refused);
        assert!(matches!(tally.answers[0], Answer::Held { .. }));
    }

    #[test]
    fn fences_keep_the_maximum_and_refusals_are_classified() {
        let step = Step::Acquire { holder_ttl: true };
        let mut c = round(step, &[true; 3]);
        c.on_reply(0, Ok(Reply::Fence(7)), false);
        c.on_reply(1, Ok(Reply::Fence(9)), false);
        c.on_reply(2, Err(NodeError::NotConnected("down".into())), false);
        let tally = c.finish();
        assert_eq!(tally.fence, Some(9));
        // Refused before it was sent: nothing to release there.
        assert_eq!(*tally.touched(), [true, true, false]);

        let votes = |answers: Vec<Answer>| {
            Votes::new(answers.into_iter().map(|a| ("n".into(), a)).collect())
        };
        let taken = votes(vec![
            Answer::Held {
                pttl: None,
                ahead: None,
            },
            Answer::Yes,
        ]);
        assert!(matches!(
            refusal(Decision::Refused, taken),
            LockError::Taken { .. }
        ));
        let gone = votes(vec![Answer::NotHeld, Answer::Yes]);
        assert!(matches!(
            refusal(Decision::Refused, gone),
            LockError::Expired { .. }
        ));
        let late = votes(vec![Answer::Yes, Answer::Yes]);
        assert!(matches!(
            refusal(Decision::Granted, late),
            LockError::Expired { .. }
        ));
        let down = votes(vec![Answer::Failed(NodeError::TimedOut)]);
        assert!(!gone_for_good(&down, 1));
        let released = votes(vec![Answer::NotHeld, Answer::NotHeld, Answer::Yes]);
        assert!(gone_for_good(&released, 2));
        assert!(gone_for_good(&votes(vec![]), 2));
        assert!(matches!(
            refusal(Decision::Refused, down),
            LockError::Unavailable { .. }
        ));
    }
}
