//! Counting semaphores over a quorum: at most `permits` valid holders of a
//! name at any time.
//!
//! A semaphore of `N` permits is `N` independent Redlock mutexes, the
//! *slots* `{name}:permit:0` … `{name}:permit:N-1`; a permit is a valid lock on
//! one slot. Safety follows from the mutex's: no two valid locks on one slot
//! ever coexist, so at most `N` valid permits do. (A naive quorum semaphore
//! — every node admits up to `N` holders, a holder needs a majority of
//! admissions — is not safe for `N ≥ 2`: with 5 nodes and `N = 2`, three
//! holders can each collect 3 of the 10 admissions.) A holder tries the slots
//! from a random one on, one round each, and keeps the first it is granted;
//! a failed round leaves nothing behind, as for any lock. Extending,
//! releasing, dropping and cancelling a permit are those of its [`Lock`].
//!
//! Each node also counts the semaphore's live holders and the permit count
//! they were granted under: a caller that names another count while they
//! hold is refused ([`LockError::PermitCount`]), so that `N` means `N` for
//! everyone.
//!
//! Waiting ([`AcquireOptions::wait`]) retries the slots as a lock waits, in
//! line: a permit given back while others wait is kept for the one that
//! waited longest; it is woken early when a slot is released (release
//! notifications, [`Builder::notify_waiters`], for up to
//! 64 slots; past that it polls).
//!
//! [`Builder::notify_waiters`]: crate::Builder::notify_waiters

use std::sync::Arc;
use std::time::Duration;

use crate::api::lease::Lease;
use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::api::run::acquire_and_run;
use crate::api::wait::{GiveUp, MAX_WATCHED_SLOTS, Waiting};
use crate::engine::claim::{Claim, InLine, Keys};
use crate::proto::error::LockError;
use crate::proto::error::Subject;
use crate::proto::input::InputError;
use crate::settings::{AcquireOptions, LeaseOptions};

pub use crate::proto::input::MAX_PERMITS;

/// A counting semaphore; see the [module docs](self) and
/// [`Semaphore::new`].
#[derive(Debug, Clone)]
#[must_use = "a Semaphore does nothing until a permit is asked of it"]
pub struct Semaphore {
    redlock: Redlock,
    name: String,
    permits: u32,
}

/// One of a [`Semaphore`]'s permits: a valid lock on one of its slots.
/// Released when dropped, as any [`Lock`].
#[derive(Debug)]
#[must_use = "dropping a Permit gives it back at once (in the background): hold it for as long as the work needs it"]
pub struct Permit {
    lock: Lock,
    slot: u32,
}

