//! One lock node, as the coordinator sees it.
//!
//! The coordinator only ever asks a node to do one of a few atomic operations
//! ([`Op`]) and reads back a [`Reply`]. Real Redis masters implement [`Node`]
//! with Lua scripts over one pipelined connection each; tests implement it with
//! simulated nodes on virtual time, so the very same coordinator code is
//! checked for safety under delays, losses and freezes.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::proto::error::NodeError;

pub use crate::proto::op::{
    KEPT, MAX_LABEL, MAX_LINE, Op, Period, READERS_TURN, Reply, Snapshot, Stored, Waiter,
};

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
pub fn node_name(url: &str) -> Result<String, crate::settings::config_error::ConfigError> {
    crate::transport::address::Address::parse(url).map(|a| a.name().to_string())
}

/// The Lua source redquorum sends (by `EVAL`, where its function library
/// cannot be loaded) to release a plain or fenced lock: `KEYS[1]` the lock
/// key, `ARGV[1]` the token; it answers `1` when it deleted the key, `0`
/// when the key is not that token's. The exact text the library sends, for
/// tools and benchmarks that release a lock by hand.
///
/// ```
/// let script = redquorum::node::release_script();
/// assert!(script.contains("redis.call('DEL', KEYS[1])"));
/// assert!(!script.lines().any(|l| l.trim_start().starts_with("--")));
/// ```
pub fn release_script() -> &'static str {
    crate::transport::scripts::release_source()
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
///
/// **Why every [`Op`], and not a smaller trait.** Each operation is one
/// atomic step of the protocol on one node (take a lock key, extend it,
/// release it, join a line, add a reader, take a permit's slot…); the
/// safety argument of every lock kind rests on each being atomic where it
/// runs. A smaller trait (a get and a compare-and-set, say) would move that
/// atomicity into the client, where a node between two calls breaks it. So
/// a custom node implements the vocabulary whole: match the operations it
/// serves and answer [`NodeError::Server`] for the rest (those lock kinds then
/// fail on it with a typed error, never unsafely). The in-memory reference,
/// whose answers are checked against Redis's (`tests/redis_model`), is
/// [`MemoryNode`](crate::testing::MemoryNode) (feature `testing`): wrap it
/// to add faults or a transport.
pub trait Node: Send + Sync + fmt::Debug + 'static {
    /// A name for logs and errors (for Redis: the URL with the password
    /// masked).
    fn name(&self) -> &Arc<str>;

    /// Performs `op` on the node.
    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>>;

    /// Opens a connection on which the node reports releases, so that
    /// waiters ([`LockOptions::wait`](crate::LockOptions::wait)) wake
    /// when a lock is released instead of after a polling pause. `None`
    /// (the default): the node reports nothing; waiters poll unless a
    /// quorum of the other nodes listen.
    ///
    /// A node that listens must, whenever an operation deletes a lock key
    /// (a [`Release`](Op::Release), the
    /// [`ReleaseReentrant`](Op::ReleaseReentrant) of the last hold, a
    /// [`ReleaseWrite`](Op::ReleaseWrite) that deleted the writer key or its
    /// intent) or a reader ([`ReleaseRead`](Op::ReleaseRead)), report a
    /// [`Notice`] on the channel of the key (for read/write locks, the
    /// writer key) to every listener subscribed to it.
    /// Notices are hints: a lost one costs a waiter a pause, never safety.
    ///
    /// The client opens at most one listener per node, reopens it (with a
    /// backoff) when [`Listener::next`] says the connection is gone, and
    /// gives up on an attempt after one second.
    fn listen(&self) -> Option<BoxFuture<'static, Result<Box<dyn Listener>, NodeError>>> {
        None
    }

    /// Whether the node may have forgotten keys it held less than the
    /// longest TTL ago (it restarted without persisting its writes): its
    /// yes then counts toward no new grant, though it still gets every
    /// call (`docs/operations.md` §8). Asked as each call is made.
    /// Default: `false` (the node keeps what it is told).
    fn quarantined(&self) -> bool {
        false
    }
}

/// A release a node reported: the waiters on `channel` may try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The channel: the key of the released lock ([`Op::Release`]'s `key`).
    pub channel: String,
    /// What identifies the release on every node that reports it: the
    /// released token (for a reentrant hold, the hold's token). A waiter
    /// wakes once a quorum of nodes have each reported a release on its
    /// channel since its last attempt.
    pub nonce: Vec<u8>,
}

/// One connection on which a node reports releases ([`Node::listen`]); for
/// Redis, a pub/sub connection.
///
/// The client calls [`subscribe`](Self::subscribe) and
/// [`unsubscribe`](Self::unsubscribe) one at a time, while a
/// [`next`](Self::next) may be pending; each names at most 1024 channels.
/// Dropping a pending future must lose nothing that a later call would
/// return.
pub trait Listener: Send + Sync + 'static {
    /// Starts reporting releases on `channels`; resolves once the node has
    /// confirmed (a release applied after that is reported).
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>>;

    /// Stops reporting releases on `channels`; resolves once the node has
    /// confirmed.
    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>>;

    /// The next release reported; `None` once the connection is gone (the
    /// client then opens a new one).
    fn next(&self) -> BoxFuture<'_, Option<Notice>>;
}
