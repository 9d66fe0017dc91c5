//! What can go wrong, with enough detail to act on it.
//!
//! A failed round reports every node's answer ([`Votes`]), so "taken" can be
//! told apart from "two nodes down" and from "the quorum came too late", and
//! an operator can see *which* node is misbehaving.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::input::InputError;
pub use node::NodeError;

mod node;

/// The error of every lock operation.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LockError {
    /// Other holders kept a quorum out of reach: at least one node holds the
    /// resource under another token.
    Taken {
        /// Every node's answer.
        votes: Votes,
    },
    /// Too many nodes failed or did not answer in time to reach a quorum, and
    /// no node reported another holder.
    Unavailable {
        /// Every node's answer.
        votes: Votes,
    },
    /// The client itself had too many calls in flight to the nodes
    /// ([`Builder::max_in_flight`](crate::Builder::max_in_flight)), however
    /// long the round waited for room: the nodes are healthy, the caller
    /// makes more calls at once than the bound allows. Nothing is held.
    Busy {
        /// Every node's answer (the ones not called
        /// [`NodeError::Saturated`]).
        votes: Votes,
    },
    /// The validity window closed or the lease is gone: an acquire whose
    /// quorum came only after its window had closed (whatever it set has been
    /// released), or an extend started after the deadline (nothing sent) or
    /// refused because nodes no longer hold our token.
    Expired {
        /// Every node's answer (empty when the lock had expired beforehand).
        votes: Votes,
    },
    /// A waiting lock ([`LockOptions::wait`](crate::LockOptions::wait)) waited its maximum and
    /// the resource was still not had.
    Timeout {
        /// How long was waited.
        waited: Duration,
        /// The error of the last attempt.
        last: Box<LockError>,
    },
    /// A held lease could not be kept alive before its validity ran out; the
    /// work under it was stopped.
    Lost {
        /// The resource whose lease was lost.
        resource: String,
    },
    /// Invalid input to the call: nothing was sent to any node.
    Input(InputError),
    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown))
    /// before this call got what it asked: an acquisition made after the
    /// shutdown began (nothing was sent), or one still in flight or waiting
    /// when it began, whatever it had set on the nodes — the lock had its
    /// round granted it, a writer's intent, a place in line — released by
    /// the shutdown before it returned. Nothing is held; the client takes
    /// no more locks.
    ShutDown,
    /// A semaphore asked with a permit count other than the one its live
    /// holders were granted under ([`Answer::PermitsDiffer`]): every holder
    /// of a semaphore must name the same count. Nothing was taken.
    PermitCount {
        /// The count the nodes' holders were granted under.
        held_under: u32,
        /// Every node's answer.
        votes: Votes,
    },
}

impl LockError {
    /// The same error, about `subject` (for its message).
    pub(crate) fn about(self, subject: Subject) -> Self {
        match self {
            LockError::Taken { votes } => LockError::Taken {
                votes: votes.about(subject),
            },
            LockError::Unavailable { votes } => LockError::Unavailable {
                votes: votes.about(subject),
            },
            LockError::Expired { votes } => LockError::Expired {
                votes: votes.about(subject),
            },
            LockError::PermitCount { held_under, votes } => LockError::PermitCount {
                held_under,
                votes: votes.about(subject),
            },
            other => other,
        }
    }

    /// The per-node answers of the round that failed, where there was one.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            LockError::Taken { votes }
            | LockError::Unavailable { votes }
            | LockError::Busy { votes }
            | LockError::Expired { votes }
            | LockError::PermitCount { votes, .. } => Some(votes),
            LockError::Timeout { last, .. } => last.votes(),
            LockError::Lost { .. } | LockError::Input(_) | LockError::ShutDown => None,
        }
    }
}

