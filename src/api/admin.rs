//! Operator actions on locks this process does not hold.

use std::sync::Arc;

use crate::api::redlock::Redlock;
use crate::api::semaphore::Semaphore;
use crate::engine::claim::{Claim, Keys};
use crate::proto::error::{LockError, Votes};
use crate::proto::quorum;
use crate::proto::round::Step;
use crate::proto::round::Wait;
use crate::settings::DEFAULT_NODE_TIMEOUT;

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
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Input`] for a name or token the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// Each node's release is handed over at the first poll and happens at most
    /// once: dropping this future afterwards changes nothing.
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
    /// Errors: [`LockError::Input`] for an empty resource or token (nothing
    /// is sent); [`LockError::Unavailable`] when fewer than a quorum of nodes
    /// confirmed within the node timeout (the key then lives on where it was
    /// not deleted until its TTL).
    pub async fn release_token(&self, resource: &str, token: &str) -> Result<Votes, LockError> {
        let keys = Keys::single(self.driver().layout(), resource, false)?;
        self.release_claim(Claim::with_token(keys, token)?).await
    }

    /// [`release_token`](Self::release_token) for a read/write lock
    /// ([`RwLock::release_token`](crate::RwLock::release_token)).
    pub(crate) async fn release_token_rw(
        &self,
        resource: &str,
        token: &str,
    ) -> Result<Votes, LockError> {
        let layout = self.driver().layout();
        let writer = Claim::with_token(Keys::rw(layout, resource, true)?, token)?;
        let reader = Claim::with_token(Keys::rw(layout, resource, false)?, token)?;
        let (writer, reader) =
            futures::future::join(self.release_claim(writer), self.release_claim(reader)).await;
        let (writer, reader) = (writer?, reader?);
        // Per node: what either release did.
        Ok(writer.merge(&reader))
    }

    /// Releases `claim` on every node, hearing each out up to the node
    /// timeout.
    pub(crate) async fn release_claim(&self, claim: Claim) -> Result<Votes, LockError> {
        let claim = Arc::new(claim);
        let driver = self.driver();
        // The TTL is unknown: take one whose default node timeout is the
        // client's default.
        let ttl_ms = u64::try_from(DEFAULT_NODE_TIMEOUT.as_millis() * 20).unwrap_or(1000);
        let everyone = Wait::Nodes(std::iter::repeat_n(true, self.nodes().len()).collect());
        let tally = driver.release(&claim, ttl_ms, everyone, None).await;
        match tally.decision {
            quorum::Decision::Granted => Ok(driver.votes(&claim, Step::Release, tally.answers)),
            _ => Err(LockError::Unavailable {
                votes: driver.votes(&claim, Step::Release, tally.answers),
            }),
        }
    }
}

/// The slots a semaphore's release by token asks at once: bounded well
/// below any node's calls in flight.
const SLOTS_AT_ONCE: usize = 64;

impl Semaphore {
    /// [`Redlock::release_token`] for a permit: the slot holding `token`
    /// is released wherever it does (the holder is counted out with it),
    /// whichever slot it is. Every slot is asked, 64 at a time; each node
    /// answers [`Answer::Yes`](crate::Answer::Yes) where one of them held
    /// `token`.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Input`] for a name or token the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// Each node's release is handed over at the first poll and happens at most
    /// once: dropping this future afterwards changes nothing.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let api = Semaphore::new(&redlock, "partner-api", 3)?;
    /// let permit = api.try_acquire(std::time::Duration::from_secs(60)).await?;
    /// let votes = api.release_token(permit.lock().token()).await?;
    /// assert_eq!(votes.yes(), 5);
    /// # std::mem::forget(permit);
    /// # Ok(()) }
    /// ```
    ///
    /// Errors as [`Redlock::release_token`]'s, for any slot.
    pub async fn release_token(&self, token: &str) -> Result<Votes, LockError> {
        let redlock = self.redlock();
        let slots: Vec<u32> = (0..self.permits()).collect();
        let mut merged: Option<Votes> = None;
        for chunk in slots.chunks(SLOTS_AT_ONCE) {
            let claims = chunk
                .iter()
                .map(|slot| Claim::with_token(self.slot_keys(*slot)?, token))
                .collect::<Result<Vec<_>, _>>()?;
            let released =
                futures::future::join_all(claims.into_iter().map(|c| redlock.release_claim(c)))
                    .await;
            for votes in released {
                let votes = votes?;
                merged = Some(match merged {
                    Some(all) => all.merge(&votes),
                    None => votes,
                });
            }
        }
        merged.ok_or(LockError::Input(
            crate::proto::input::InputError::InvalidPermits(0),
        ))
    }
}
