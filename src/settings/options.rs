//! One call's options, typed by what they apply to, so that a setting a
//! call cannot honour does not compile rather than failing at run time:
//!
//! - [`AcquireOptions`]: how long to wait, and the holder's label. Every
//!   acquisition takes them (a lock over several resources, a reentrant
//!   hold, a read or write hold, a permit, a campaign).
//! - [`LockOptions`]: a plain lock's — the above, and a fencing token and a
//!   hold of at least some time, which only a plain lock's key can carry.
//! - [`LeaseOptions`]: how a kept lease is extended; for the calls that
//!   keep one (`keep_alive_with`, `run_with`, `lead_with`).
//!
//! The checks that remain at the call are of values, not of pairs: a
//! label too long, a hold longer than the TTL, an extension interval not
//! within the validity — each [`InputError`](crate::InputError) with
//! nothing sent.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::retry::Budget;

/// Options every acquisition takes: how long to wait for it, and a label
/// for people.
///
/// ```
/// use std::time::Duration;
/// use redquorum::AcquireOptions;
/// let options = AcquireOptions::new()
///     .wait(Duration::from_secs(5))
///     .label("billing-7f9c pid 4121");
/// assert_ne!(options, AcquireOptions::new());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to a call"]
pub struct AcquireOptions {
    max_wait: Option<Duration>,
    label: Option<Arc<str>>,
}

impl AcquireOptions {
    /// The defaults: rounds per the client's [`Retry`](crate::Retry)
    /// policy; the client's label ([`Builder::label`](crate::Builder::label)).
    pub fn new() -> Self {
        AcquireOptions::default()
    }

    /// Keep trying for up to `max_wait` instead of following the retry
    /// policy; then [`LockError::Timeout`](crate::LockError::Timeout) with
    /// the last round's error.
    ///
    /// Between rounds a waiter sleeps until a release wakes it
    /// ([`Builder::notify_waiters`](crate::Builder::notify_waiters)) or the
    /// holder's reported TTL runs out, never past an abandoned lock's
    /// expiry. A round never starts after `max_wait`, so the call returns
    /// within `max_wait` plus one round.
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The wait set with [`wait`](Self::wait), if any.
    pub(crate) fn max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// Labels the hold with `label`, for people: an inspection
    /// ([`Redlock::inspect`](crate::Redlock::inspect), `redquorum status`)
    /// shows who holds a lock by it, beside the token; it is stored with
    /// the token on each node and never compared (only the token makes a
    /// hold ours). At most [`MAX_LABEL`](crate::node::MAX_LABEL) bytes, no
    /// NUL byte ([`InputError::InvalidLabel`](crate::InputError::InvalidLabel)
    /// at the call otherwise). Never put a secret in it: anyone who can
    /// read the keys reads it. Replaces the client's default
    /// ([`Builder::label`](crate::Builder::label)). Not stored for readers
    /// of a read/write lock, nor for plain locks under interop keys (their
    /// value is the token alone, as their peers set it).
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The label set with [`label`](Self::label), if any.
    pub(crate) fn label_given(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The rounds these options allow: the retry policy's, or until the
    /// wait is over, from now.
    pub(crate) fn attempts(&self) -> Budget<tokio::time::Instant> {
        match self.max_wait {
            None => Budget::Attempts,
            Some(wait) => Budget::Until(tokio::time::Instant::now().checked_add(wait)),
        }
    }
}

/// A plain lock's options ([`Redlock::lock_with`](crate::Redlock::lock_with),
/// [`Redlock::run_with`](crate::Redlock::run_with)): those of every
/// acquisition ([`AcquireOptions`]), a fencing token, and a hold of at
/// least some time.
///
/// ```
/// use std::time::Duration;
/// use redquorum::LockOptions;
/// let options = LockOptions::new().wait(Duration::from_secs(5)).fenced();
/// assert_ne!(options, LockOptions::new());
/// ```
///
/// Only a plain lock carries a token or a minimum hold: other kinds take
/// [`AcquireOptions`], so asking a permit for a token does not compile.
///
/// ```compile_fail
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// let api = redquorum::Semaphore::new(redlock, "api", 2)?;
/// let ttl = std::time::Duration::from_secs(10);
/// let _ = api.acquire_with(ttl, &redquorum::LockOptions::new().fenced()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to a call"]
pub struct LockOptions {
    acquire: AcquireOptions,
    fenced: bool,
    hold_at_least: Option<Duration>,
}

impl LockOptions {
    /// The defaults: [`AcquireOptions::new`]'s, no fencing token, released
    /// when released.
    pub fn new() -> Self {
        LockOptions::default()
    }

    /// [`AcquireOptions::wait`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let wait = redquorum::LockOptions::new().wait(Duration::from_secs(5));
    /// let lock = redlock.lock_with("orders:42", Duration::from_secs(10), &wait).await?;
    /// # lock.release().await
    /// # }
    /// ```
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.acquire = self.acquire.wait(max_wait);
        self
    }

