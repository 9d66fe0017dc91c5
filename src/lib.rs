//! # redquorum
//!
//! **Redlock** for Rust: a distributed lock held when a majority of N
//! independent Redis masters agree, so that losing a minority of them —
//! dead, frozen, slow or cut off — loses neither the lock nor its safety.
//!
//! ```toml
//! [dependencies]
//! redquorum = "0.1"   # default feature `tls`: rediss:// nodes
//! # redquorum = { version = "0.1", default-features = false }   # no TLS, fewer crates
//! ```
//!
//! Connect to the masters (independent ones: not replicas of each other):
//!
//! ```
//! use redquorum::{ConfigError, Redlock};
//!
//! async fn connect() -> Result<Redlock, ConfigError> {
//!     Redlock::connect([
//!         "redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
//!         "redis://10.0.0.4:6379", "redis://10.0.0.5:6379",
//!     ])
//!     .await
//! }
//! # let _ = connect;
//! ```
//!
//! The examples below run on in-memory nodes (`redquorum::testing`, feature
//! `testing`) where they say `redlock`; the code is the same against Redis.
//!
//! **Take it once, or leave it** — [`Redlock::try_lock`] and [`Lock::release`]:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//! use redquorum::LockError;
//!
//! match redlock.try_lock("cron:nightly", Duration::from_secs(60)).await {
//!     Ok(lock) => {
//!         // Exclusion holds while the lock is valid: check before each step.
//!         if lock.is_valid() { /* run the job */ }
//!         lock.release().await?;
//!     }
//!     Err(LockError::Taken { .. }) => { /* another host runs it */ }
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! **Work under a lease** — [`Redlock::run`] extends the lock every third of
//! its TTL while the work runs, and drops the work at once if the lease
//! cannot be kept ([`LockError::Lost`]):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//!
//! let rows = redlock
//!     .run("reports:daily", Duration::from_secs(30), |lease| async move {
//!         // long work; lease.remaining() and lease.lost() at checkpoints
//!         assert!(lease.is_valid());
//!         42
//!     })
//!     .await?;
//! assert_eq!(rows, 42);
//! # Ok(()) }
//! ```
//!
//! **Wait for it** — [`LockOptions::wait`] keeps trying up to a deadline,
//! woken the moment the holder releases:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//! use redquorum::LockOptions;
//!
//! let holder = redlock.lock("queue:drain", Duration::from_millis(200)).await?;
//! let wait = LockOptions::new().wait(Duration::from_secs(5));
//! // Held for 200 ms more at most: the waiter gets it then.
//! let lock = redlock.lock_with("queue:drain", Duration::from_secs(10), &wait).await?;
//! assert!(!holder.is_valid());
//! lock.release().await
//! # }
//! ```
//!
//! **Fence the storage** — a fenced lock carries a token larger than every
//! earlier holder's; the storage rejects writes with a smaller one, which
//! stops a holder that paused past its validity (`docs/fencing.md`):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//!
//! let first = redlock.lock_fenced("ledger", Duration::from_secs(10)).await?;
//! let token = first.fence().expect("fenced locks carry a token");
//! first.release().await?;
//! let second = redlock.lock_fenced("ledger", Duration::from_secs(10)).await?;
//! assert!(second.fence() > Some(token));
//! second.release().await
//! # }
//! ```
//!
//! ## What it guarantees
//!
//! - **Mutual exclusion while [`Lock::is_valid`]**, as long as clocks drift
//!   less than the drift factor and a majority of nodes keep their keys
//!   (persistence on; see `docs/design.md`).
//! - **Availability with a failed minority**: a frozen node costs at most the
//!   per-node timeout, never the whole round.
//! - **No leftovers**: a failed acquisition is released on every node,
//!   including those whose reply never arrived.
//! - **Only the owner acts**: a 128-bit random token, compare-and-act in Lua.
//! - **Clear outcomes**: [`LockError`] says taken, unavailable, expired, timed
//!   out or misconfigured, with every node's answer.
//!
//! The algorithm and its arithmetic are in [`quorum`] and `docs/design.md`;
//! operating the nodes, metrics and logs in `docs/operations.md`; moving
//! from rslock, node-redlock or redsync in `docs/migrating.md`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod api;
mod client;
mod engine;
#[cfg(test)]
mod log_capture;
mod proto;
mod settings;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;

pub use api::lease::{KeepAlive, Lease, LeaseEnd};
pub use api::lock::Lock;
pub use api::probe::NodeHealth;
pub use api::redlock::Redlock;
pub use api::semaphore::{Permit, Semaphore};
pub use api::{election, inspect, rwlock, semaphore};
pub use client::{Builder, ChangeError, MemberChange};
pub use proto::error::{Answer, LockError, NodeError, Votes};
pub use proto::input::InputError;
pub use proto::keys::KeyLayout;
pub use proto::retry::Retry;
pub use proto::{deployment, keys, quorum, restart, verdict};
pub use settings::config_error::ConfigError;
pub use settings::{DEFAULT_MAX_TTL, LockOptions};
pub use transport::node;

// The README's example is compiled as a doctest, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
