//! One acquisition: its round (two for a fenced lock), and on failure, or
//! when its future is dropped midway, the release of every key it may have
//! set — on every node, those that have not answered yet included.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Driver, Held, Ttl};
use crate::engine::claim::Claim;
use crate::proto::acquire::{Acquisition, Next};
use crate::proto::error::{Answer, LockError};
use crate::proto::round::{Mask, Step, Wait, refusal};

impl Driver {
    /// One acquisition: one round, or two for a fenced lock. `holder_ttl`:
    /// a refusal must say how long the holder's keys live.
    ///
    /// On failure every key the round may have set is released before it
    /// returns (waiting for the nodes that granted; the others get the
    /// release behind the acquire), and so it is if this future is dropped.
    pub(crate) async fn acquire(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        holder_ttl: bool,
    ) -> Result<Held, LockError> {
        // Nodes still connecting for the first time, this client's other
        // round for the resource (crate::engine::turns) and room among the calls in
        // flight are waited for before the round's clock starts — unless
        // the shutdown begins meanwhile.
        // Interop keys: every refusal reports the holder's time to live, so
        // that a peer holding longer than the longest TTL is named at the
        // first round that meets it (docs/migrating.md).
        let holder_ttl = holder_ttl || self.layout.interop();
        let step = Step::Acquire { holder_ttl };
        let wait = self
            .settings
            .node_timeout
            .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT);
        let (places, _turn) = self
            .unless_closing(async {
                self.first_connections().await;
                // A waiter the lock is kept for cannot lose to another
                // round of its client: it takes no turn.
                let turn = match claim.keys().exclusive() && !claim.kept_for_it() {
                    true => Some(self.turns.take(claim.keys().first()).await),
                    false => None,
                };
                (self.room(step, Instant::now() + wait).await, turn)
            })
            .await?;
        // The clock is read before the first request leaves.
        let t0 = Instant::now();
        let deadline = t0 + ttl.validity;
        let mut acquisition = Acquisition::new(ttl.validity, ttl.ms, self.settings.node_timeout);
        // Made and registered among the client's claims at once, unless the
        // shutdown began: from here on a shutdown releases whatever the
        // round sets, behind it (crate::engine::holds).
        let made = self.holds.admit(claim, || {
            self.submit_with(
                claim,
                step,
                ttl.ms,
                None,
                Wait::Decision,
                None,
                Some(places),
            )
        });
        let Some((slot, round)) = made else {
            return Err(LockError::ShutDown);
        };
        // If this future is dropped from here on, the guard releases whatever
        // the round may have set: on every node the acquire was handed to,
        // behind it. (A reentrant release names its hold, so where the hold
        // was not counted it changes nothing.) So it does when the shutdown
        // ends the round: the shutdown released the claim already, and the
        // guard sends nothing more.
        let mut guard = Abandoned {
            driver: self,
            claim,
            ttl_ms: ttl.ms,
            only: round.made.clone(),
            armed: true,
        };
        // Calls still in flight go on when the round stops listening: the
        // lock reaches every node that answers, not a bare quorum.
        let mut tally = self
            .unless_closing(self.collect(&round, t0 + acquisition.node_timeout()))
            .await?;
        loop {
            let now = Instant::now();
            match acquisition.next(tally, now.saturating_duration_since(t0)) {
                Next::WriteBack {
                    fence,
                    to,
                    node_timeout,
                } => {
                    // Fenced phase 2, bounded by what is left of the validity.
                    let step = Step::WriteBack(fence);
                    let round = self
                        .holds
                        .unless_closed(|| {
                            self.submit(claim, step, ttl.ms, Some(&to), Wait::Decision)
                        })
                        .ok_or(LockError::ShutDown)?;
                    tally = self
                        .unless_closing(self.collect(&round, now + node_timeout))
                        .await?;
                }
                Next::Granted { fence } => {
                    // A lock from here on, unless the shutdown began (it
                    // released the claim: the caller gets no lock). A lock
                    // held at least a while is kept so from its grant, and
                    // so by the release of a shutdown that begins later.
                    if !self.holds.grant(slot, || claim.granted()) {
                        return Err(LockError::ShutDown);
                    }
                    guard.armed = false; // the Lock owns the keys now
                    if let Some(fence) = fence {
                        claim.granted_fence(fence);
                    }
                    return Ok(Held {
                        claim: Arc::clone(claim),
                        ttl_ms: ttl.ms,
                        deadline,
                        fence,
                        made: guard.only.clone(),
                        slot,
                    });
                }
                Next::Refused {
                    wait_for,
                    behind,
                    decision,
                    answers,
                } => {
                    // Wait for the nodes that granted, so that a retry never
                    // meets our own leftovers there; the others (silent,
                    // possibly frozen) get the release behind the acquire.
                    guard.armed = false; // handed over at the release's first poll
                    // Its deletions wake none of this client's waiters: the
                    // round never held the lock (made before the undo's
                    // calls, so before they can be reported).
                    if let Some(hub) = &self.hub {
                        let (channels, nonce) = claim.notices();
                        hub.mute(channels, nonce);
                    }
                    let wait = Wait::Nodes(wait_for.iter().copied().collect());
                    let undo = self.give_back(Step::Undo, claim, ttl.ms, wait, Some(&behind));
                    if !claim.keys().marks_refusals() && !claim.waits_in_line() {
                        // The undo leaves nothing of it on the nodes: a
                        // shutdown has nothing to release. (A waiter's
                        // place in line and a writer's intent stand: its
                        // wait takes them back, or the shutdown.)
                        claim.release_begins();
                    }
                    self.settle(undo).await;
                    let step = Step::Acquire { holder_ttl };
                    let error = refusal(decision, self.votes(claim, step, answers));
                    self.holders_within_max_ttl(claim, &error);
                    return Err(error);
                }
            }
        }
    }

    /// A refusal that met a holder's key with more time to live than the
    /// longest TTL: a WARN and `redquorum_ttl_above_max_total`. Such a holder
    /// (an interop peer, or a client with a longer `max_ttl`) can outlive a
    /// restarted node's quarantine, and then share the lock with a client of
    /// this one (docs/migrating.md).
    fn holders_within_max_ttl(&self, claim: &Claim, error: &LockError) {
        // A period's mark (once per period) outlives max_ttl by design, and
        // refuses with its time left.
        let Some(votes) = error
            .votes()
            .filter(|_| claim.keys().period_key().is_none())
        else {
            return;
        };
        let max_ttl = self.settings.max_ttl;
        for (node, answer) in votes.iter() {
            if let Answer::Held {
                pttl: Some(left), ..
            } = answer
                && *left > max_ttl
            {
                tracing::warn!(
                    node,
                    key = %claim.keys().first(),
                    ttl_left_ms = left.as_millis() as u64,
                    max_ttl_ms = max_ttl.as_millis() as u64,
                    "a holder's key lives longer than the longest TTL: a peer (interop keys) or a \
                     client with a longer max_ttl, whose lock can outlive a restarted node's \
                     quarantine; every client of these nodes must hold at most max_ttl \
                     (docs/migrating.md)"
                );
                crate::telemetry::ttl_above_max(node);
            }
        }
    }
}

/// Releases an acquisition's keys if the acquiring future is dropped
/// before it produced a `Lock` or handed over its clean-up: cancelling a
/// `lock()` call never leaves a key behind for the TTL.
struct Abandoned<'a> {
    driver: &'a Driver,
    claim: &'a Arc<Claim>,
    ttl_ms: u64,
    /// The nodes the acquire was handed to.
    only: Mask,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.driver
                .release_detached(self.claim, self.ttl_ms, Some(&self.only));
        }
    }
}
