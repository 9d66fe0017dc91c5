//! `redquorum-serve`: the quorum lock as a service, for programs in any
//! language, speaking Dapr's distributed-lock API so that Dapr's SDKs use
//! it unchanged — over gRPC (`dapr.proto.runtime.v1.Dapr/TryLockAlpha1`,
//! `UnlockAlpha1`) and HTTP (`POST /v1.0-alpha1/lock/{store}`,
//! `/unlock/{store}`) — with health endpoints that reflect the quorum, and
//! Prometheus metrics.
//!
//! The command (`src/main.rs`) is configured like `redquorum`; this
//! library is what it runs, for tests and for embedding:
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use redquorum::{Redlock, Retry};
//! use redquorum_serve::{Config, Running};
//!
//! let redlock = Redlock::builder()
//!     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
//!     .retry(Retry::none()) // a try-lock is one round
//!     .build()
//!     .await?;
//! let running = Running::start(redlock, Config::default()).await?;
//! println!("HTTP on {}, gRPC on {}", running.http_addr(), running.grpc_addr());
//! tokio::signal::ctrl_c().await?;
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! docs/serve.md says why a sidecar, the API, what is compatible with
//! Dapr and what a crash costs.

mod auth;
mod connections;
mod error;
mod grants;
pub mod grpc;
mod health;
mod http;
mod limits;
mod locks;
pub mod metrics;
pub mod native;
mod server;

pub use auth::ApiToken;
pub use error::ServeError;
pub use limits::Limits;
pub use locks::{DAPR_LABEL, LockService, TryLock, Unlock, UnlockStatus};
pub use server::{Config, Running, StartError};
