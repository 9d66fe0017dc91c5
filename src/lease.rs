//! Leases that live with the work: a lock extended in the background while
//! its holder works, and a loss that stops the work.
//!
//! [`Redlock::run`] owns the whole life cycle: acquire, extend every third of
//! the TTL, drop the work future the moment the lease can no longer be kept,
//! release at the end. [`Lock::keep_alive`] is the manual form: a watchdog on
//! a lock you already hold.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LockOptions;
use crate::driver::Driver;
use crate::error::{ConfigError, LockError};
use crate::lock::Lock;
use crate::proto::lease::{Extension, Keeper};
use crate::proto::round::gone_for_good;
use crate::quorum;
use crate::redlock::Redlock;

/// A view of a lease kept alive in the background: what it holds, how long
/// it is valid, and a signal when it ends. Cheap to clone; hand clones to
/// subtasks so they can check in at their own checkpoints.
#[derive(Clone)]
#[must_use = "a Lease tells whether the lock is still held: check it at the work's checkpoints"]
pub struct Lease {
    shared: Arc<Shared>,
}

struct Shared {
    resource: String,
    token: String,
    fence: Option<u64>,
    deadline: Mutex<Instant>,
    /// `None` while the lease is held; how it ended, set once.
    over: watch::Sender<Option<LeaseEnd>>,
}

/// How a [`Lease`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// It could not be extended before its deadline: another holder may
    /// have the resource now.
    Lost,
    /// Its work finished, it was released or stopped, or the future running
    /// it was dropped: nothing went wrong.
    Finished,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resource", &self.shared.resource)
            .field("fence", &self.shared.fence)
            .field("remaining", &self.remaining())
            .field("over", &*self.shared.over.borrow())
            .finish()
    }
}

impl Lease {
    fn new(lock: &Lock) -> Self {
        let (over, _) = watch::channel(None);
        Lease {
            shared: Arc::new(Shared {
                resource: lock.resource().to_owned(),
                token: lock.token().to_owned(),
                fence: lock.fence(),
                deadline: Mutex::new(lock.deadline_at()),
                over,
            }),
        }
    }

    /// The resource held.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// The token the nodes hold for this lease.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The fencing token, when the lease was taken with
    /// [`LockOptions::fenced`]. Pass it with every write to the protected
    /// resource.
    pub fn fence(&self) -> Option<u64> {
        self.shared.fence
    }

    /// When the current validity ends (moves later with each extension).
    pub fn deadline(&self) -> std::time::Instant {
        self.deadline_at().into_std()
    }

    /// Validity left, rounded down to whole milliseconds; zero once expired
    /// or ended.
    pub fn remaining(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        quorum::remaining(
            self.deadline_at().saturating_duration_since(Instant::now()),
            Duration::ZERO,
        )
    }

    /// Whether the lease is held and valid now.
    pub fn is_valid(&self) -> bool {
        self.is_held() && Instant::now() < self.deadline_at()
    }

