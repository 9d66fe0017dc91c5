//! Read/write locks over a quorum ([`RwLock`]).

use std::future::Future;
use std::time::Duration;

use crate::api::inspect::RwInspection;
use crate::api::lease::Lease;
use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::api::run::acquire_and_run;
use crate::engine::claim::Keys;
use crate::proto::error::{LockError, Votes};
use crate::proto::input::InputError;
use crate::settings::{AcquireOptions, LeaseOptions};

/// A read/write lock over a quorum: any number of readers of a resource
/// together, or one writer alone.
///
/// On each node a resource `R` has three keys in one hash slot
/// ([`KeyLayout::rw_keys`](crate::KeyLayout::rw_keys)): the *writer* key
/// `{R}:writer` (a plain lock's string, holding the writer's token), the
/// *readers* key `{R}:readers` (a sorted set of reader tokens, each scored by
/// its expiry on the node's clock) and the *intent* key `{R}:intent`. A node
/// adds a reader only while no writer key stands, and sets the writer key
/// only while no live reader does: on every node a reader's entry and a
/// writer's key never live at once, exactly as two holders' keys of a mutex
/// never do. A hold — read or write — is valid only while a quorum of its
/// entries lives (the mutex's rule: validity `ttl − elapsed − drift`), and
/// any two quorums share a node, so a valid write hold never overlaps
/// another valid hold. The proof is in `docs/design.md` §9b.
///
/// **Writers are not starved.** A writer refused by readers marks the
/// writer's *intent* on that node, and a node refuses new readers while an
/// intent stands: the readers in place drain (release or expire), and the
/// writer — which retries, and is woken by each reader's release — gets
/// in. Readers that hold may still extend. The intent lives as long as the
/// readers that refused the writer plus the writer's TTL, and is cleared
/// when a writer takes the lock, when that writer releases it and when a
/// retrying writer gives up or is dropped while it waits
/// ([`Redlock::shutdown`] lets that withdrawal reach the nodes before a
/// program ends). A single refused [`try_write`](RwLock::try_write) leaves
/// it (so that a caller retrying by hand is not starved): new readers are
/// then delayed at most as long as the writer's own lock would have held
/// them, had it got it after the readers.
///
/// A read or write hold is a [`Lock`]: it is extended, released, dropped,
/// cancelled and kept alive ([`Lock::keep_alive`]) as any lock. Its keys
/// are apart from a mutex's on the same resource name: `redlock.lock("R")`
/// and `RwLock::new(&redlock, "R")?.write(..)` do not exclude each other.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redquorum::LockError> {
/// # let redlock = redquorum::testing::redlock(5).await;
/// use std::time::Duration;
/// use redquorum::RwLock;
/// let catalog = RwLock::new(&redlock, "catalog")?;
/// let a = catalog.read(Duration::from_secs(10)).await?;
/// let b = catalog.read(Duration::from_secs(10)).await?; // readers share
/// assert!(catalog.try_write(Duration::from_secs(10)).await.is_err());
/// a.release().await?;
/// b.release().await
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an RwLock does nothing until a hold is asked of it"]
pub struct RwLock {
    redlock: Redlock,
    name: String,
}

