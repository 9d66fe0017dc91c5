//! A held lock: its validity, extension and release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::claim::Claim;
use crate::engine::driver::{Driver, Held};
use crate::proto::error::LockError;
use crate::proto::quorum::{self, Decision};
use crate::proto::round::Step;
use crate::proto::round::{Mask, Wait};

/// A lock held on a quorum of nodes, valid until [`deadline`](Lock::deadline).
///
/// Mutual exclusion holds only while [`is_valid`](Lock::is_valid): check it
/// (or [`remaining`](Lock::remaining)) before each step of the critical
/// section, and [`extend`](Lock::extend) well before it runs out.
///
/// Dropping a `Lock` without calling [`release`](Lock::release) releases it in
/// the background if a tokio runtime is running; otherwise its keys expire
/// after the TTL. So a lock is held in a binding for as long as the work
/// runs: an unused one is a compile warning, and `let _ = redlock.lock(…)`
/// (which the compiler does not flag; clippy's `let_underscore_must_use`
/// does) releases it at once.
#[must_use = "dropping a Lock releases it at once (in the background): hold it for as long as the work needs the lock"]
pub struct Lock {
    driver: Arc<Driver>,
    claim: Arc<Claim>,
    /// The longest TTL set on the keys so far: bounds background clean-up.
    ttl_ms: u64,
    deadline: Instant,
    fence: Option<u64>,
    /// Whether a release has been handed to the nodes (by
    /// [`release`](Lock::release)); then `Drop` sends none: a hold is given
    /// back at most once.
    released: bool,
    /// The nodes its acquire was made to: the others hold nothing of it,
    /// and are sent no release.
    made: Mask,
    /// Its place among the client's holds (released by `shutdown`).
    slot: usize,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field(
                "resources",
                &self.claim.keys().resources().collect::<Vec<_>>(),
            )
            .field("token", &self.claim)
            .field("fence", &self.fence)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(driver: Arc<Driver>, held: Held) -> Self {
        Lock {
            slot: held.slot,
            driver,
            claim: held.claim,
            ttl_ms: held.ttl_ms,
            deadline: held.deadline,
            fence: held.fence,
            released: false,
            made: held.made,
        }
    }

    pub(crate) fn deadline_at(&self) -> Instant {
        self.deadline
    }

    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    pub(crate) fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// The resource this lock holds (the first one, for
    /// [`Redlock::lock_many`](crate::Redlock::lock_many)).
    pub fn resource(&self) -> &str {
        self.claim.keys().resources().next().unwrap_or_default()
    }

    /// Every resource this lock holds, in the order given.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let lock = redlock
    ///     .lock_many(&["account:1", "account:2"], std::time::Duration::from_secs(5))
    ///     .await?;
    /// assert_eq!(lock.resource(), "account:1");
    /// assert_eq!(lock.resources().collect::<Vec<_>>(), ["account:1", "account:2"]);
    /// lock.release().await
    /// # }
    /// ```
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> {
        self.claim.keys().resources()
    }

    /// What the nodes hold for this lock: a random token (32 hex
    /// characters), or the owner name of a reentrant lock.
    pub fn token(&self) -> &str {
        self.claim.token()
    }

    /// The fencing token of a lock from [`LockOptions::fenced`](crate::LockOptions::fenced): larger than
    /// that of every earlier holder of the resource. `None` for other locks.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// When the validity ends: `t0 + ttl − drift`, with `t0` read before the
    /// acquiring round sent its first request (or the last successful
    /// extension's start).
    pub fn deadline(&self) -> std::time::Instant {
        self.deadline.into_std()
    }

    /// Validity left, rounded down to whole milliseconds; zero once expired.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let lock = redlock.lock("report", Duration::from_secs(10)).await?;
    /// // The TTL less the round's time and the drift allowance (102 ms).
    /// assert!(lock.remaining() <= Duration::from_millis(9_898));
    /// assert!(lock.is_valid());
    /// lock.release().await
    /// # }
    /// ```
    pub fn remaining(&self) -> Duration {
        quorum::remaining(
            self.deadline.saturating_duration_since(Instant::now()),
            Duration::ZERO,
        )
    }

