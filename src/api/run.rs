//! Work under a lock: acquire, keep the lease alive while the work runs,
//! drop the work the moment the lease can no longer be kept, release at the
//! end ([`Redlock::run`] and [`Redlock::run_with`];
//! [`Semaphore::run`](crate::Semaphore::run), [`RwLock::run_read`](crate::RwLock::run_read)
//! and the others share the body).

use std::future::Future;
use std::time::Duration;

use crate::api::lease::{EndOnDrop, Keeping, Lease, keep};
use crate::api::lock::Lock;
use crate::api::redlock::Redlock;
use crate::engine::driver::Driver;
use crate::proto::error::LockError;
use crate::settings::{LeaseOptions, LockOptions};

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
        self.run_with(
            resource,
            ttl,
            &LockOptions::new(),
            &LeaseOptions::new(),
            work,
        )
        .await
    }

    /// [`run`](Redlock::run) with [`LockOptions`] (wait up to a deadline for
    /// the lock, carry a fencing token ([`Lease::fence`]), hold at least a
    /// time) and [`LeaseOptions`] (the extension interval, default `ttl /
    /// 3`, and a cap on the number of extensions).
    ///
    /// Work that can fail returns its own `Result`: the call's is then
    /// `Result<Result<T, E>, LockError>`, the outer for the lock (not had,
    /// lost), the inner for the work.
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
    /// use redquorum::{LeaseOptions, LockOptions};
    /// let options = LockOptions::new().wait(Duration::from_secs(60)).fenced();
    /// let lease = LeaseOptions::new().extend_every(Duration::from_secs(5));
    /// let written = redlock
    ///     .run_with("ledger", Duration::from_secs(15), &options, &lease, |lease| async move {
    ///         let token = lease.fence().unwrap();
    ///         std::fs::metadata(".").map(|_| token) // store.write(token, ...)
    ///     })
    ///     .await?;
    /// let token: u64 = written.expect("the work's own error");
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    pub async fn run_with<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
        lease: &LeaseOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let acquire = self.lock_with(resource, ttl, options);
        acquire_and_run(self.driver(), ttl, lease, acquire, work).await
    }
}

/// The body of every `run_with` ([`Redlock::run_with`],
/// [`Semaphore::run_with`](crate::Semaphore::run_with),
/// [`RwLock::run_read_with`](crate::RwLock::run_read_with) and
/// `run_write_with`): checks that a lease of `ttl` can be kept per
/// `lease` before anything is sent, then takes the lock (`acquire`, not
/// polled until then) and runs `work` under it ([`run_kept`]).
pub(crate) async fn acquire_and_run<F, Fut, T>(
    driver: &Driver,
    ttl: Duration,
    lease: &LeaseOptions,
    acquire: impl Future<Output = Result<Lock, LockError>>,
    work: F,
) -> Result<T, LockError>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let keeping = Keeping::new(driver, ttl, lease)?;
    run_kept(acquire.await?, keeping, work).await
}

/// Runs `work` under `lock`, kept alive per `keeping`, and releases it: the
/// body of every `run` ([`Redlock::run_with`],
/// [`Semaphore::run_with`](crate::api::semaphore::Semaphore::run_with)).
async fn run_kept<F, Fut, T>(mut lock: Lock, keeping: Keeping, work: F) -> Result<T, LockError>
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