/// One node's answer in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The node did what was asked.
    Yes,
    /// The node holds the resource for someone else; `pttl` is the holder's
    /// remaining time to live, if it has one and the round asked.
    Held {
        /// The other holder's remaining TTL. `None`: the key has no expiry,
        /// or the round did not ask. Only waiting acquisitions
        /// (with [`LockOptions::wait`](crate::LockOptions::wait)) and the
        /// reentrant, multi-resource and fenced scripts report it; a plain
        /// single try is one native `SET NX PX`, which does not.
        pttl: Option<Duration>,
        /// For a waiter in the lock's line (fair waiting): how many waiters
        /// not yet served are ahead of it on this node, counted up to 64.
        /// `None`: the round did not wait in line.
        ahead: Option<u32>,
    },
    /// The node does not hold our token (for extend: the lease is gone there).
    NotHeld,
    /// The node failed.
    Failed(NodeError),
    /// The round was decided before this node answered.
    Undecided,
    /// The node granted, but restarted without persistence less than the
    /// longest TTL ago (`Builder::max_ttl`): it may have forgotten another
    /// holder's key, so its yes counts toward no new grant until it has
    /// been up that long (docs/operations.md, restarts). What it set is
    /// released like any grant.
    Quarantined,
    /// A semaphore's live holders on the node were granted under this
    /// permit count, not the one asked with ([`LockError::PermitCount`]).
    PermitsDiffer {
        /// The count they were granted under.
        permits: u32,
    },
}

/// Every node's answer in one round, in node order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Votes {
    nodes: Box<[(Arc<str>, Answer)]>,
    /// What the round was for, for messages.
    subject: Subject,
}

/// What a round was for: what an error's message names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Subject {
    #[default]
    Unnamed,
    /// A lock on `resources` (shown as given, comma-separated), of `kind`
    /// (`plain`, `read`, `write`…), in a round of `step` (`acquire`,
    /// `extend`, `release`).
    Lock {
        resources: Arc<str>,
        kind: &'static str,
        step: &'static str,
    },
    /// All `permits` permits of the semaphore `name`.
    Permits { name: Arc<str>, permits: u32 },
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Unnamed => f.write_str("the lock"),
            Subject::Lock { resources, .. } => write!(f, "{resources:?}"),
            Subject::Permits { name, permits } => {
                write!(f, "the semaphore {name:?} ({permits} permits)")
            }
        }
    }
}

impl Votes {
    pub(crate) fn new(nodes: Box<[(Arc<str>, Answer)]>) -> Self {
        Votes {
            nodes,
            subject: Subject::Unnamed,
        }
    }

    /// The same votes, for a round about `subject`.
    pub(crate) fn about(mut self, subject: Subject) -> Self {
        self.subject = subject;
        self
    }

    /// What the round was for.
    pub(crate) fn subject(&self) -> &Subject {
        &self.subject
    }

    /// `(node, answer)` pairs in the configured node order; the node name has
    /// any password masked.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Answer)> {
        self.nodes.iter().map(|(n, a)| (&**n, a))
    }

    /// How many nodes answered [`Answer::Yes`].
    pub fn yes(&self) -> usize {
        self.count(|a| matches!(a, Answer::Yes))
    }

    /// How many nodes hold the resource for someone else.
    pub fn held(&self) -> usize {
        self.count(|a| matches!(a, Answer::Held { .. }))
    }

    /// How many nodes no longer hold our token (extend, write-back).
    pub fn not_held(&self) -> usize {
        self.count(|a| matches!(a, Answer::NotHeld))
    }

    /// How many nodes failed or timed out.
    pub fn failed(&self) -> usize {
        self.count(|a| matches!(a, Answer::Failed(_)))
    }

    /// The smallest TTL another holder reported, if any did.
    pub fn min_pttl(&self) -> Option<Duration> {
        self.nodes
            .iter()
            .filter_map(|(_, a)| match a {
                Answer::Held { pttl, .. } => *pttl,
                _ => None,
            })
            .min()
    }

    /// The fewest waiters any node reported ahead of this round's waiter
    /// in line, if it waited in line.
    pub fn min_ahead(&self) -> Option<u32> {
        self.nodes
            .iter()
            .filter_map(|(_, a)| match a {
                Answer::Held { ahead, .. } => *ahead,
                _ => None,
            })
            .min()
    }

    /// The number of nodes in the round.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there were no nodes (only for errors raised before a round).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Per node, `self`'s answer unless `other`'s is [`Answer::Yes`]: what
    /// either of two rounds over the same nodes did (releasing a token that
    /// may be of either of two kinds). The nodes are `self`'s, in its order.
    pub(crate) fn merge(&self, other: &Votes) -> Votes {
        let nodes = self
            .nodes
            .iter()
            .map(|(name, mine)| {
                let theirs = other.nodes.iter().find(|(n, _)| n == name).map(|(_, a)| a);
                match theirs {
                    Some(Answer::Yes) => (name.clone(), Answer::Yes),
                    _ => (name.clone(), mine.clone()),
                }
            })
            .collect();
        Votes {
            nodes,
            subject: self.subject.clone(),
        }
    }

    /// How many nodes' answers satisfy `f`.
    pub fn count(&self, f: impl Fn(&Answer) -> bool) -> usize {
        self.nodes.iter().filter(|(_, a)| f(a)).count()
    }
}

