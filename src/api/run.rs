//! Work under a lock: acquire, keep the lease alive while the work runs,
//! drop the work the moment the lease can no longer be kept, release at the
//! end ([`Redlock::run`] and its forms; [`Semaphore::run`](crate::Semaphore::run)
//! and the read/write locks' share the body).

use std::future::Future;
use std::time::Duration;

use crate::api::lease::{EndOnDrop, Keeping, Lease, keep};
use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::proto::error::LockError;
use crate::settings::LockOptions;

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
/// [`Semaphore::run_with`](crate::api::semaphore::Semaphore::run_with)).
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