    /// Resolves once the lease is **lost**: it could not be extended before
    /// its deadline, so another holder may have the resource now. Stays
    /// pending if the lease ends any other way (its work finished, it was
    /// released): a subtask that must also stop then awaits
    /// [`ended`](Self::ended) instead. `select!` on it at cooperative
    /// checkpoints.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// redlock
    ///     .run("ledger", Duration::from_secs(10), |lease| async move {
    ///         tokio::select! {
    ///             () = lease.lost() => eprintln!("lost {}: stop writing", lease.resource()),
    ///             () = async { /* a step of the work */ } => {}
    ///         }
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let ended = self.ended();
        async move {
            if ended.await != LeaseEnd::Lost {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once the lease is over, for whatever reason, with how it
    /// ended. For subtasks that must stop with the work.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LeaseEnd;
    /// let watcher = redlock
    ///     .run("ledger", Duration::from_secs(10), |lease| async move {
    ///         // A subtask that stops with the work, and says why.
    ///         tokio::spawn(async move { lease.ended().await })
    ///     })
    ///     .await?;
    /// assert_eq!(watcher.await?, LeaseEnd::Finished);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ended(&self) -> impl Future<Output = LeaseEnd> + Send + 'static {
        let mut over = self.shared.over.subscribe();
        async move {
            match over.wait_for(Option::is_some).await {
                Ok(end) => end.unwrap_or(LeaseEnd::Finished),
                // Unreachable while a `Lease` lives (it owns the sender).
                Err(_) => LeaseEnd::Finished,
            }
        }
    }

    /// Whether the lease was lost (not merely finished).
    pub fn is_lost(&self) -> bool {
        *self.shared.over.borrow() == Some(LeaseEnd::Lost)
    }

    fn is_held(&self) -> bool {
        self.shared.over.borrow().is_none()
    }

    fn deadline_at(&self) -> Instant {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn set_deadline(&self, deadline: Instant) {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    /// Ends the lease as `how`, unless it has ended already.
    fn end_as(&self, how: LeaseEnd) {
        self.shared.over.send_if_modified(|over| {
            let first = over.is_none();
            if first {
                *over = Some(how);
            }
            first
        });
    }

    fn end(&self) {
        self.end_as(LeaseEnd::Finished);
    }
}

/// Ends a lease when dropped.
struct EndOnDrop(Lease);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// How a lease is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keeping {
    ttl: Duration,
    every: Duration,
    cap: Option<u32>,
}

impl Keeping {
    pub(crate) fn new(
        driver: &Driver,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Self, ConfigError> {
        let validity = driver.check_ttl(ttl)?.validity;
        let every = options.extend_interval().unwrap_or(ttl / 3);
        if every.is_zero() || every >= validity {
            return Err(ConfigError::InvalidExtendInterval { every, validity });
        }
        Ok(Keeping {
            ttl,
            every,
            cap: options.extension_cap(),
        })
    }
}

/// Extends `lock` every `keeping.every` until the lease cannot be kept; then
/// marks `lease` lost and returns. Never returns while the lease holds.
async fn keep(lock: &mut Lock, keeping: Keeping, lease: &Lease) {
    let quorum = lock.driver().quorum();
    let mut keeper = Keeper::new(keeping.every, keeping.cap);
    let mut next = Instant::now() + keeper.first();
    // The last extension's failure: what the operator is told when the
    // lease is lost.
    let mut last: Option<LockError> = None;
    let why = loop {
        let deadline = lock.deadline_at();
        if keeper.capped() {
            tokio::time::sleep_until(deadline).await;
            break "its extension cap was reached";
        }
        tokio::time::sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            break "no extension succeeded before the deadline";
        }
        // An extend still running at the deadline cannot save the lease.
        let attempt = match tokio::time::timeout_at(deadline, lock.extend(keeping.ttl)).await {
            Err(_) => break "an extension was still running at the deadline",
            Ok(Ok(())) => {
                lease.set_deadline(lock.deadline_at());
                Extension::Extended
            }
            Ok(Err(e @ LockError::Expired { .. }))
                if e.votes().is_some_and(|v| gone_for_good(v, quorum)) =>
            {
                last = Some(e);
                Extension::Gone
            }
            Ok(Err(e)) => {
                tracing::debug!(resource = lock.resource(), error = %e, "lease extension failed; retrying");
                last = Some(e);
                Extension::Failed
            }
        };
        let left = lock.deadline_at().saturating_duration_since(Instant::now());
        match keeper.after(attempt, left) {
            Some(wait) => next = Instant::now() + wait,
            None if matches!(attempt, Extension::Gone) => {
                break "the lock is gone from a quorum of nodes";
            }
            None => break "no extension succeeded before the deadline",
        }
    };
    lock.driver().telemetry.lease_lost();
    match last.as_ref().and_then(LockError::votes) {
        Some(votes) => tracing::warn!(
            resource = lock.resource(),
            last_extension = %votes,
            "lease lost: {why}"
        ),
        None => tracing::warn!(resource = lock.resource(), "lease lost: {why}"),
    }
    lease.end_as(LeaseEnd::Lost);
}

impl Redlock {
    /// Runs `work` under an auto-extended lease on `resource`, and returns
    /// its output.
    ///
    /// Acquires like [`lock`](Redlock::lock), then extends the lease every
    /// third of `ttl`. If the lease cannot be kept before its deadline, the
    /// work future is dropped at once — it stops at its next `.await` and
    /// never completes — and [`LockError::Lost`] is returned. The lock is
    /// released when the work ends, either way. See [`run_with`](Redlock::run_with)
    /// for waiting, fencing, the extension interval and a cap on extensions.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let rows = redlock
    ///     .run("nightly-report", Duration::from_secs(30), |lease| async move {
    ///         // long work; lease.remaining(), lease.lost() for checkpoints
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_with(resource, ttl, &LockOptions::new(), work)
            .await
    }

    /// [`run`](Redlock::run) with [`LockOptions`]: wait up to a deadline for
    /// the lock, carry a fencing token ([`Lease::fence`]), set the extension
    /// interval (default `ttl / 3`) or cap the number of extensions.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LockOptions;
    /// let options = LockOptions::new()
    ///     .wait(Duration::from_secs(60))
    ///     .fenced()
    ///     .extend_every(Duration::from_secs(5));
    /// redlock
    ///     .run_with("ledger", Duration::from_secs(15), &options, |lease| async move {
    ///         let token = lease.fence().unwrap();
    ///         // store.write(token, ...)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_with<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let keeping = Keeping::new(self.driver(), ttl, options)?;
        let lock = self.lock_with(resource, ttl, options).await?;
        run_kept(lock, keeping, work).await
    }

