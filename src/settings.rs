//! Settings, at the bottom of the house: plain data that every layer
//! above reads and the client's users set. One call's options
//! ([`LockOptions`]), the client's defaults and bounds, and the error a
//! setting that breaks them gets ([`config_error`]). The retry policy is
//! pure and lives in `crate::proto::retry`.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::retry::Budget;

pub(crate) mod config_error;

/// The longest TTL a lock may have unless [`Builder::max_ttl`](crate::Builder::max_ttl) says
/// otherwise, and so how long a node that restarted without persistence
/// counts toward no new grant.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);

/// How long one connection attempt may take, unless
/// [`Builder::connect_timeout`](crate::Builder::connect_timeout) says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest connect timeout accepted.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Options of one lock call: how long to wait for the lock, whether it
/// carries a fencing token, and — for [`Redlock::run_with`](crate::Redlock::run_with) — how the lease
/// is kept alive.
///
/// ```
/// use std::time::Duration;
/// use redquorum::LockOptions;
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(5))
///     .fenced()
///     .extend_every(Duration::from_secs(2))
///     .max_extensions(100);
/// assert_ne!(options, LockOptions::new());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "LockOptions do nothing until passed to a lock call"]
pub struct LockOptions {
    max_wait: Option<Duration>,
    fenced: bool,
    extend_every: Option<Duration>,
    max_extensions: Option<u32>,
    label: Option<Arc<str>>,
    hold_at_least: Option<Duration>,
}

impl LockOptions {
    /// The defaults: retry per the client's [`Retry`](crate::Retry) policy, no fencing
    /// token, a lease extended every third of its TTL without limit.
    pub fn new() -> Self {
        LockOptions::default()
    }

    /// Keep trying for up to `max_wait` instead of following the retry
    /// policy; then [`LockError::Timeout`](crate::LockError::Timeout) with
    /// the last round's error.
    ///
    /// Between rounds a waiter sleeps until a release wakes it
    /// ([`Builder::notify_waiters`](crate::Builder::notify_waiters)) or the holder's reported TTL runs out,
    /// never past an abandoned lock's expiry. A round never starts after
    /// `max_wait`, so the call returns within `max_wait` plus one round.
    ///
    /// ```
    /// use std::time::Duration;
    /// let wait = redquorum::LockOptions::new().wait(Duration::from_secs(5));
    /// # let _ = wait;
    /// ```
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The rounds these options allow: the retry policy's, or until the
    /// wait is over, from now.
    pub(crate) fn attempts(&self) -> Budget<tokio::time::Instant> {
        match self.max_wait() {
            None => Budget::Attempts,
            Some(wait) => Budget::Until(tokio::time::Instant::now().checked_add(wait)),
        }
    }

    /// Carry a fencing token, as [`Redlock::lock_fenced`](crate::Redlock::lock_fenced) does.
    pub fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// Labels the hold with `label`, for people: an inspection
    /// ([`Redlock::inspect`](crate::Redlock::inspect), `redquorum status`)
    /// shows who holds a lock by it, beside the token; it is stored with the
    /// token on each node and never compared (only the token makes a hold
    /// ours). At most [`MAX_LABEL`](crate::transport::node::MAX_LABEL) bytes, no NUL
    /// byte ([`InputError::InvalidLabel`](crate::proto::input::InputError::InvalidLabel)
    /// at the call otherwise). Never put a secret in it: anyone who can read
    /// the keys reads it. Replaces the client's default
    /// ([`Builder::label`](crate::Builder::label)). Not stored for readers of a read/write lock, nor
    /// for plain locks under interop keys (their value is the token alone,
    /// as their peers set it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use redquorum::LockOptions;
    /// let options = LockOptions::new().label("billing-7f9c pid 4121");
    /// let lock = redlock.lock_with("invoices", std::time::Duration::from_secs(30), &options).await?;
    /// let seen = redlock.inspect("invoices").await?;
    /// assert_eq!(seen.label(), Some("billing-7f9c pid 4121"));
    /// # lock.release().await
    /// # }
    /// ```
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The label asked for, if any.
    pub(crate) fn label_given(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// Keep the lock until `at_least` after it was granted, even when it is
    /// released sooner: the release then leaves the key to expire at that
    /// time instead of deleting it (ShedLock's `lockAtLeastFor`). For a job
    /// that must run once per period (a nightly report on several
    /// replicas whose clocks or schedulers are a few seconds apart): a lock
    /// alone only keeps two runs from *overlapping*; held at least until
    /// the slot is over, a replica that fires late finds it taken. At most
    /// the TTL ([`InputError::HoldAtLeastAboveTtl`](crate::proto::input::InputError::HoldAtLeastAboveTtl):
    /// a holder that crashes keeps it for the TTL only); plain and fenced
    /// locks only ([`InputError::HoldAtLeastUnsupported`](crate::proto::input::InputError::HoldAtLeastUnsupported)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{LockError, LockOptions};
    /// let slot = LockOptions::new().hold_at_least(Duration::from_secs(50));
    /// redlock.run_with("nightly-report", Duration::from_secs(60), &slot, |_| async {
    ///     // the report, done in a second
    /// }).await?;
    /// // Done, but the slot stays taken for the rest of the 50 s.
    /// let late = redlock.try_lock("nightly-report", Duration::from_secs(60)).await;
    /// assert!(matches!(late, Err(LockError::Taken { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = Some(at_least);
        self
    }

    /// The time the lock is held at least, if set.
    pub(crate) fn min_hold(&self) -> Option<Duration> {
        self.hold_at_least
    }

    /// For leases: extend every `every` (default: a third of the TTL). Must
    /// be above zero and below the TTL's validity.
    pub fn extend_every(mut self, every: Duration) -> Self {
        self.extend_every = Some(every);
        self
    }

    /// For leases: extend at most `n` times, after which the lease runs out
    /// at its deadline and the work is stopped.
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// The maximum wait, if set.
    pub(crate) fn max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// Whether the lock carries a fencing token.
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The lease extension interval, if set.
    pub(crate) fn extend_interval(&self) -> Option<Duration> {
        self.extend_every
    }

    /// The cap on lease extensions, if set.
    pub(crate) fn extension_cap(&self) -> Option<u32> {
        self.max_extensions
    }
}