    /// Whether the lock is still valid: mutual exclusion holds only while this
    /// is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let lock = redlock.lock("report", Duration::from_secs(1)).await?;
    /// assert!(lock.is_valid());
    /// tokio::time::sleep(Duration::from_secs(1)).await; // paused clock: no real wait
    /// assert!(!lock.is_valid());
    /// # Ok(()) }
    /// ```
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Extends the lock to `ttl` from now, by a quorum of compare-and-expire
    /// operations.
    ///
    /// Must start while the lock is valid; succeeds when a quorum confirms
    /// before the new deadline (`start + ttl − drift`), and the deadline then
    /// becomes the later of the old and the new. (A quorum that still held
    /// our token when the extend arrived has held it without a gap, so an
    /// extend that finishes just after the old deadline is still safe.) On
    /// failure the deadline is unchanged and the lock is not released: it
    /// stays valid as before, though nodes that did confirm keep the longer
    /// expiry. No node's expiry is ever shortened.
    ///
    /// A plain or fenced lock's key that vanished from a node (restarted
    /// empty, or its clock ran ahead) is set again where absent — never
    /// over another holder's: in the round itself on a node restarted
    /// without persistence within the longest TTL (such a node counts toward
    /// no one else's grant, so the key there counts toward this extension),
    /// and elsewhere once a quorum confirmed, including nodes whose answer
    /// comes after the decision; never after the lock's release began
    /// (docs/design.md §4 and §4b). An expired lock is never brought back.
    ///
    /// # Errors
    ///
    /// [`LockError::Expired`] when the lock is gone (its validity over, or too
    /// few nodes still hold its token); [`LockError::Unavailable`] when too few
    /// nodes answered (the lock stays valid until its current deadline);
    /// [`LockError::Input`] for a TTL the protocol refuses; [`LockError::ShutDown`]
    /// once the client's shutdown began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future leaves the lock's deadline as it was; nodes that
    /// received the extension keep the longer expiry, under this lock's token,
    /// which no one else can use.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let mut lock = redlock.lock("report", Duration::from_secs(10)).await?;
    /// let before = lock.deadline();
    /// lock.extend(Duration::from_secs(30)).await?;
    /// assert!(lock.deadline() > before);
    /// # lock.release().await
    /// # }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        let ttl = self.driver.check_ttl(ttl)?;
        if Instant::now() < self.deadline {
            // Made at the first poll, whatever becomes of this future: a
            // release must cover the longer TTL.
            self.ttl_ms = self.ttl_ms.max(ttl.ms);
        }
        let extended = self
            .driver
            .extend(&self.claim, ttl, self.deadline, &mut self.made)
            .await;
        self.driver.telemetry.extended(&extended);
        self.deadline = extended?;
        Ok(())
    }

    /// Releases the lock on every node (compare-and-delete). Returns once a
    /// quorum has confirmed the key is gone; the other nodes get the release
    /// all the same. Fails with [`LockError::Unavailable`] when no quorum
    /// confirmed within the node timeout (the keys then expire by their TTL).
    ///
    /// The release is handed to the nodes at the first poll and happens at
    /// most once: dropping this future afterwards changes nothing, and
    /// dropping it before releases in the background, as dropping the lock
    /// does.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when so many nodes failed the release for
    /// good (an error reply, its resends spent) that its key may stay on a
    /// quorum until the lock's TTL ends: nobody else gets the lock before
    /// then. A release merely slower than the node timeout is no error: it
    /// returns once the node timeout has passed and is delivered in the
    /// background, and one whose connection fails is sent again on the
    /// node's next connection (docs/design.md §5).
    ///
    /// # Cancel safety
    ///
    /// The release is handed to the nodes at the first poll and happens at most
    /// once: dropping this future afterwards changes nothing; dropped before its
    /// first poll it sends nothing (the guard it consumed releases in the
    /// background when dropped).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let lock = redlock.lock("report", Duration::from_secs(10)).await?;
    /// lock.release().await?;
    /// // Free again at once: the key is gone from every node.
    /// redlock.try_lock("report", Duration::from_secs(10)).await?.release().await
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        // Set before the release is handed over, in the same poll: from here
        // on `Drop` must not release a second time.
        self.released = true;
        let driver = &self.driver;
        // Handed over as the lock leaves the table of holds, under its
        // lock: a `shutdown` on another thread either finds the lock there
        // and releases it itself, or begins after these calls were made —
        // never in between, when the nodes it closes would refuse them.
        let releasing = driver.holds.remove_with(self.slot, || {
            (!self.claim.is_released()).then(|| {
                driver.release_now(&self.claim, self.ttl_ms, Wait::Decision, Some(&self.made))
            })
        });
        let Some(releasing) = releasing else {
            return Ok(()); // by `Redlock::shutdown`
        };
        if Instant::now() >= self.deadline {
            self.driver.telemetry.expired();
        }
        let tally = self.driver.settle(releasing).await;
        match tally.decision {
            // Confirmed by a quorum, or still on its way to enough nodes
            // (delivered in the background, sent again on a node's next
            // connection): no key is left on a quorum.
            Decision::Granted | Decision::Pending => Ok(()),
            Decision::Refused => Err(LockError::Unavailable {
                votes: self.driver.votes(&self.claim, Step::Release, tally.answers),
            }),
        }
    }
}

impl Lock {
    /// Hands the lock over to whoever keeps its token, for a lock that
    /// outlives this guard — one a sidecar grants to another process, say:
    /// nothing is released, neither now, nor on drop, nor at
    /// [`Redlock::shutdown`](crate::Redlock::shutdown). Its keys live until
    /// their TTL, or until a release by token
    /// ([`Redlock::release_token`](crate::Redlock::release_token)). Returns
    /// the token.
    ///
    /// Read what the new keeper needs ([`deadline`](Self::deadline),
    /// [`fence`](Self::fence)) before: the guard is consumed. The lock's
    /// validity is no longer watched by this process; its keeper checks it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// use redquorum::testing::{MemoryNode, redlock_over};
    /// let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
    /// let (sidecar, other) = (redlock_over(&nodes).await, redlock_over(&nodes).await);
    ///
    /// let lock = sidecar.lock("report", Duration::from_secs(10)).await?;
    /// let token = lock.detach();
    /// sidecar.shutdown().await; // leaves it held…
    /// assert!(other.try_lock("report", Duration::from_secs(10)).await.is_err());
    /// // …until its keeper releases it by its token, through any client.
    /// assert_eq!(other.release_token("report", &token).await?.yes(), 5);
    /// other.try_lock("report", Duration::from_secs(10)).await?.release().await
    /// # }
    /// ```
    pub fn detach(mut self) -> String {
        self.released = true;
        self.driver.holds.remove_with(self.slot, || ());
        self.token().to_owned()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            let driver = &self.driver;
            driver.holds.remove_with(self.slot, || {
                driver.release_detached(&self.claim, self.ttl_ms, Some(&self.made));
            });
        }
    }
}
