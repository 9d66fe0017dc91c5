//! Extending a lock: one round to every node, and setting the key again on
//! the nodes that lost it (docs/design.md §4):
//!
//! - on a quarantined node (restarted without persistence within the
//!   longest TTL), in the round itself, and counted: no one else can count
//!   that node toward a grant, so the holder's key there is as good as one
//!   that survived (docs/design.md §4b). Decided where the call is written
//!   (`Claim::op_on`), by the quarantine of the connection it goes out on:
//!   a node restarted while the round was made is still reconnecting then;
//!   chosen when the round was made, its extension went out without the
//!   restore once the node's handshake found it restarted, and its "not
//!   held" could make a majority that ended a kept lease;
//! - on any other node, once a quorum granted: its "not held" before the
//!   decision, and one that arrives after it, within the call's grace
//!   ([`LateRestores`]) — whatever order the replies come in.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{Driver, Ttl, subject};
use crate::engine::ballot::Late;
use crate::engine::claim::Claim;
use crate::proto::error::{Answer, LockError, NodeError, Votes};
use crate::proto::op::Reply;
use crate::proto::quorum::{self, Decision};
use crate::proto::round::{Mask, Wait};
use crate::proto::round::{Step, refusal};

/// An extension: it sets a key again only on a node quarantined on the
/// connection it is written to (`Claim::op_on`).
const EXTEND: Step = Step::Extend { restore: false };
/// …and the restore: where the key is absent, it is set again.
const RESTORE: Step = Step::Extend { restore: true };

impl Driver {
    /// Extends `claim` to `ttl` from now, if it is still valid at
    /// `deadline`: the new deadline (the later of the two) once a quorum
    /// confirmed before it. `made` marks the nodes the lock's calls were
    /// made to (what its release goes to); every node an extension of a
    /// restorable lock is sent to joins them (a restore may follow there).
    pub(crate) async fn extend(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        ttl: Ttl,
        deadline: Instant,
        made: &mut Mask,
    ) -> Result<Instant, LockError> {
        if *self.closing.borrow() {
            // The shutdown released the lock: nothing is sent.
            return Err(LockError::ShutDown);
        }
        // Room among the calls in flight, waited for within the lease's
        // validity (a lease is kept, not failed, by a busy client).
        let wait = self
            .settings
            .node_timeout
            .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT);
        let places = self.room(EXTEND, deadline.min(Instant::now() + wait)).await;
        let t1 = Instant::now();
        if t1 >= deadline {
            return Err(LockError::Expired {
                votes: Votes::new(Box::new([])).about(subject(claim, EXTEND)),
            });
        }
        let new_deadline = t1 + ttl.validity;
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl.ms, ttl.validity);
        let restorable = claim.keys().restorable();
        let late = restorable.then(|| LateRestores::new(self, claim, ttl.ms));
        // Handed to every node at once: nodes that answer after the decision
        // get the extension all the same.
        let round = self.submit_with(
            claim,
            EXTEND,
            ttl.ms,
            None,
            Wait::Decision,
            late.clone().map(|late| {
                Arc::new(move |node: usize, outcome: &Result<Reply, NodeError>| {
                    late.answered(node, outcome);
                }) as Late
            }),
            Some(places),
        );
        if restorable {
            // Marked before anything is awaited: a restored key, even one
            // whose answer is never heard, goes with the lock's release.
            for (made, sent) in made.iter_mut().zip(&round.made) {
                *made |= *sent;
            }
        }
        let tally = self.collect(&round, t1 + per_node).await;
        let granted = tally.decision == Decision::Granted && Instant::now() < new_deadline;
        if let Some(late) = &late {
            late.decided(granted.then_some(new_deadline));
        }
        if !granted {
            return Err(refusal(
                tally.decision,
                self.votes(claim, EXTEND, tally.answers),
            ));
        }
        let lost = |a: &Answer| matches!(a, Answer::NotHeld);
        if restorable && tally.answers.iter().any(lost) {
            let lost: Mask = tally.answers.iter().map(lost).collect();
            self.restore(claim, ttl.ms, lost, per_node).await;
        }
        Ok(deadline.max(new_deadline))
    }

    /// After an extension a quorum granted: sets `claim`'s key again on the
    /// nodes marked in `lost`, which answered that they no longer hold it,
    /// where it is absent (restarted empty, or their clock ran ahead);
    /// waits at most `per_node`. Only what an acquire would do on a free
    /// node: docs/design.md §4 says why it is as safe, and why only after a
    /// quorum confirmed (an operator who deleted the keys everywhere, or a
    /// lease that lapsed, is never brought back). Changes no deadline.
    async fn restore(&self, claim: &Arc<Claim>, ttl_ms: u64, lost: Mask, per_node: Duration) {
        let timer = Instant::now() + per_node;
        let mut round = None;
        claim.unless_released(|| {
            round = Some(self.submit(
                claim,
                RESTORE,
                ttl_ms,
                Some(&lost),
                Wait::Nodes(lost.clone()),
            ));
        });
        let Some(round) = round else {
            return;
        };
        let tally = self.collect(&round, timer).await;
        if tally.restored > 0 {
            tracing::info!(
                nodes = tally.restored,
                "extend restored the lock on nodes that had lost it"
            );
            self.telemetry.restored(tally.restored);
        }
    }
}

