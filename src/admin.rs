//! Operator actions on locks this process does not hold.

use std::sync::Arc;

use crate::ballot::Until;
use crate::claim::{Claim, Keys};
use crate::error::{LockError, Votes};
use crate::proto::round::Step;
use crate::quorum::{self, DEFAULT_NODE_TIMEOUT};
use crate::redlock::Redlock;

impl Redlock {
    /// Releases the lock on `resource` held under `token`, on behalf of
    /// whoever holds it: an operator clearing the lock of a holder that is
    /// gone or stuck (`redquorum release RESOURCE --token T`).
    ///
    /// Compare-and-delete on every node: the lock key is deleted only where
    /// it still holds exactly `token`, so a mistyped or stale token never
    /// removes anyone else's lock. Unlike [`Lock::release`](crate::Lock::release)
    /// it hears every node out, up to the node timeout, so the returned
    /// [`Votes`] tell what happened where: [`Answer::Yes`](crate::Answer::Yes)
    /// where the key was deleted, [`Answer::NotHeld`](crate::Answer::NotHeld)
    /// where `token` did not hold it (already gone, or someone else's).
    /// `Ok` once a quorum confirmed the resource is not held by `token`; a
    /// token that held it nowhere is `Ok` with no `Yes` vote.
    ///
    /// Applies to plain and fenced locks. A reentrant lock's hold counts are
    /// left alone (its owner gives them back, or they expire), and the
    /// fencing counter is never touched.
    ///
    /// The holder, if it is still running, finds out at its next extension:
    /// a lease ([`Redlock::run`], [`Lock::keep_alive`](crate::Lock::keep_alive))
    /// then reports the loss.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let votes = redlock
    ///     .release_token("cron:nightly", "3f9c0a6d2b7e41c58e0f6a1d9b2c4e7f")
    ///     .await?;
    /// if votes.yes() == 0 {
    ///     eprintln!("that token held the lock on no node that answered");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: [`LockError::Config`] for an empty resource or token (nothing
    /// is sent); [`LockError::Unavailable`] when fewer than a quorum of nodes
    /// confirmed within the node timeout (the key then lives on where it was
    /// not deleted until its TTL).
    pub async fn release_token(&self, resource: &str, token: &str) -> Result<Votes, LockError> {
        let keys = Keys::single(self.driver().layout(), resource, false)?;
        let claim = Arc::new(Claim::with_token(keys, token)?);
        let driver = self.driver();
        // The TTL is unknown: take one whose default node timeout is the
        // client's default.
        let ttl_ms = u64::try_from(DEFAULT_NODE_TIMEOUT.as_millis() * 20).unwrap_or(1000);
        let everyone = Until::Nodes(std::iter::repeat_n(true, self.nodes().count()).collect());
        let tally = driver.release(&claim, ttl_ms, everyone, None).await;
        match tally.decision {
            quorum::Decision::Granted => Ok(driver.votes(&claim, Step::Release, tally.answers)),
            _ => Err(LockError::Unavailable {
                votes: driver.votes(&claim, Step::Release, tally.answers),
            }),
        }
    }
}
