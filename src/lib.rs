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
//! use redquorum::LockOptions;
//!
//! let (ttl, fenced) = (Duration::from_secs(10), LockOptions::new().fenced());
//! let first = redlock.lock_with("ledger", ttl, &fenced).await?;
//! let token = first.fence().expect("fenced locks carry a token");
//! first.release().await?;
//! let second = redlock.lock_with("ledger", ttl, &fenced).await?;
//! assert!(second.fence() > Some(token));
//! second.release().await
//! # }
//! ```
//!
//! ## One type per primitive
//!
//! | Primitive | Type | Take it | Options |
//! |---|---|---|---|
//! | a lock (and fenced, and held at least a time) | [`Redlock`] | `try_lock`, `lock`, `lock_with`, `run`, `run_with` | [`LockOptions`] |
//! | one lock over several resources | [`Redlock`] | `lock_many`, `lock_many_with` | [`AcquireOptions`] |
//! | a reentrant lock | [`ReentrantLock::new`] | `lock`, `lock_with` | [`AcquireOptions`] |
//! | a read/write lock | [`RwLock::new`] | `read`, `write` (`try_`, `_with`, `run_`) | [`AcquireOptions`] |
//! | a counting semaphore | [`Semaphore::new`] | `try_acquire`, `acquire`, `acquire_with`, `run`, `run_with` | [`AcquireOptions`] |
//! | leader election | [`election::Election::new`] | `campaign`, `campaign_with`, `lead`, `lead_with`, `observe` | [`AcquireOptions`] |
//!
//! Every hold is a [`Lock`] (a permit wraps one): extended, released,
//! dropped or kept alive ([`Lock::keep_alive_with`], [`LeaseOptions`]) the
//! same way. The client's own view of its nodes is [`Redlock::nodes`]; an
//! operator's reads are [`Redlock::inspect`], [`RwLock::inspect`],
//! [`Semaphore::inspect`], and forced releases `release_token` on each type.
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
// With `internals` off, what it re-exports is reachable from nowhere: the
// check holds with it on, as every build of this repository has it.
#![cfg_attr(feature = "internals", warn(unreachable_pub))]
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
pub use api::nodes::{NodeHealth, NodeStatus, Nodes};
pub use api::redlock::Redlock;
pub use api::reentrant::ReentrantLock;
pub use api::rwlock::RwLock;
pub use api::semaphore::{Permit, Semaphore};
pub use api::{election, inspect, semaphore};
pub use client::{Builder, ChangeError, MemberChange};
pub use proto::error::{Answer, LockError, NodeError, Votes};
pub use proto::input::InputError;
pub use proto::keys::KeyLayout;
pub use proto::retry::Retry;
pub use proto::{deployment, keys, verdict};

/// The arithmetic of a quorum: its size, a lock's validity and the clock
/// drift allowed for (`docs/design.md` §2).
///
/// ```
/// use std::time::Duration;
/// use redquorum::quorum::{quorum, validity};
/// assert_eq!(quorum(5), 3);
/// // 10 s at the default drift factor (1%) and its 2 ms floor.
/// assert_eq!(validity(10_000, 0.01), Some(Duration::from_millis(9_898)));
/// ```
pub mod quorum {
    pub use crate::proto::quorum::{
        DEFAULT_NODE_TIMEOUT, DriftFactor, MAX_TTL_MS, drift, quorum, remaining, validity,
    };
}

/// What this repository's own chaos harness, benchmarks and tests read of
/// the protocol beyond the API: a round's vote counting, the per-node
/// timeout rule, the restart rule, the bound on watched semaphore slots and
/// the in-memory model of a node. Feature `internals`; no stability
/// promise.
#[cfg(feature = "internals")]
pub mod internals {
    pub use crate::api::wait::MAX_WATCHED_SLOTS;
    pub use crate::proto::quorum::{Count, DRIFT_FLOOR_MS, Decision, Vote, node_timeout};
    pub use crate::proto::restart;
    #[cfg(feature = "testing")]
    pub use crate::testing::{owned::OwnedOp, redis::redis_node, store::Store, store::Taken};
}
pub use settings::config_error::ConfigError;
pub use settings::{AcquireOptions, DEFAULT_MAX_TTL, LeaseOptions, LockOptions};
pub use transport::node;

// The README's example is compiled as a doctest, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