    /// [`run`](Redlock::run) for fallible work: the work's own `Result`,
    /// with a lock error (not had, lost) converted into the work's error
    /// type — one `?` for both, instead of `Ok(Ok(x))`.
    ///
    /// The work's error type must be named once, where the closure cannot
    /// tell it (`Ok::<_, MyError>(…)` at its end): Rust infers nothing from
    /// a `?` alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    ///
    /// #[derive(Debug)]
    /// enum JobError {
    ///     Lock(redquorum::LockError),
    ///     Io(std::io::Error),
    /// }
    /// impl From<redquorum::LockError> for JobError {
    ///     fn from(e: redquorum::LockError) -> Self { JobError::Lock(e) }
    /// }
    /// impl From<std::io::Error> for JobError {
    ///     fn from(e: std::io::Error) -> Self { JobError::Io(e) }
    /// }
    ///
    /// async fn job(redlock: &redquorum::Redlock) -> Result<u64, JobError> {
    ///     redlock
    ///         .run_fallible("nightly", Duration::from_secs(30), |lease| async move {
    ///             let rows = std::fs::metadata(".")?.len(); // std::io::Error -> JobError
    ///             assert!(lease.is_valid());
    ///             Ok::<_, JobError>(rows)
    ///         })
    ///         .await
    /// }
    /// # job(&redlock).await.map_err(|e| format!("{e:?}"))?;
    /// # Ok(()) }
    /// ```
    pub async fn run_fallible<F, Fut, T, E>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, E>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.run_fallible_with(resource, ttl, &LockOptions::new(), work)
            .await
    }

    /// [`run_fallible`](Redlock::run_fallible) with [`LockOptions`], as
    /// [`run_with`](Redlock::run_with).
    pub async fn run_fallible_with<F, Fut, T, E>(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        work: F,
    ) -> Result<T, E>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.run_with(resource, ttl, options, work).await?
    }

    /// Runs `work` as one of `resource`'s readers (a read/write lock, see
    /// [`read_lock`](Redlock::read_lock)), under a lease kept as
    /// [`run`](Redlock::run) keeps one: extended every third of `ttl`, the
    /// work dropped at once and [`LockError::Lost`] returned if it cannot be
    /// kept, released when the work ends.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let prices = redlock
    ///     .run_read("catalog", Duration::from_secs(30), |lease| async move {
    ///         // read the catalog while lease.is_valid(): other readers too
    ///         assert!(lease.is_valid());
    ///         3
    ///     })
    ///     .await?;
    /// assert_eq!(prices, 3);
    /// # Ok(()) }
    /// ```
    pub async fn run_read<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_read_with(resource, ttl, &LockOptions::new(), work)
            .await
    }

    /// [`run_read`](Redlock::run_read) with [`LockOptions`]: wait for the
    /// lock, set the extension interval or cap the extensions.
    pub async fn run_read_with<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let keeping = Keeping::new(self.driver(), ttl, options)?;
        let lock = self.read_lock_with(resource, ttl, options).await?;
        run_kept(lock, keeping, work).await
    }

    /// Runs `work` as `resource`'s writer (a read/write lock, see
    /// [`write_lock`](Redlock::write_lock)), under a lease kept as
    /// [`run`](Redlock::run) keeps one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// redlock
    ///     .run_write("catalog", Duration::from_secs(30), |lease| async move {
    ///         // rewrite the catalog, alone, while lease.is_valid()
    ///         assert!(lease.is_valid());
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_write<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_write_with(resource, ttl, &LockOptions::new(), work)
            .await
    }

    /// [`run_write`](Redlock::run_write) with [`LockOptions`]: wait for the
    /// lock (a waiting writer keeps new readers off), set the extension
    /// interval or cap the extensions.
    pub async fn run_write_with<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let keeping = Keeping::new(self.driver(), ttl, options)?;
        let lock = self.write_lock_with(resource, ttl, options).await?;
        run_kept(lock, keeping, work).await
    }
}

