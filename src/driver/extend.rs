//! Extending a lock: one round to every node, and restoring the key on the
//! nodes that lost it once a quorum granted (docs/design.md §4).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Driver, Ttl, subject};
use crate::ballot::{Mask, Until};
use crate::claim::Claim;
use crate::error::{Answer, LockError, Votes};
use crate::proto::quorum::{self, Decision};
use crate::proto::round::{Step, refusal};

/// An extension as first sent: it never sets a key again.
const EXTEND: Step = Step::Extend { restore: false };

impl Driver {
    /// Extends `claim` to `ttl` from now, if it is still valid at
    /// `deadline`: the new deadline (the later of the two) once a quorum
    /// confirmed before it. `made` marks the nodes the lock's calls were
    /// made to (what its release goes to); a node its key is restored on
    /// joins them.
    pub(crate) async fn extend(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        deadline: Instant,
        made: &mut Mask,
    ) -> Result<Instant, LockError> {
        let t1 = Instant::now();
        if t1 >= deadline {
            return Err(LockError::Expired {
                votes: Votes::new(Box::new([])).about(subject(claim, EXTEND)),
            });
        }
        let new_deadline = t1 + ttl.validity;
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl.ms, ttl.validity);
        // Handed to every node at once: nodes that answer after the decision
        // get the extension all the same.
        let round = self.submit(claim, EXTEND, ttl.ms, None, Until::Decision);
        let tally = self.collect(&round, t1 + per_node).await;
        if tally.decision != Decision::Granted || Instant::now() >= new_deadline {
            return Err(refusal(
                tally.decision,
                self.votes(claim, EXTEND, tally.answers),
            ));
        }
        let lost = |a: &Answer| matches!(a, Answer::NotHeld);
        if claim.keys().restorable() && tally.answers.iter().any(lost) {
            let lost: Mask = tally.answers.iter().map(lost).collect();
            // Marked before the calls are made: a restored key, even one
            // whose answer is never heard, goes with the lock's release.
            for (made, lost) in made.iter_mut().zip(&lost) {
                *made |= *lost;
            }
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
        let round = self.submit(
            claim,
            Step::Extend { restore: true },
            ttl_ms,
            Some(&lost.clone()),
            Until::Nodes(lost),
        );
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