/// Restores an extension's key on the nodes whose "not held" came after
/// the round stopped listening: held back until the decision is known,
/// then restored if a quorum granted and the new validity has not ended;
/// never after the lock's release began ([`Claim::unless_released`]). Its
/// calls are made from the node's I/O loop as the answer is read, and
/// delivered like any call; nobody waits for their answers.
pub(crate) struct LateRestores {
    driver: Weak<Driver>,
    claim: Arc<Claim>,
    ttl_ms: u64,
    /// How many nodes the client has.
    nodes: usize,
    state: Mutex<State>,
}

enum State {
    /// Not yet decided: the nodes whose late "not held" came.
    Deciding(Mask),
    /// Granted, valid until then.
    Granted(Instant),
    /// Refused: nothing is restored.
    Refused,
}

impl LateRestores {
    fn new(driver: &Arc<Driver>, claim: &Arc<Claim>, ttl_ms: u64) -> Arc<Self> {
        Arc::new(LateRestores {
            driver: Arc::downgrade(driver),
            claim: Arc::clone(claim),
            ttl_ms,
            nodes: driver.nodes.len(),
            state: Mutex::new(State::Deciding(Mask::from_elem(false, driver.nodes.len()))),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The extension was decided: granted and valid until `until`, or not
    /// (`None`). Restores the nodes whose late answers came meanwhile.
    fn decided(&self, until: Option<Instant>) {
        let next = until.map_or(State::Refused, State::Granted);
        let State::Deciding(waiting) = std::mem::replace(&mut *self.state(), next) else {
            return;
        };
        if until.is_some() && waiting.iter().any(|w| *w) {
            self.restore(&waiting);
        }
    }

    /// Node `node` answered after the decision.
    fn answered(&self, node: usize, outcome: &Result<Reply, NodeError>) {
        if !matches!(outcome, Ok(Reply::NotHeld)) {
            return;
        }
        let mut state = self.state();
        match &mut *state {
            State::Deciding(waiting) => waiting[node] = true,
            State::Granted(until) if Instant::now() < *until => {
                drop(state);
                let mut one = Mask::from_elem(false, self.nodes);
                one[node] = true;
                self.restore(&one);
            }
            State::Granted(_) | State::Refused => {}
        }
    }

    /// Makes the restore on the nodes marked in `nodes`, unless the lock's
    /// release has begun.
    fn restore(&self, nodes: &[bool]) {
        let Some(driver) = self.driver.upgrade() else {
            return;
        };
        let made = self.claim.unless_released(|| {
            drop(driver.submit(
                &self.claim,
                RESTORE,
                self.ttl_ms,
                Some(nodes),
                Wait::Decision,
            ));
        });
        if made {
            let count = nodes.iter().filter(|n| **n).count();
            tracing::info!(
                nodes = count,
                "extend restores the lock on nodes whose late answer said they had lost it"
            );
            driver.telemetry.restored(count);
        }
    }
}
