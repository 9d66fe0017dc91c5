//! The checks the tests share: a bounded wait for a condition the library
//! reaches in the background ([`eventually`]) or for a value
//! ([`eventually_ok`]), and a detector of two holders at once
//! ([`Exclusion`]).

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often [`eventually`] and [`eventually_ok`] look again.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `condition` every [`POLL`] until it holds, for at most `bound`;
/// panics naming `what` otherwise. For what the library finishes in the
/// background by design (a release's tail, a node's recovery) where no event
/// reaches the test; every wait is bounded, so a loaded machine is slower,
/// never stuck.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut n = 0;
/// redquorum_test_support::checks::eventually("three looks", Duration::from_secs(1), || {
///     n += 1;
///     std::future::ready(n == 3)
/// })
/// .await;
/// # }
/// ```
pub async fn eventually<F, Fut>(what: &str, bound: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + bound;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {bound:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `attempt` every [`POLL`] until it returns `Ok`, for at most
/// `bound`, and returns that value; panics naming `what` and the last `Err`
/// otherwise. [`eventually`] for a wait that yields a value (a lock, the
/// nodes' health), or whose failure is best explained by what was last
/// seen. `attempt` may be an async closure that borrows mutably what it
/// captures (a connection, a lock to extend).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut n = 0;
/// let third = redquorum_test_support::checks::eventually_ok(
///     "three looks",
///     Duration::from_secs(1),
///     async || {
///         n += 1;
///         if n == 3 { Ok(n) } else { Err(format!("{n} looks")) }
///     },
/// )
/// .await;
/// assert_eq!(third, 3);
/// # }
/// ```
pub async fn eventually_ok<T, E, F>(what: &str, bound: Duration, mut attempt: F) -> T
where
    F: AsyncFnMut() -> Result<T, E>,
    E: Display,
{
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {bound:?}; last: {last}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A detector of two holders at once: each holder [`enter`](Self::enter)s
/// while it holds; a second entry before the first left panics with "two
/// holders at once". Cheap to clone: clones watch one resource.
///
/// ```should_panic
/// let exclusion = redquorum_test_support::checks::Exclusion::default();
/// let _first = exclusion.enter();
/// let _second = exclusion.enter(); // two holders at once
/// ```
#[derive(Debug, Clone, Default)]
pub struct Exclusion(Arc<AtomicBool>);

/// One holder inside an [`Exclusion`]; it leaves when dropped.
#[derive(Debug)]
#[must_use = "the holder leaves when this is dropped"]
pub struct Inside<'a>(&'a Exclusion);

impl Exclusion {
    /// Marks a holder inside; panics if one already is.
    pub fn enter(&self) -> Inside<'_> {
        assert!(!self.0.swap(true, Ordering::SeqCst), "two holders at once");
        Inside(self)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.0.store(false, Ordering::SeqCst);
    }
}
