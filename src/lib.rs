//! # redquorum
//!
//! **Redlock** for Rust: a distributed lock held when a majority of N
//! independent Redis masters agree, so that losing a minority of them —
//! dead, frozen, slow or cut off — loses neither the lock nor its safety.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redquorum::Redlock;
//!
//! let redlock = Redlock::connect([
//!     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
//!     "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
//! ]).await?;
//!
//! let mut lock = redlock.lock("payments:batch-7", Duration::from_secs(10)).await?;
//! while lock.is_valid() {
//!     // ... one step of the critical section ...
//!     # break;
//! }
//! lock.extend(Duration::from_secs(10)).await?;
//! lock.release().await?;
//! # Ok(()) }
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
//! The algorithm and its arithmetic are in [`quorum`] and `docs/design.md`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod address;
mod admin;
mod claim;
mod cluster;
mod config;
mod dispatch;
mod driver;
mod lease;
mod lock;
pub mod node;
mod probe;
mod proto;
mod pubsub;
use proto::error;
mod redis_node;
mod redlock;
mod scripts;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod token;
mod wakeup;

pub use config::{Builder, LockOptions, Retry};
pub use error::{Answer, ConfigError, LockError, NodeError, Votes};
pub use lease::{KeepAlive, Lease, LeaseEnd};
pub use lock::Lock;
pub use probe::NodeHealth;
pub use proto::keys::KeyLayout;
pub use proto::{keys, quorum};
pub use redlock::Redlock;

// The README's example is compiled as a doctest, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