    /// [`AcquireOptions::label`].
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
        self.acquire = self.acquire.label(label);
        self
    }

    /// Carry a fencing token ([`Lock::fence`](crate::Lock::fence)) larger
    /// than that of every earlier holder of the resource. Two rounds: the
    /// first takes the lease and increments a per-node counter, the second
    /// writes the largest counter seen back to the nodes that granted; the
    /// token is granted only when a quorum confirmed the write-back before
    /// the deadline. Hand it to the resource you protect and have it reject
    /// writes carrying a smaller one: that stops a holder that paused past
    /// its validity. See `docs/fencing.md`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::LockOptions;
    /// let fenced = LockOptions::new().fenced();
    /// let first = redlock.lock_with("ledger", Duration::from_secs(10), &fenced).await?;
    /// let token: u64 = first.fence().expect("fenced locks carry a token");
    /// first.release().await?;
    /// let second = redlock.lock_with("ledger", Duration::from_secs(10), &fenced).await?;
    /// assert!(second.fence() > Some(token));
    /// second.release().await
    /// # }
    /// ```
    pub fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// Whether [`fenced`](Self::fenced) was set.
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// Keep the slot taken until `at_least` after the lock was granted,
    /// even when it is released sooner (ShedLock's `lockAtLeastFor`): for a
    /// job that must run once per period (a nightly report on several
    /// replicas whose clocks or schedulers are a few seconds apart). A lock
    /// alone only keeps two runs from *overlapping*; held at least until the
    /// slot is over, a replica that fires late finds it taken.
    ///
    /// The grant marks the period on each node that granted it with a key of
    /// its own (`{R}:period`, [`KeyLayout::period_key`](crate::KeyLayout::period_key)),
    /// which stands for `at_least` whatever happens to the holder: a crash
    /// frees the lock within its TTL, not the slot. So `at_least` may be far
    /// longer than the TTL and than `max_ttl` (a nightly job: 23 h), which
    /// stays the bound of every key a holder holds. Acquires with
    /// `hold_at_least` are refused while the mark stands on a quorum
    /// ([`LockError::Taken`](crate::LockError::Taken), with its time left):
    /// give every replica of the job the same option. A release within the
    /// TTL of the end also leaves the lock key until then, so a plain
    /// [`try_lock`](crate::Redlock::try_lock) finds it taken too. A refused
    /// round takes its marks back.
    ///
    /// What a restart costs: a node that lost the mark (restarted empty)
    /// sits out `max_ttl`, then no longer refuses for it. Once a quorum of
    /// nodes lacks the mark (one empty restart, where the grant reached
    /// exactly a quorum), the slot can run again within the period: at most
    /// a repeated slot, never two holders at once (docs/guarantees.md,
    /// "Once per period"). Between 1 ms and 2^40 ms
    /// ([`InputError::InvalidHoldAtLeast`](crate::InputError::InvalidHoldAtLeast)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{LeaseOptions, LockError, LockOptions};
    /// let slot = LockOptions::new().hold_at_least(Duration::from_secs(50));
    /// let ttl = Duration::from_secs(60);
    /// redlock.run_with("nightly-report", ttl, &slot, &LeaseOptions::new(), |_| async {
    ///     // the report, done in a second
    /// }).await?;
    /// // Done, but the slot stays taken for the rest of the 50 s.
    /// let late = redlock.try_lock("nightly-report", ttl).await;
    /// assert!(matches!(late, Err(LockError::Taken { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = Some(at_least);
        self
    }

    /// The time set with [`hold_at_least`](Self::hold_at_least), if any.
    pub(crate) fn min_hold(&self) -> Option<Duration> {
        self.hold_at_least
    }

    /// The options every acquisition takes, as set here.
    pub(crate) fn acquire(&self) -> &AcquireOptions {
        &self.acquire
    }
}

impl From<AcquireOptions> for LockOptions {
    /// A plain lock's options with `acquire`'s wait and label, no token, no
    /// minimum hold.
    fn from(acquire: AcquireOptions) -> Self {
        LockOptions {
            acquire,
            ..LockOptions::default()
        }
    }
}

/// How a kept lease is extended ([`Lock::keep_alive_with`](crate::Lock::keep_alive_with),
/// [`Redlock::run_with`](crate::Redlock::run_with) and the other
/// `run_with`s, [`Election::campaign_with`](crate::election::Election::campaign_with)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redquorum::LockError> {
/// # let redlock = redquorum::testing::redlock(5).await;
/// use std::time::Duration;
/// use redquorum::LeaseOptions;
/// let lease = LeaseOptions::new()
///     .extend_every(Duration::from_secs(2))
///     .max_extensions(100);
/// let kept = redlock.lock("feed", Duration::from_secs(10)).await?.keep_alive_with(&lease)?;
/// kept.release().await
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to a call"]
pub struct LeaseOptions {
    extend_every: Option<Duration>,
    max_extensions: Option<u32>,
}

impl LeaseOptions {
    /// The defaults: extended every third of the TTL, without limit.
    pub fn new() -> Self {
        LeaseOptions::default()
    }

    /// Extend every `every` (default: a third of the TTL). Must be above
    /// zero and below the TTL's validity
    /// ([`InputError::InvalidExtendInterval`](crate::InputError::InvalidExtendInterval)
    /// at the call otherwise).
    pub fn extend_every(mut self, every: Duration) -> Self {
        self.extend_every = Some(every);
        self
    }

    /// The interval set with [`extend_every`](Self::extend_every), if any.
    pub(crate) fn extend_interval(&self) -> Option<Duration> {
        self.extend_every
    }

    /// Extend at most `n` times, after which the lease runs out at its
    /// deadline and the work is stopped.
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// The cap set with [`max_extensions`](Self::max_extensions), if any.
    pub(crate) fn extension_cap(&self) -> Option<u32> {
        self.max_extensions
    }
}