impl Semaphore {
    /// The semaphore named `name` with `permits` permits, on `redlock`'s
    /// nodes: at most that many valid [`Permit`]s at any time, across every
    /// client of the same nodes that names it alike.
    /// [`InputError::InvalidPermits`] for 0 or more than [`MAX_PERMITS`],
    /// [`InputError::EmptyResource`] for an empty name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::Semaphore;
    /// let api = Semaphore::new(&redlock, "rate-limited-api", 3)?;
    /// let a = api.try_acquire(Duration::from_secs(10)).await?;
    /// let b = api.try_acquire(Duration::from_secs(10)).await?;
    /// let c = api.try_acquire(Duration::from_secs(10)).await?;
    /// assert!(api.try_acquire(Duration::from_secs(10)).await.is_err()); // all 3 taken
    /// a.release().await?;
    /// let d = api.try_acquire(Duration::from_secs(10)).await?; // a's slot again
    /// # for p in [b, c, d] { p.release().await?; }
    /// # Ok(()) }
    /// ```
    pub fn new(redlock: &Redlock, name: &str, permits: u32) -> Result<Semaphore, InputError> {
        crate::proto::input::check_name(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(InputError::InvalidPermits(permits));
        }
        Ok(Semaphore {
            redlock: redlock.clone(),
            name: name.to_owned(),
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The permit count of the semaphore `name` as its nodes store it
    /// (every holder of a semaphore names one count, kept on the nodes while
    /// any permit is held): the count most answering nodes report, or
    /// `None` where no node has one (no permit is held, or `name` is no
    /// semaphore). For tools that inspect a semaphore by name alone.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when fewer than a quorum of nodes answered;
    /// [`LockError::Input`] for a name the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping this future changes nothing on the nodes.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let api = Semaphore::new(&redlock, "partner-api", 2)?;
    /// assert_eq!(Semaphore::stored_permits(&redlock, "partner-api").await?, None);
    /// let permit = api.try_acquire(std::time::Duration::from_secs(10)).await?;
    /// assert_eq!(Semaphore::stored_permits(&redlock, "partner-api").await?, Some(2));
    /// permit.release().await
    /// # }
    /// ```
    pub async fn stored_permits(redlock: &Redlock, name: &str) -> Result<Option<u32>, LockError> {
        redlock.semaphore_permits(name).await
    }

    /// The client it runs on.
    pub(crate) fn redlock(&self) -> &Redlock {
        &self.redlock
    }

    /// The keys of slot `slot`.
    pub(crate) fn slot_keys(&self, slot: u32) -> Result<Keys, InputError> {
        Keys::permit(
            self.redlock.driver().layout(),
            &self.name,
            slot,
            self.permits,
        )
    }

    /// The key of slot `slot` (`{name}:permit:slot`, with the client's key
    /// prefix in front; see [`KeyLayout::permit_keys`]).
    ///
    /// [`KeyLayout::permit_keys`]: crate::KeyLayout::permit_keys
    pub fn slot_key(&self, slot: u32) -> String {
        let [slot, ..] = self.redlock.driver().layout().permit_keys(&self.name, slot);
        slot
    }

    /// One pass over the slots, from a random one: the first granted, else
    /// the last refusal ([`LockError::Taken`] when every slot is held;
    /// [`LockError::PermitCount`] at once when the semaphore's holders were
    /// granted under another permit count).
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
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began; also
    /// [`LockError::PermitCount`] when live holders were granted under
    /// another permit count.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit, LockError> {
        let driver = self.redlock.driver();
        let mut give_up = GiveUp::new(driver, 0);
        let label = driver.settings.label.clone();
        self.pass(ttl, None, false, label.as_ref(), &mut give_up)
            .await
    }

    /// One pass, as a waiter of `in_line` if it waits in line; each refused
    /// slot's claim goes to `give_up`.
    async fn pass(
        &self,
        ttl: Duration,
        in_line: Option<InLine>,
        holder_ttl: bool,
        label: Option<&Arc<str>>,
        give_up: &mut GiveUp<'_>,
    ) -> Result<Permit, LockError> {
        let driver = self.redlock.driver();
        let ttl = driver.check_ttl(ttl)?;
        // Seeded where the client's jitter is (`Builder::jitter_seed`).
        let start = (driver.draw() % u64::from(self.permits)) as u32;
        let (mut last, mut taken) = (None, 0);
        for i in 0..self.permits {
            let slot = (start + i) % self.permits;
            let keys = self.slot_keys(slot)?;
            if slot == start {
                // Every slot shares the first one's hash tag.
                driver.check_slots(&keys)?;
            }
            let claim = Arc::new(Claim::new(keys).in_line(in_line).labeled(label));
            match self.redlock.acquire(&claim, ttl, holder_ttl).await {
                Ok(lock) => {
                    give_up.got_it(claim.keys().first());
                    return Ok(Permit { lock, slot });
                }
                Err(e @ (LockError::Input(_) | LockError::PermitCount { .. })) => {
                    return Err(e.about(self.subject()));
                }
                // The shutdown released every slot's marks: none is tried.
                Err(LockError::ShutDown) => return Err(LockError::ShutDown),
                Err(e) => {
                    give_up.refused(&claim);
                    taken += u32::from(matches!(e, LockError::Taken { .. }));
                    last = Some(e);
                }
            }
        }
        let last = last.unwrap_or(LockError::Input(InputError::InvalidPermits(0)));
        // Every slot taken: the semaphore is (the last slot's votes say how).
        Err(match last {
            LockError::Taken { .. } if taken == self.permits => last.about(self.subject()),
            other => other,
        })
    }

    /// What its errors are about.
    fn subject(&self) -> Subject {
        Subject::Permits {
            name: self.name.as_str().into(),
            permits: self.permits,
        }
    }

    /// Passes over the slots per the client's retry policy
    /// ([`Builder::retry`](crate::Builder::retry)), with jittered pauses.
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
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began; also
    /// [`LockError::PermitCount`] when live holders were granted under
    /// another permit count.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    pub async fn acquire(&self, ttl: Duration) -> Result<Permit, LockError> {
        self.acquire_with(ttl, &AcquireOptions::new()).await
    }

    /// [`acquire`](Self::acquire), or with [`AcquireOptions::wait`] passes
    /// until a permit is had or the wait is over ([`LockError::Timeout`]
    /// with the last pass's error), in line: a permit given back while
    /// others wait goes to the one that waited longest (docs/design.md,
    /// "Fair waiting").
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
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began; also
    /// [`LockError::PermitCount`] when live holders were granted under
    /// another permit count.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::AcquireOptions;
    /// let workers = Semaphore::new(&redlock, "workers", 1)?;
    /// let held = workers.acquire(Duration::from_millis(200)).await?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let next = workers.acquire_with(Duration::from_secs(10), &wait).await?; // after expiry
    /// assert!(!held.is_valid());
    /// next.release().await
    /// # }
    /// ```
    pub async fn acquire_with(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
    ) -> Result<Permit, LockError> {
        let driver = self.redlock.driver();
        let attempts = options.attempts();
        // A waiter listens to every slot's releases (up to a bound).
        let channels: Vec<String> = if self.permits <= MAX_WATCHED_SLOTS {
            (0..self.permits).map(|slot| self.slot_key(slot)).collect()
        } else {
            Vec::new()
        };
        let mut waiting = Waiting::new(driver, attempts, &channels, false);
        // Its place in line, taken back if it gives up or is dropped.
        let ttl_ms = driver.check_ttl(ttl)?.ms;
        let mut give_up = GiveUp::new(driver, ttl_ms);
        let label = driver.label(options.label_given())?;
        loop {
            waiting.before_attempt();
            let (in_line, holder_ttl) = (waiting.in_line(), waiting.holder_ttl());
            let pass = self.pass(ttl, in_line, holder_ttl, label.as_ref(), &mut give_up);
            let error = match pass.await {
                Ok(permit) => return Ok(permit),
                Err(e) => e,
            };
            if let Err(e) = waiting.after(error).await {
                give_up.give_up();
                return Err(e);
            }
        }
    }

    /// Runs `work` under a permit kept alive as [`Redlock::run`] keeps a
    /// lock (extended every third of `ttl`), gives the permit back when the
    /// work ends, and returns its output; [`LockError::Lost`] (and the work
    /// dropped at its next `.await`) if the permit cannot be kept. Acquires
    /// as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the permit back (in
    /// the background). Work the future does not own goes on: a task the
    /// work spawned, a request already sent to the partner API. The permit
    /// bounds the calls made under it, not their effects that outlive it —
    /// so spawn nothing the permit must cover, or await it within the work.
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as the waiting lock calls: `Taken`, `Timeout`,
    /// `Unavailable`, …), and [`LockError::Lost`] when the lease could not be
    /// kept: the work was dropped. An error of the work itself is returned as it
    /// is where the work is fallible.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let api = Semaphore::new(&redlock, "partner-api", 3)?; // at most 3 callers at once
    /// let status = api
    ///     .run(std::time::Duration::from_secs(30), |lease| async move {
    ///         // call the rate-limited API; lease.resource() names the semaphore
    ///         assert_eq!(lease.resource(), "partner-api");
    ///         200
    ///     })
    ///     .await?;
    /// assert_eq!(status, 200);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_with(ttl, &AcquireOptions::new(), &LeaseOptions::new(), work)
            .await
    }