/// One node's answer, as messages say it.
impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Yes => f.write_str("yes"),
            Answer::Held { pttl, ahead } => {
                f.write_str("held by another holder")?;
                if let Some(t) = pttl {
                    write!(f, ", {} ms left", t.as_millis())?;
                }
                match ahead {
                    Some(0) => f.write_str(", next in line"),
                    Some(n) => write!(f, ", {n} ahead in line"),
                    None => Ok(()),
                }
            }
            Answer::NotHeld => f.write_str("not held by us"),
            Answer::Failed(e) => write!(f, "{e}"),
            Answer::Undecided => f.write_str("not waited for (the round had decided)"),
            Answer::Quarantined => f.write_str(
                "yes, not counted: quarantined (it restarted, or was first seen, within the \
                 longest TTL and may have forgotten keys)",
            ),
            Answer::PermitsDiffer { permits } => {
                write!(f, "its holders have {permits} permits")
            }
        }
    }
}

/// The nodes' answers: a count, then each node's (`{:#}`: one node per
/// line).
impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let undecided = self.count(|a| matches!(a, Answer::Undecided));
        let mut parts = vec![format!("{} yes", self.yes())];
        for (n, what) in [
            (self.held(), "held by another holder"),
            (self.not_held(), "not held by us"),
            (self.failed(), "failed"),
            (
                self.count(|a| matches!(a, Answer::PermitsDiffer { .. })),
                "with another permit count",
            ),
            (
                self.count(|a| matches!(a, Answer::Quarantined)),
                "quarantined (yes not counted)",
            ),
            (undecided, "not waited for"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        write!(f, "{} of {} nodes", parts.join(", "), self.len())?;
        for (node, answer) in self.iter() {
            if f.alternate() {
                write!(f, "\n  {node}: {answer}")?;
            } else {
                write!(f, "; {node}: {answer}")?;
            }
        }
        Ok(())
    }
}

