//! Reentrant locks ([`ReentrantLock`]).

use std::time::Duration;

use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::engine::claim::Keys;
use crate::proto::error::LockError;
use crate::proto::input::InputError;
use crate::settings::AcquireOptions;

/// A reentrant lock: its owner may take the resource again while it holds
/// it (each hold adds one to a per-owner count and refreshes the TTL),
/// another owner is refused with [`LockError::Taken`], and each
/// [`Lock::release`] gives one hold back; the key goes when the count
/// reaches zero.
///
/// The owner name is the identity: give every process (or task) that must
/// exclude the others a distinct one. Quorum and validity rules are those
/// of plain locks; each returned [`Lock`] has its own deadline. Its keys
/// are apart from a plain lock's on the same resource name.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redquorum::LockError> {
/// # let redlock = redquorum::testing::redlock(5).await;
/// use std::time::Duration;
/// use redquorum::ReentrantLock;
/// let job = ReentrantLock::new(&redlock, "job", "worker-7")?;
/// let outer = job.lock(Duration::from_secs(10)).await?;
/// let inner = job.lock(Duration::from_secs(10)).await?;
/// inner.release().await?; // still held by `outer`
/// outer.release().await
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a ReentrantLock does nothing until a hold is asked of it"]
pub struct ReentrantLock {
    redlock: Redlock,
    name: String,
    owner: String,
}

impl ReentrantLock {
    /// The reentrant lock on `name` held as `owner`, on `redlock`'s nodes.
    /// [`InputError::EmptyResource`] for an empty name,
    /// [`InputError::EmptyOwner`] for an empty owner.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let job = redquorum::ReentrantLock::new(&redlock, "job", "worker-7")?;
    /// assert_eq!((job.name(), job.owner()), ("job", "worker-7"));
    /// # Ok(()) }
    /// ```
    pub fn new(redlock: &Redlock, name: &str, owner: &str) -> Result<ReentrantLock, InputError> {
        crate::proto::input::check_name(name)?;
        if owner.is_empty() {
            return Err(InputError::EmptyOwner);
        }
        Ok(ReentrantLock {
            redlock: redlock.clone(),
            name: name.to_owned(),
            owner: owner.to_owned(),
        })
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner it holds as.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// One more hold, retrying per policy: granted while no other owner
    /// holds the resource.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while another owner holds
    /// it; [`LockError::Unavailable`], [`LockError::Busy`],
    /// [`LockError::Expired`], [`LockError::Input`] (a TTL the protocol
    /// refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no
    /// hold is left behind that nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let job = redquorum::ReentrantLock::new(&redlock, "job", "worker-7")?;
    /// let hold = job.lock(std::time::Duration::from_secs(10)).await?;
    /// hold.release().await
    /// # }
    /// ```
    pub async fn lock(&self, ttl: Duration) -> Result<Lock, LockError> {
        self.lock_with(ttl, &AcquireOptions::new()).await
    }

    /// [`lock`](Self::lock) with [`AcquireOptions`]: how long to wait, a
    /// label.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); a wait that ends first:
    /// [`LockError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, ReentrantLock};
    /// let job = ReentrantLock::new(&redlock, "job", "worker-7")?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let hold = job.lock_with(Duration::from_secs(10), &wait).await?;
    /// hold.release().await
    /// # }
    /// ```
    pub async fn lock_with(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
    ) -> Result<Lock, LockError> {
        let keys = Keys::reentrant(self.redlock.driver().layout(), &self.name)?;
        self.redlock
            .lock_keys(keys, Some(&self.owner), ttl, options, None)
            .await
    }
}
