//! The public API: the client handle ([`Redlock`](redlock::Redlock)) and
//! each lock kind, with what it offers beside it: a held lock and its
//! lease, waiting, run-under-a-lock, semaphores, read/write locks,
//! election, inspection, and the operator's tools (probe, forced release).
//! Everything here runs on the engine (`crate::engine`); nothing here
//! touches a connection.

pub(crate) mod admin;
pub mod election;
pub mod inspect;
pub(crate) mod lease;
pub(crate) mod lock;
pub(crate) mod nodes;
pub(crate) mod redlock;
pub(crate) mod reentrant;
pub(crate) mod run;
pub(crate) mod rwlock;
pub mod semaphore;
pub(crate) mod wait;

/// Dropping what a call gives by accident is a compile warning: each guard
/// (`Lock`, `Permit`, `KeepAlive`) and each builder (`Builder`,
/// `LockOptions`) is `#[must_use]`, with a message that says what is lost.
/// Each misuse below fails to compile under `deny(unused_must_use)`; the
/// first block, the same calls with their results kept, compiles, so each
/// failure is the warning and nothing else.
///
/// ```no_run
/// #![deny(unused_must_use)]
/// # use redquorum::Semaphore;
/// # async fn keep(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// let _lock = redlock.lock("report", ttl).await?;
/// let _lock = redlock.try_lock("report", ttl).await?;
/// let _permit = Semaphore::new(redlock, "api", 2)?.try_acquire(ttl).await?;
/// let _lease = redlock.lock("report", ttl).await?.keep_alive()?;
/// let _builder = redquorum::Redlock::builder().nodes(["redis://127.0.0.1:7001"]);
/// let _options = redquorum::LockOptions::new().wait(ttl);
/// # Ok(()) }
/// ```
///
/// A lock dropped at once is released:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// redlock.lock("report", ttl).await?;
/// # Ok(()) }
/// ```
///
/// So is one from `try_lock`:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// redlock.try_lock("report", ttl).await?;
/// # Ok(()) }
/// ```
///
/// A permit dropped at once is given back:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # use redquorum::Semaphore;
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// Semaphore::new(redlock, "api", 2)?.try_acquire(ttl).await?;
/// # Ok(()) }
/// ```
///
/// A keep-alive dropped at once stops and releases:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// redlock.lock("report", ttl).await?.keep_alive()?;
/// # Ok(()) }
/// ```
///
/// A builder never built connects nothing:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// redquorum::Redlock::builder().nodes(["redis://127.0.0.1:7001"]);
/// # Ok(()) }
/// ```
///
/// Options never passed do nothing:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn misuse(redlock: &redquorum::Redlock) -> Result<(), redquorum::LockError> {
/// # let ttl = std::time::Duration::from_secs(10);
/// redquorum::LockOptions::new().wait(ttl);
/// # Ok(()) }
/// ```
#[cfg(doctest)]
struct MustUse;