impl LockError {
    /// The sentence that says what happened and what to do, before the
    /// nodes' answers.
    fn summary(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Taken { votes } => {
                let subject = votes.subject();
                let left = votes
                    .min_pttl()
                    .map(|t| format!(", the first for {} ms more", t.as_millis()))
                    .unwrap_or_default();
                match subject {
                    Subject::Permits { .. } => write!(
                        f,
                        "every permit of {subject} is held{left}: try again later, or wait \
                         for one (LockOptions::wait)"
                    ),
                    Subject::Lock { kind: "read", .. } => write!(
                        f,
                        "{subject} has a writer, or a writer waiting for it ({} nodes refused \
                         the reader{left}): try again later, or wait (LockOptions::wait)",
                        votes.held()
                    ),
                    Subject::Lock { kind: "write", .. } => write!(
                        f,
                        "{subject} is held by its readers or another writer on {} nodes{left}: \
                         wait for it (LockOptions::wait); a waiting writer keeps new readers off",
                        votes.held()
                    ),
                    _ => write!(
                        f,
                        "{subject} is held by another holder on {} nodes{left}: try again \
                         later, or wait for its release (LockOptions::wait)",
                        votes.held()
                    ),
                }
            }
            LockError::Unavailable { votes } => {
                write!(
                    f,
                    "{}: only {} of {} nodes answered yes, {} needed",
                    votes.subject(),
                    votes.yes(),
                    votes.len(),
                    votes.len() / 2 + 1
                )?;
                let quarantined = votes.count(|a| matches!(a, Answer::Quarantined));
                if quarantined > 0 {
                    write!(
                        f,
                        "; {quarantined} quarantined (restarted, or first seen, within the \
                         longest TTL) count toward no new lock until they have been up for it \
                         (docs/operations.md, restarts)"
                    )?;
                }
                // One piece of advice per kind of failure, in node order.
                let mut advice: Vec<&str> = Vec::new();
                for (_, answer) in votes.iter() {
                    if let Answer::Failed(e) = answer
                        && let Some(a) = e.advice()
                        && !advice.contains(&a)
                    {
                        advice.push(a);
                    }
                }
                if !advice.is_empty() {
                    write!(f, ": {}", advice.join("; "))?;
                }
                Ok(())
            }
            LockError::Busy { votes } => write!(
                f,
                "{}: this client had too many calls in flight to {} nodes, waiting for room \
                 as long as the round could: make fewer calls at once, or raise \
                 Builder::max_in_flight",
                votes.subject(),
                votes.count(|a| matches!(a, Answer::Failed(NodeError::Saturated(_))))
            ),
            LockError::Expired { votes } if votes.is_empty() => write!(
                f,
                "{}: the lock's validity had ended before the call; it is no longer held",
                votes.subject()
            ),
            LockError::Expired { votes } => match votes.subject() {
                Subject::Lock {
                    step: "acquire", ..
                } => write!(
                    f,
                    "{}: a quorum granted it only after its validity had passed (it was \
                     released): use a longer TTL, or a shorter node timeout",
                    votes.subject()
                ),
                subject => write!(
                    f,
                    "{subject}: no longer held on a quorum ({} nodes no longer hold it): it \
                     expired, or was released by an operator",
                    votes.not_held()
                ),
            },
            LockError::Timeout { waited, last } => {
                write!(f, "gave up after waiting {} ms: {last}", waited.as_millis())
            }
            LockError::Lost { resource } => write!(
                f,
                "the lease on {resource:?} was lost: it could not be extended before its \
                 validity ended, and the work was stopped"
            ),
            LockError::Input(e) => write!(f, "invalid input: {e}"),
            LockError::ShutDown => f.write_str(
                "the client was shut down (Redlock::shutdown): nothing is held, whatever the \
                 call had set on the nodes was released; build a new client to lock again",
            ),
            LockError::PermitCount { held_under, votes } => {
                let asked = match votes.subject() {
                    Subject::Permits { permits, .. } => format!(" with {permits}"),
                    _ => String::new(),
                };
                write!(
                    f,
                    "{} is held by holders granted {held_under} permits, not asked{asked}: \
                     every holder must name the same count (change it once they are gone)",
                    votes.subject()
                )
            }
        }
    }
}

/// What happened and what to do, then the nodes' answers (`{:#}`: one node
/// per line).
impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.summary(f)?;
        match self {
            LockError::Taken { votes }
            | LockError::Unavailable { votes }
            | LockError::Busy { votes }
            | LockError::Expired { votes }
            | LockError::PermitCount { votes, .. }
                if !votes.is_empty() =>
            {
                if f.alternate() {
                    write!(f, "\n{votes:#}")
                } else {
                    write!(f, " ({votes})")
                }
            }
            _ => Ok(()),
        }
    }
}

/// No source: every message already says its cause (an error reporter that
/// walks sources would print it twice).
impl std::error::Error for LockError {}

impl From<InputError> for LockError {
    fn from(e: InputError) -> Self {
        LockError::Input(e)
    }
}

#[cfg(test)]
mod tests;