    /// [`run`](Self::run) with [`AcquireOptions`] (wait for a permit, as
    /// [`acquire_with`](Self::acquire_with)) and [`LeaseOptions`] (the
    /// extension interval, a cap on extensions).
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as the waiting lock calls: `Taken`, `Timeout`,
    /// `Unavailable`, …), and [`LockError::Lost`] when the lease could not be
    /// kept: the work was dropped. An error of the work itself is returned as it
    /// is where the work is fallible.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the lock back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the lock must cover it.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, LeaseOptions};
    /// let workers = Semaphore::new(&redlock, "workers", 2)?;
    /// let options = AcquireOptions::new().wait(Duration::from_secs(60));
    /// workers
    ///     .run_with(Duration::from_secs(15), &options, &LeaseOptions::new(), |lease| async move {
    ///         // work while lease.is_valid()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_with<F, Fut, T>(
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
        let acquire = async { Ok(self.acquire_with(ttl, options).await?.lock) };
        acquire_and_run(self.redlock.driver(), ttl, lease, acquire, work).await
    }
}

impl Permit {
    /// Which slot it holds (`0..permits`).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lock on its slot.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Whether the permit is still valid: the count holds only while it is.
    pub fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }

    /// Validity left; see [`Lock::remaining`].
    pub fn remaining(&self) -> Duration {
        self.lock.remaining()
    }

    /// Extends the permit; see [`Lock::extend`].
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
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        self.lock.extend(ttl).await
    }

    /// Gives the permit back; see [`Lock::release`].
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when no quorum confirmed within the node
    /// timeout: the keys then expire by their TTL.
    ///
    /// # Cancel safety
    ///
    /// The release is handed to the nodes at the first poll and happens at most
    /// once: dropping this future afterwards changes nothing; dropped before its
    /// first poll it sends nothing (the guard it consumed releases in the
    /// background when dropped).
    pub async fn release(self) -> Result<(), LockError> {
        self.lock.release().await
    }

    /// The lock on its slot, to keep alive ([`Lock::keep_alive`]) or
    /// release yourself.
    pub fn into_lock(self) -> Lock {
        self.lock
    }
}
