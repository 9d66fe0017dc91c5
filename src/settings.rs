//! Settings: plain data that every layer above the protocol reads and the
//! client's users set. One call's options ([`options`]), the client's
//! defaults and bounds — every default is here, the node timeout's
//! re-exported from the protocol, whose pure rounds compute with it — and
//! the error a setting that breaks them gets ([`config_error`]). The retry
//! policy is pure and lives in `crate::proto::retry`.

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

/// The bound on calls in flight per node, unless
/// [`Builder::max_in_flight`](crate::Builder::max_in_flight) says otherwise.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// How long a round waits for each node, unless
/// [`Builder::node_timeout`](crate::Builder::node_timeout) says otherwise
/// (at most a twentieth of the lock's TTL).
pub(crate) use crate::proto::quorum::DEFAULT_NODE_TIMEOUT;
