//! Leases that live with the work: a lock extended in the background while
//! its holder works, and a loss that stops the work.
//!
//! [`Redlock::run`](crate::Redlock::run) owns the whole life cycle: acquire, extend every third of
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

use crate::api::lock::Lock;
use crate::engine::driver::Driver;
use crate::proto::error::LockError;
use crate::proto::input::InputError;
use crate::proto::keeper::{Extension, Keeper, default_interval};
use crate::proto::quorum;
use crate::proto::round::gone_for_good;
use crate::settings::LeaseOptions;

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
    pub(crate) fn new(lock: &Lock) -> Self {
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
    /// [`LockOptions::fenced`](crate::LockOptions::fenced). Pass it with every write to the protected
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

    pub(crate) fn end(&self) {
        self.end_as(LeaseEnd::Finished);
    }
}

/// Ends a lease when dropped.
pub(crate) struct EndOnDrop(pub(crate) Lease);

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
        options: &LeaseOptions,
    ) -> Result<Self, InputError> {
        let validity = driver.check_ttl(ttl)?.validity;
        let every = options
            .extend_interval()
            .unwrap_or_else(|| default_interval(ttl));
        if every.is_zero() || every >= validity {
            return Err(InputError::InvalidExtendInterval { every, validity });
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
pub(crate) async fn keep(lock: &mut Lock, keeping: Keeping, lease: &Lease) {
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
        let shut = tokio::select! {
            biased;
            () = lock.driver().closing() => true,
            () = tokio::time::sleep_until(next.min(deadline)) => false,
        };
        if shut {
            break "the client was shut down (Redlock::shutdown released it)";
        }
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
        self.keep_alive_with(&LeaseOptions::new())
    }

    /// [`keep_alive`](Lock::keep_alive) with the extension interval and cap
    /// from `options` (its other settings do not apply to a held lock). On
    /// error the lock is dropped, and so released in the background.
    ///
    /// Needs a tokio runtime ([`InputError::NoRuntime`] otherwise).
    pub fn keep_alive_with(mut self, options: &LeaseOptions) -> Result<KeepAlive, LockError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| InputError::NoRuntime)?;
        let ttl = Duration::from_millis(self.ttl_ms());
        let keeping = Keeping::new(self.driver(), ttl, options)?;
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
    ///
    /// # Cancel safety
    ///
    /// Stopping is at the first poll: dropping this future afterwards drops the
    /// lock it would return, which releases it in the background.
    pub async fn stop(mut self) -> Option<Lock> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.ok()
    }

    /// Stops extending and releases the lock.
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