/// Runs `work` under `lock`, kept alive per `keeping`, and releases it: the
/// body of every `run` ([`Redlock::run_with`],
/// [`Semaphore::run_with`](crate::semaphore::Semaphore::run_with)).
pub(crate) async fn run_kept<F, Fut, T>(
    mut lock: Lock,
    keeping: Keeping,
    work: F,
) -> Result<T, LockError>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let lease = Lease::new(&lock);
    // Ends the lease for subtasks even if this future is dropped.
    let _ending = EndOnDrop(lease.clone());
    let mut work = std::pin::pin!(work(lease.clone()));
    // Never polled once the deadline has passed, whatever order the
    // timers fire in: the keeper's own timer may land a tick after the
    // work's, and the keeper then ends the lease.
    let work = std::future::poll_fn(|cx| {
        if lease.is_valid() {
            work.as_mut().poll(cx)
        } else {
            std::task::Poll::Pending
        }
    });
    let outcome = tokio::select! {
        // The keeper first: once the deadline has passed, the work is not
        // polled again.
        biased;
        () = keep(&mut lock, keeping, &lease) => Err(LockError::Lost {
            resource: lock.resource().to_owned(),
        }),
        output = work => Ok(output),
    };
    lease.end();
    let resource = lock.resource().to_owned();
    if let Err(e) = lock.release().await {
        tracing::warn!(resource, error = %e, "release after run failed; the keys expire at their TTL");
    }
    outcome
}

impl Lock {
    /// Keeps this lock alive in the background, extending it every third of
    /// its TTL, until the returned watchdog is released, stopped or dropped
    /// (dropping it also releases the lock).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let lock = redlock.lock("report", std::time::Duration::from_secs(3)).await?;
    /// let watchdog = lock.keep_alive()?;
    /// let lost = watchdog.lease().lost();
    /// tokio::select! {
    ///     _ = lost => { /* stop: the lock is gone */ }
    ///     _ = async { /* work */ } => {}
    /// }
    /// watchdog.release().await
    /// # }
    /// ```
    pub fn keep_alive(self) -> Result<KeepAlive, LockError> {
        let ttl = Duration::from_millis(self.ttl_ms());
        self.keep_alive_with(&LockOptions::new().extend_every(ttl / 3))
    }

    /// [`keep_alive`](Lock::keep_alive) with the extension interval and cap
    /// from `options` (its other settings do not apply to a held lock). On
    /// error the lock is dropped, and so released in the background.
    ///
    /// Needs a tokio runtime ([`ConfigError::NoRuntime`] otherwise).
    pub fn keep_alive_with(mut self, options: &LockOptions) -> Result<KeepAlive, LockError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        let ttl = Duration::from_millis(self.ttl_ms());
        let options = match options.extend_interval() {
            Some(_) => options.clone(),
            None => options.clone().extend_every(ttl / 3),
        };
        let keeping = Keeping::new(self.driver(), ttl, &options)?;
        let lease = Lease::new(&self);
        let (stop, stopped) = oneshot::channel::<()>();
        let task_lease = lease.clone();
        let task = runtime.spawn(async move {
            tokio::select! {
                biased;
                _ = stopped => {}
                () = keep(&mut self, keeping, &task_lease) => {}
            }
            self
        });
        Ok(KeepAlive {
            lease,
            stop: Some(stop),
            task,
        })
    }
}

/// A watchdog extending a [`Lock`] in the background; see
/// [`Lock::keep_alive`]. Dropping it stops the extensions and releases the
/// lock in the background.
#[derive(Debug)]
#[must_use = "dropping a KeepAlive stops the extensions and releases the lock at once"]
pub struct KeepAlive {
    lease: Lease,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Lock>,
}

impl KeepAlive {
    /// The lease: validity, tokens, and the [`Lease::lost`] and
    /// [`Lease::ended`] signals.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Stops extending and hands the lock back (it stays held until its
    /// deadline or a release). `None` only if the runtime is shutting down,
    /// in which case the lock has been dropped (and released in the
    /// background).
    pub async fn stop(mut self) -> Option<Lock> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.ok()
    }

    /// Stops extending and releases the lock.
    pub async fn release(self) -> Result<(), LockError> {
        match self.stop().await {
            Some(lock) => lock.release().await,
            None => Ok(()),
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        // Aborting drops the task's Lock, which releases it in the background.
        self.task.abort();
        self.lease.end();
    }
}
