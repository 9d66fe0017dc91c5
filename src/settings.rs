//! Settings, at the bottom of the house: plain data that every layer
//! above reads and the client's users set. One call's options
//! ([`options`]), the client's defaults and bounds, and the error a
//! setting that breaks them gets ([`config_error`]). The retry policy is
//! pure and lives in `crate::proto::retry`.

use std::time::Duration;

pub(crate) mod config_error;
pub(crate) mod options;

pub use options::{AcquireOptions, LeaseOptions, LockOptions};

/// The longest TTL a lock may have unless [`Builder::max_ttl`](crate::Builder::max_ttl) says
/// otherwise, and so how long a node that restarted without persistence
/// counts toward no new grant.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);

/// How long one connection attempt may take, unless
/// [`Builder::connect_timeout`](crate::Builder::connect_timeout) says otherwise.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest connect timeout accepted.
pub(crate) const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(3600);
