//! Read/write locks over a quorum: any number of readers of a resource
//! together, or one writer alone.
//!
//! On each node a resource `R` has three keys in one hash slot
//! ([`KeyLayout::rw_keys`](crate::KeyLayout::rw_keys)): the *writer* key
//! `{R}:writer` (a plain lock's string, holding the writer's token), the
//! *readers* key `{R}:readers` (a sorted set of reader tokens, each scored by
//! its expiry on the node's clock) and the *intent* key `{R}:intent`. A node
//! adds a reader only while no writer key stands, and sets the writer key
//! only while no live reader does: on every node a reader's entry and a
//! writer's key never live at once, exactly as two holders' keys of a mutex
//! never do. A lock — read or write — is valid only while a quorum of its
//! entries lives (the mutex's rule: validity `ttl − elapsed − drift`), and
//! any two quorums share a node, so a valid write lock never overlaps
//! another valid lock. The proof is in `docs/design.md` §9b.
//!
//! **Writers are not starved.** A writer refused by readers marks the
//! writer's *intent* on that node, and a node refuses new readers while an
//! intent stands: the readers in place drain (release or expire), and the
//! writer — which retries, and is woken by each reader's release — gets
//! in. Readers that hold may still extend. The intent lives as long as the
//! readers that refused the writer plus the writer's TTL, and is cleared
//! when a writer takes the lock, when that writer releases it and when a
//! retrying writer gives up or is dropped while it waits
//! ([`Redlock::shutdown`] lets that withdrawal reach the nodes before a
//! program ends). A single refused
//! [`try_write_lock`](Redlock::try_write_lock) leaves it (so that a caller
//! retrying by hand is not starved): new readers are then delayed at most as
//! long as the writer's own lock would have held them, had it got it after
//! the readers.
//!
//! A read or write lock is a [`Lock`]: it is extended, released, dropped,
//! cancelled and kept alive ([`Lock::keep_alive`]) as any lock. Its keys
//! are apart from a mutex's on the same resource name: `lock("R")` and
//! `write_lock("R")` do not exclude each other.

use std::time::Duration;

use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::engine::claim::Keys;
use crate::proto::error::LockError;
use crate::settings::LockOptions;

impl Redlock {
    /// A read lock on `resource`, retrying per policy: held together with
    /// other readers, never with a writer. Refused while a writer holds or
    /// waits ([`LockError::Taken`] once the attempts run out).
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let a = redlock.read_lock("catalog", Duration::from_secs(10)).await?;
    /// let b = redlock.read_lock("catalog", Duration::from_secs(10)).await?; // readers share
    /// assert!(redlock.try_write_lock("catalog", Duration::from_secs(10)).await.is_err());
    /// a.release().await?;
    /// b.release().await
    /// # }
    /// ```
    pub async fn read_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.read_lock_with(resource, ttl, &LockOptions::new())
            .await
    }

    /// [`read_lock`](Self::read_lock), or with [`LockOptions::wait`] rounds
    /// until it is had or the wait is over ([`LockError::Timeout`]); woken
    /// when the writer releases. Fencing does not apply to read locks
    /// ([`InputError::FencedReadWrite`](crate::proto::input::InputError::FencedReadWrite)).
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LockOptions;
    /// let writer = redlock.write_lock("catalog", Duration::from_millis(300)).await?;
    /// let wait = LockOptions::new().wait(Duration::from_secs(5));
    /// let reader = redlock.read_lock_with("catalog", Duration::from_secs(10), &wait).await?;
    /// assert!(!writer.is_valid()); // had once the writer's lock expired
    /// reader.release().await
    /// # }
    /// ```
    pub async fn read_lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Lock, LockError> {
        self.rw_lock(resource, ttl, options, false).await
    }

    /// A write lock on `resource`, retrying per policy: held alone, by no
    /// reader and no other writer. While readers hold it, it marks the
    /// writer's intent, which holds new readers off until the writer is
    /// in (see the [module docs](crate::api::rwlock)). A writer that gives up
    /// (its retries spent, or its wait over) or is dropped while it waits
    /// takes its intent back.
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let writer = redlock.write_lock("catalog", Duration::from_secs(10)).await?;
    /// assert!(redlock.try_read_lock("catalog", Duration::from_secs(10)).await.is_err());
    /// writer.release().await
    /// # }
    /// ```
    pub async fn write_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.write_lock_with(resource, ttl, &LockOptions::new())
            .await
    }

    /// [`write_lock`](Self::write_lock), or with [`LockOptions::wait`] rounds
    /// until it is had or the wait is over ([`LockError::Timeout`]); woken
    /// when a reader or the writer releases. Fencing does not apply
    /// ([`InputError::FencedReadWrite`](crate::proto::input::InputError::FencedReadWrite)).
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LockOptions;
    /// let reader = redlock.read_lock("catalog", Duration::from_millis(300)).await?;
    /// let wait = LockOptions::new().wait(Duration::from_secs(5));
    /// let writer = redlock.write_lock_with("catalog", Duration::from_secs(10), &wait).await?;
    /// assert!(!reader.is_valid()); // had once the reader's lock expired
    /// writer.release().await
    /// # }
    /// ```
    pub async fn write_lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Lock, LockError> {
        self.rw_lock(resource, ttl, options, true).await
    }

    /// One round for a read lock, as [`try_lock`](Self::try_lock) for a
    /// mutex: the lock, or the refusal.
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let reader = redlock.try_read_lock("catalog", std::time::Duration::from_secs(10)).await?;
    /// reader.release().await
    /// # }
    /// ```
    pub async fn try_read_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.try_rw_lock(resource, ttl, false).await
    }

    /// One round for a write lock. A refusal by readers still marks the
    /// writer's intent on the nodes that refused (it lapses after the
    /// readers' time plus `ttl`): to take the lock soon, retry
    /// ([`write_lock`](Self::write_lock)).
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let writer = redlock.try_write_lock("catalog", std::time::Duration::from_secs(10)).await?;
    /// writer.release().await
    /// # }
    /// ```
    pub async fn try_write_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.try_rw_lock(resource, ttl, true).await
    }

    async fn rw_lock(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        write: bool,
    ) -> Result<Lock, LockError> {
        if options.is_fenced() {
            return Err(crate::proto::input::InputError::FencedReadWrite.into());
        }
        let keys = Keys::rw(self.driver().layout(), resource, write)?;
        self.lock_keys(keys, None, ttl, options).await
    }

    async fn try_rw_lock(
        &self,
        resource: &str,
        ttl: Duration,
        write: bool,
    ) -> Result<Lock, LockError> {
        let keys = Keys::rw(self.driver().layout(), resource, write)?;
        self.try_keys(keys, ttl).await
    }
}