impl RwLock {
    /// The read/write lock on `name`, on `redlock`'s nodes: one per
    /// resource name across every client of the same nodes.
    /// [`InputError::EmptyResource`] for an empty name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// assert_eq!(catalog.name(), "catalog");
    /// # Ok(()) }
    /// ```
    pub fn new(redlock: &Redlock, name: &str) -> Result<RwLock, InputError> {
        crate::proto::input::check_name(name)?;
        Ok(RwLock {
            redlock: redlock.clone(),
            name: name.to_owned(),
        })
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A read hold, retrying per policy: held together with other readers,
    /// never with a writer. Refused while a writer holds or waits
    /// ([`LockError::Taken`] once the attempts run out).
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let reader = catalog.read(std::time::Duration::from_secs(10)).await?;
    /// reader.release().await
    /// # }
    /// ```
    pub async fn read(&self, ttl: Duration) -> Result<Lock, LockError> {
        self.read_with(ttl, &AcquireOptions::new()).await
    }

    /// [`read`](Self::read) with [`AcquireOptions`]: with
    /// [`AcquireOptions::wait`], rounds until it is had or the wait is over
    /// ([`LockError::Timeout`]), woken when the writer releases.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, RwLock};
    /// let catalog = RwLock::new(&redlock, "catalog")?;
    /// let writer = catalog.write(Duration::from_millis(300)).await?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let reader = catalog.read_with(Duration::from_secs(10), &wait).await?;
    /// assert!(!writer.is_valid()); // had once the writer's hold expired
    /// reader.release().await
    /// # }
    /// ```
    pub async fn read_with(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
    ) -> Result<Lock, LockError> {
        let keys = Keys::rw(self.redlock.driver().layout(), &self.name, false)?;
        self.redlock.lock_keys(keys, None, ttl, options, None).await
    }

    /// One round for a read hold, as [`Redlock::try_lock`] for a mutex: the
    /// hold, or the refusal.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let reader = catalog.try_read(std::time::Duration::from_secs(10)).await?;
    /// reader.release().await
    /// # }
    /// ```
    pub async fn try_read(&self, ttl: Duration) -> Result<Lock, LockError> {
        let keys = Keys::rw(self.redlock.driver().layout(), &self.name, false)?;
        self.redlock.try_keys(keys, ttl).await
    }

    /// A write hold, retrying per policy: held alone, by no reader and no
    /// other writer. While readers hold it, it marks the writer's intent,
    /// which holds new readers off until the writer is in (see
    /// [`RwLock`]). A writer that gives up (its retries spent, or its wait
    /// over) or is dropped while it waits takes its intent back.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let writer = catalog.write(Duration::from_secs(10)).await?;
    /// assert!(catalog.try_read(Duration::from_secs(10)).await.is_err());
    /// writer.release().await
    /// # }
    /// ```
    pub async fn write(&self, ttl: Duration) -> Result<Lock, LockError> {
        self.write_with(ttl, &AcquireOptions::new()).await
    }

    /// [`write`](Self::write) with [`AcquireOptions`]: with
    /// [`AcquireOptions::wait`], rounds until it is had or the wait is over
    /// ([`LockError::Timeout`]); a waiting writer keeps new readers off.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, RwLock};
    /// let catalog = RwLock::new(&redlock, "catalog")?;
    /// let reader = catalog.read(Duration::from_millis(300)).await?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let writer = catalog.write_with(Duration::from_secs(10), &wait).await?;
    /// assert!(!reader.is_valid()); // had once the reader's hold expired
    /// writer.release().await
    /// # }
    /// ```
    pub async fn write_with(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
    ) -> Result<Lock, LockError> {
        let keys = Keys::rw(self.redlock.driver().layout(), &self.name, true)?;
        self.redlock.lock_keys(keys, None, ttl, options, None).await
    }

    /// One round for a write hold. A refusal by readers still marks the
    /// writer's intent on the nodes that refused (it lapses after the
    /// readers' time plus `ttl`): to take the hold soon, retry
    /// ([`write`](Self::write)).
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`LockError::Taken`] while a holder of the other
    /// kind (or a waiting writer, for a reader) holds it; a wait that ends
    /// first: [`LockError::Timeout`]; [`LockError::Unavailable`],
    /// [`LockError::Busy`], [`LockError::Expired`], [`LockError::Input`] (a
    /// TTL the protocol refuses; nothing sent), [`LockError::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, a waiter's place in line and a
    /// writer's intent: no key is left behind for a hold nobody has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let writer = catalog.try_write(std::time::Duration::from_secs(10)).await?;
    /// writer.release().await
    /// # }
    /// ```
    pub async fn try_write(&self, ttl: Duration) -> Result<Lock, LockError> {
        let keys = Keys::rw(self.redlock.driver().layout(), &self.name, true)?;
        self.redlock.try_keys(keys, ttl).await
    }

