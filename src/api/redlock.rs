//! The public face: [`Redlock`] and its lock calls. Each call checks its
//! input once ([`Driver::admit`](crate::engine::driver::Driver::admit)) and hands
//! its rounds to the driver ([`crate::engine::driver`]); waiting between rounds is
//! [`crate::api::wait`]'s, and what a round decides, and how long to pause after
//! a failed one, is the protocol's ([`crate::proto`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::lock::Lock;
use crate::api::nodes::Nodes;
use crate::engine::claim::{Claim, Keys};
use crate::engine::driver::{Attempts, Driver, Ttl};
use crate::proto::error::LockError;
use crate::proto::input::check_hold_at_least;
use crate::proto::keys::KeyLayout;
use crate::settings::{AcquireOptions, LockOptions};

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one `Arc`); every clone shares the node connections.
/// A lock is granted when a majority of the configured nodes — `N / 2 + 1`,
/// however many are reachable — agree within the validity window.
///
/// ```
/// use std::time::Duration;
/// use redquorum::Redlock;
///
/// async fn connect() -> Result<Redlock, redquorum::ConfigError> {
///     Redlock::connect([
///         "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
///         "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
///     ])
///     .await
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let _ = connect;
/// # let redlock = redquorum::testing::redlock(5).await; // in place of connect().await?
/// let lock = redlock.lock("orders:42", Duration::from_secs(10)).await?;
/// if lock.is_valid() {
///     // ... the critical section: exclusion holds while the lock is valid ...
/// }
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a Redlock client does nothing unless its lock calls are made"]
pub struct Redlock {
    driver: Arc<Driver>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.driver.nodes())
            .field("quorum", &self.driver.quorum())
            .field("settings", &self.driver.settings)
            .finish()
    }
}

impl Redlock {
    /// The client over a connected driver.
    pub(crate) fn from_driver(driver: Driver) -> Self {
        Redlock {
            driver: Arc::new(driver),
        }
    }

