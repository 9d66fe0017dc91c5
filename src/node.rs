//! One lock node, as the coordinator sees it.
//!
//! The coordinator only ever asks a node to do one of a few atomic operations
//! ([`Op`]) and reads back a [`Reply`]. Real Redis masters implement [`Node`]
//! with Lua scripts over a multiplexed connection; tests implement it with
//! simulated nodes on virtual time, so the very same coordinator code is
//! checked for safety under delays, losses and freezes.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::NodeError;

pub use crate::proto::op::{Op, Reply};

/// The name redquorum gives the Redis node at `url` in logs, errors and
/// [`Votes`](crate::Votes): scheme, address and database, never a password.
/// Two URLs with one name are the same node.
///
/// ```
/// assert_eq!(
///     redquorum::node::node_name("redis://:secret@127.0.0.1:7001/2").unwrap(),
///     "redis://127.0.0.1:7001/2"
/// );
/// assert!(redquorum::node::node_name("http://nope").is_err());
/// ```
pub fn node_name(url: &str) -> Result<String, crate::ConfigError> {
    crate::address::Address::parse(url).map(|a| a.name().to_string())
}

/// One independent lock node (a Redis master, or a simulated one in tests).
///
/// Implementations must make each [`Op`] atomic on the node, must apply the
/// operations of one caller in the order they were issued (the coordinator
/// relies on a release sent after an acquire being applied after it), and
/// must not block. Each call is polled once as soon as it is made, and then
/// driven to its end whether or not the round still waits for it (by the
/// round, or by the client's delivery task for the node); it is dropped
/// only after the client's grace (a few node timeouts).
pub trait Node: Send + Sync + fmt::Debug + 'static {
    /// A name for logs and errors (for Redis: the URL with the password
    /// masked).
    fn name(&self) -> &Arc<str>;

    /// Performs `op` on the node.
    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>>;
}