    /// Runs `work` as one of the readers, under a lease kept as
    /// [`Redlock::run`] keeps one: extended every third of `ttl`, the work
    /// dropped at once and [`LockError::Lost`] returned if it cannot be
    /// kept, released when the work ends.
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as [`read`](Self::read) and
    /// [`write`](Self::write)), and [`LockError::Lost`] when the lease could
    /// not be kept: the work was dropped.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the hold back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the hold must cover it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let prices = catalog
    ///     .run_read(Duration::from_secs(30), |lease| async move {
    ///         // read the catalog while lease.is_valid(): other readers too
    ///         assert!(lease.is_valid());
    ///         3
    ///     })
    ///     .await?;
    /// assert_eq!(prices, 3);
    /// # Ok(()) }
    /// ```
    pub async fn run_read<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_read_with(ttl, &AcquireOptions::new(), &LeaseOptions::new(), work)
            .await
    }

    /// [`run_read`](Self::run_read) with [`AcquireOptions`] (wait for the
    /// hold) and [`LeaseOptions`] (the extension interval, a cap).
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as [`read`](Self::read) and
    /// [`write`](Self::write)), and [`LockError::Lost`] when the lease could
    /// not be kept: the work was dropped.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the hold back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the hold must cover it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, LeaseOptions, RwLock};
    /// let catalog = RwLock::new(&redlock, "catalog")?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let lease = LeaseOptions::new().extend_every(Duration::from_secs(2));
    /// catalog.run_read_with(Duration::from_secs(10), &wait, &lease, |_| async {}).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_read_with<F, Fut, T>(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
        lease: &LeaseOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let acquire = self.read_with(ttl, options);
        acquire_and_run(self.redlock.driver(), ttl, lease, acquire, work).await
    }

    /// Runs `work` as the writer, under a lease kept as [`Redlock::run`]
    /// keeps one.
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as [`read`](Self::read) and
    /// [`write`](Self::write)), and [`LockError::Lost`] when the lease could
    /// not be kept: the work was dropped.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the hold back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the hold must cover it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// catalog
    ///     .run_write(Duration::from_secs(30), |lease| async move {
    ///         // rewrite the catalog, alone, while lease.is_valid()
    ///         assert!(lease.is_valid());
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_write<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_write_with(ttl, &AcquireOptions::new(), &LeaseOptions::new(), work)
            .await
    }

    /// [`run_write`](Self::run_write) with [`AcquireOptions`] (wait for the
    /// hold; a waiting writer keeps new readers off) and [`LeaseOptions`].
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as [`read`](Self::read) and
    /// [`write`](Self::write)), and [`LockError::Lost`] when the lease could
    /// not be kept: the work was dropped.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the hold back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the hold must cover it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, LeaseOptions, RwLock};
    /// let catalog = RwLock::new(&redlock, "catalog")?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// catalog.run_write_with(Duration::from_secs(10), &wait, &LeaseOptions::new(), |_| async {}).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_write_with<F, Fut, T>(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
        lease: &LeaseOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let acquire = self.write_with(ttl, options);
        acquire_and_run(self.redlock.driver(), ttl, lease, acquire, work).await
    }

    /// What every node holds for this lock: its writer, its live readers
    /// and a waiting writer's intent, and the verdicts. As
    /// [`Redlock::inspect`], a snapshot.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when fewer than a quorum of nodes answered.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping this future changes nothing on the nodes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let a = catalog.read(Duration::from_secs(30)).await?;
    /// let b = catalog.read(Duration::from_secs(30)).await?;
    /// let seen = catalog.inspect().await?;
    /// assert_eq!(seen.readers_held(), 2);
    /// assert!(matches!(seen.writer().verdict(), redquorum::verdict::Verdict::Free { .. }));
    /// # a.release().await?; b.release().await
    /// # }
    /// ```
    pub async fn inspect(&self) -> Result<RwInspection, LockError> {
        self.redlock.inspect_rw(&self.name).await
    }

    /// [`Redlock::release_token`] for this lock: where `token` is the
    /// writer's, its writer key and the intent it marked are deleted (a
    /// writer that waited marked its intent with its wait's name, not the
    /// token: left where it stands, it lapses after the readers' time plus
    /// the writer's TTL); where it is a reader's, that reader. Either way each node answers
    /// [`Answer::Yes`](crate::Answer::Yes) where something of `token` was
    /// deleted.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Input`] for a token the protocol refuses.
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
    /// let catalog = redquorum::RwLock::new(&redlock, "catalog")?;
    /// let reader = catalog.read(std::time::Duration::from_secs(60)).await?;
    /// let votes = catalog.release_token(reader.token()).await?;
    /// assert_eq!(votes.yes(), 5);
    /// # std::mem::forget(reader);
    /// # Ok(()) }
    /// ```
    pub async fn release_token(&self, token: &str) -> Result<Votes, LockError> {
        self.redlock.release_token_rw(&self.name, token).await
    }
}