    /// The client's nodes: names, quorum, calls in flight, which are
    /// degraded, the deployment record agreed with them, and a probe
    /// ([`Nodes`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let names: Vec<&str> = redlock.nodes().iter().map(|node| node.name()).collect();
    /// assert_eq!(names.len(), 5);
    /// assert_eq!(redlock.nodes().quorum(), 3);
    /// # }
    /// ```
    pub fn nodes(&self) -> Nodes<'_> {
        Nodes::new(self)
    }

    /// How this client maps resources to Redis keys
    /// ([`Builder::key_prefix`](crate::Builder::key_prefix), [`Builder::interop_keys`](crate::Builder::interop_keys)).
    ///
    /// ```
    /// # async fn demo() -> Result<(), redquorum::ConfigError> {
    /// let nodes = (0..3).map(|i| redquorum::testing::MemoryNode::new(i) as _);
    /// let redlock = redquorum::Redlock::builder().custom_nodes(nodes).build().await?;
    /// assert_eq!(redlock.key_layout().lock_key("orders:42"), "{orders:42}:lock");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn key_layout(&self) -> &KeyLayout {
        self.driver.layout()
    }

    /// Settles everything this client holds or is acquiring and finishes
    /// what it handed to the nodes, for a program about to end.
    ///
    /// - **Held.** Every lock it still holds is released: dropped ones (a
    ///   dropped keep-alive's too) and those still owned by running tasks —
    ///   locks, permits, read/write holds, leaderships —, whose leases end
    ///   as lost (`run`'s, a semaphore's `run`, `Election::lead`'s work sees
    ///   [`LockError::Lost`](crate::LockError::Lost), a leadership's
    ///   `lost()` resolves). A later [`Lock::release`] returns `Ok`. A lock
    ///   taken with [`LockOptions::hold_at_least`] keeps its key until the
    ///   time promised, as any release of it does.
    /// - **In flight.** Every acquisition under way — a lock of any kind,
    ///   waiting or not ([`LockOptions::wait`]), a semaphore's passes, an
    ///   election's campaign — stops at once and returns
    ///   [`LockError::ShutDown`]: its round in flight is released behind its
    ///   acquire on every node (a grant that comes after is no lock), and a
    ///   waiter's place in line or writer's intent is taken back. The caller
    ///   gets no lock, never one whose keys were left.
    /// - **Later calls.** Every acquisition and extension made after this
    ///   began returns [`LockError::ShutDown`] without sending anything;
    ///   other reads of the nodes find the connections closed
    ///   ([`NodeError::NotConnected`](crate::NodeError::NotConnected)).
    ///
    /// Those releases are made at once, without waiting for the callers'
    /// futures (one no longer polled is settled all the same). Then this
    /// waits until every call already made has ended — those releases, the
    /// tail of a release that returned at its quorum, the release of a
    /// dropped [`Lock`], a writer's intent taken back when it gave up. A
    /// connection waiting out its reconnect backoff tries again at once,
    /// and its calls are waited for one connection attempt more (the
    /// [connect timeout](crate::Builder::connect_timeout)). A connected
    /// node that answers nothing for a whole node timeout is not waited for
    /// further (its calls are written, and land if it answers before the
    /// process ends); every call ends by its node's grace (four node
    /// timeouts, at least 1 s), which bounds the wait.
    ///
    /// Call it before the tokio runtime ends: the runtime's end drops
    /// whatever is still in flight, so a release made just before can be
    /// lost (its keys then live until their TTL). Shuts every clone down.
    ///
    /// # Cancel safety
    ///
    /// The releases are made at the first poll; dropping this future afterwards
    /// stops the waiting only (the client stays closed to new acquisitions, and
    /// what was sent is delivered in the background).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use redquorum::LockError;
    /// let ttl = std::time::Duration::from_secs(60);
    /// let dropped = redlock.lock("nightly", ttl).await?;
    /// drop(dropped); // released in the background…
    /// let kept = redlock.lock("hourly", ttl).await?.keep_alive()?;
    /// redlock.shutdown().await; // …and every hold still kept, on every node
    /// assert!(kept.lease().is_lost()); // its work is told
    /// // Nothing new is taken:
    /// assert!(matches!(redlock.lock("weekly", ttl).await, Err(LockError::ShutDown)));
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        self.driver.shutdown().await;
    }

    /// One round: the lock if a quorum grants it in time, else the reason.
    ///
    /// On failure every key this round may have set is released before it
    /// returns (on nodes that answer within the node timeout; on the others in
    /// the background, behind the acquire on the same connection).
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
    /// # async fn main() {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LockError;
    ///
    /// match redlock.try_lock("cron:nightly", Duration::from_secs(30)).await {
    ///     Ok(lock) => { /* run the job */ let _ = lock.release().await; }
    ///     Err(LockError::Taken { .. }) => { /* another host runs it */ }
    ///     Err(e) => eprintln!("lock failed: {e}"),
    /// }
    /// # }
    /// ```
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        let keys = Keys::single(self.driver.layout(), resource, false)?;
        self.try_keys(keys, ttl).await
    }

    /// Up to [`Retry::attempts`](crate::Retry::attempts) rounds, pausing a
    /// random time between them; the last round's error if all fail.
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
    /// let lock = redlock.lock("orders:42", std::time::Duration::from_secs(10)).await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.lock_with(resource, ttl, &LockOptions::new()).await
    }

    /// A lock with explicit [`LockOptions`]: how long to wait
    /// ([`LockOptions::wait`]), a fencing token ([`LockOptions::fenced`]), a
    /// label, a hold of at least some time ([`LockOptions::hold_at_least`]).
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
    /// let options = LockOptions::new().fenced().wait(Duration::from_secs(5));
    /// let lock = redlock.lock_with("ledger", Duration::from_secs(10), &options).await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Lock, LockError> {
        let layout = self.driver.layout();
        let mut keys = Keys::single(layout, resource, options.is_fenced())?;
        let at_least = match options.min_hold() {
            Some(at_least) => {
                let at_least = check_hold_at_least(at_least)?;
                keys = keys.with_period(layout, resource)?;
                Some(at_least)
            }
            None => None,
        };
        self.lock_keys(keys, None, ttl, options.acquire(), at_least)
            .await
    }

    /// One lock over several resources, retrying per policy: on each node
    /// either every resource is set or none is, so two holders of
    /// overlapping sets never both get a quorum. Extend and release act on
    /// all of them.
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
    /// let lock = redlock.lock_many(&["account:1", "account:2"], Duration::from_secs(5)).await?;
    /// assert_eq!(lock.resources().count(), 2);
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, LockError> {
        self.lock_many_with(resources, ttl, &AcquireOptions::new())
            .await
    }

    /// [`lock_many`](Self::lock_many) with [`AcquireOptions`]: how long to
    /// wait, a label.
    ///
    /// # Errors
    ///
    /// As [`lock_many`](Self::lock_many).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_many`](Self::lock_many).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::AcquireOptions;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let lock = redlock.lock_many_with(&["a", "b"], Duration::from_secs(5), &wait).await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_many_with(
        &self,
        resources: &[&str],
        ttl: Duration,
        options: &AcquireOptions,
    ) -> Result<Lock, LockError> {
        let keys = Keys::many(self.driver.layout(), resources)?;
        self.lock_keys(keys, None, ttl, options, None).await
    }

    /// The body of every lock on one claim's `keys` (a mutex's, a reentrant
    /// owner's, several resources', a reader's, a writer's): rounds per
    /// policy, or until `options`' wait is over; kept `at_least` from the
    /// grant where given (checked against the TTL by the caller).
    pub(crate) async fn lock_keys(
        &self,
        keys: Keys,
        owner: Option<&str>,
        ttl: Duration,
        options: &AcquireOptions,
        at_least: Option<Duration>,
    ) -> Result<Lock, LockError> {
        debug_assert!(at_least.is_none() || keys.restorable());
        let ttl = self.driver.admit(&keys, ttl)?;
        let label = self.driver.label(options.label_given())?;
        let attempts = options.attempts();
        // Kept at least as long as asked from the grant (`Claim::granted`).
        self.acquire_repeatedly(keys, owner, label.as_ref(), at_least, ttl, attempts)
            .await
    }

    /// The body of every `try_*` lock on one claim's `keys`: one round.
    pub(crate) async fn try_keys(&self, keys: Keys, ttl: Duration) -> Result<Lock, LockError> {
        let ttl = self.driver.admit(&keys, ttl)?;
        let claim = Claim::new(keys).labeled(self.driver.settings.label.as_ref());
        self.acquire(&Arc::new(claim), ttl, false).await
    }

    /// Rounds until one grants or `attempts` runs out (see
    /// [`wait::acquire_repeatedly`](crate::api::wait::acquire_repeatedly)), as a
    /// [`Lock`].
    async fn acquire_repeatedly(
        &self,
        keys: Keys,
        owner: Option<&str>,
        label: Option<&Arc<str>>,
        at_least: Option<Duration>,
        ttl: Ttl,
        attempts: Attempts,
    ) -> Result<Lock, LockError> {
        let kind = keys.kind();
        let start = Instant::now();
        let hold = crate::api::wait::Hold {
            owner,
            label,
            at_least,
        };
        let held =
            crate::api::wait::acquire_repeatedly(&self.driver, keys, hold, ttl, attempts).await;
        let waited = attempts.waits().then(|| start.elapsed());
        self.driver.telemetry.acquired(kind, &held, waited);
        Ok(Lock::new(Arc::clone(&self.driver), held?))
    }

    /// One acquisition (see [`Driver::acquire`]), as a [`Lock`].
    pub(crate) async fn acquire(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        holder_ttl: bool,
    ) -> Result<Lock, LockError> {
        let held = self.driver.acquire(claim, ttl, holder_ttl).await;
        self.driver
            .telemetry
            .acquired(claim.keys().kind(), &held, None);
        Ok(Lock::new(Arc::clone(&self.driver), held?))
    }

    /// The driver under this client.
    pub(crate) fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }
}
