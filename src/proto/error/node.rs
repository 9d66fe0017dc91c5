//! Why one node did not do what was asked: [`NodeError`], as a node's
//! error reply or the client's own refusal means it, and what to do about
//! each.
//!
//! # Classification of node errors
//!
//! `NodeError::from_reply` reads an error reply by its code: `NOAUTH` and `WRONGPASS`
//! (or a text naming an invalid password) are `Auth`, `NOPERM` `NoPermission`, `OOM`
//! `OutOfMemory`, `LOADING` `Loading`, `READONLY` `ReadOnly`, a text with `max number of
//! clients reached` `MaxClients`; any other error reply (a script error, …) is `Server`
//! — a `MOVED` or `ASK` from a node not named as a cluster member is `Server` with a hint
//! to name it `redis+cluster://`. A link that is down for want of permission or
//! credentials refuses calls with that error (`NoPermission`, `Auth`), not
//! `NotConnected`: it is no outage. A transport error is `Connection`,
//! or `Tls` when it is a TLS failure. A reply that breaks the protocol (or its bounds), or
//! that no call waits for, is `Protocol` and drops the connection; a well-formed reply of
//! unexpected shape is `Protocol` for that call only. Each round is traced as a
//! `redquorum.round` debug span that records each node's answer and latency.

use std::fmt;
use std::sync::Arc;

/// Why one node did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeError {
    /// No connection to the node right now (it is being re-established in the
    /// background, off the timed path).
    NotConnected(Arc<str>),
    /// The node did not answer within the per-node timeout.
    TimedOut,
    /// The node answered with an error this library has no name for (its
    /// text as the node gave it).
    Server(Arc<str>),
    /// The node rejected our credentials (`NOAUTH`, `WRONGPASS`).
    Auth(Arc<str>),
    /// The user may not run a command the library needs (`NOPERM`): grant
    /// it (`ACL SETUSER`; docs/operations.md lists the commands).
    NoPermission(Arc<str>),
    /// The node is out of memory (`OOM`: `maxmemory` reached under
    /// `noeviction`): new locks are refused there until memory is freed.
    OutOfMemory(Arc<str>),
    /// The node refused the connection: it has `maxclients` connections
    /// already.
    MaxClients(Arc<str>),
    /// The node is loading its dataset after a start (`LOADING`): it
    /// answers once it has.
    Loading(Arc<str>),
    /// The node is a replica (`READONLY`): a lock node must be a master,
    /// and independent of the others.
    ReadOnly(Arc<str>),
    /// The connection failed while the request was in flight.
    Connection(Arc<str>),
    /// The node answered something this library did not expect.
    Protocol(Arc<str>),
    /// The TLS handshake failed: a certificate the client rejects, a server
    /// that requires a client certificate, or TLS spoken to a plain port.
    Tls(Arc<str>),
    /// This many calls to the node were already queued or awaiting an answer
    /// (the per-node bound, [`Builder::max_in_flight`](crate::Builder::max_in_flight)):
    /// the call was refused without being sent, so it changed nothing.
    Overloaded(usize),
    /// The node is healthy, but this client already had this many calls in
    /// flight to it ([`Builder::max_in_flight`](crate::Builder::max_in_flight))
    /// and no room came within the round's budget: the client, not the
    /// node, is saturated. The call was not sent.
    Saturated(usize),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::NotConnected(a) => write!(f, "not connected ({0})", a),
            NodeError::TimedOut => write!(f, "timed out"),
            NodeError::Server(a) => write!(f, "node error: {0}", a),
            NodeError::Auth(a) => write!(f, "credentials refused: {0}", a),
            NodeError::NoPermission(a) => write!(f, "not permitted: {0}", a),
            NodeError::OutOfMemory(a) => write!(f, "out of memory: {0}", a),
            NodeError::MaxClients(a) => write!(f, "connection refused: {0}", a),
            NodeError::Loading(a) => write!(f, "loading its dataset: {0}", a),
            NodeError::ReadOnly(a) => write!(f, "a replica, not a master: {0}", a),
            NodeError::Connection(a) => write!(f, "connection error: {0}", a),
            NodeError::Protocol(a) => write!(f, "unexpected reply: {0}", a),
            NodeError::Tls(a) => write!(f, "TLS: {0}", a),
            NodeError::Overloaded(a) => write!(f, "overloaded: {0} calls already in flight", a),
            NodeError::Saturated(a) => write!(
                f,
                "not sent: this client already had {0} calls in flight to this healthy node",
                a
            ),
        }
    }
}

impl std::error::Error for NodeError {}

impl NodeError {
    /// An error reply (`-NOPERM …`, `-OOM …`) as the error it means; the
    /// text is kept as the node gave it.
    ///
    /// ```
    /// use redquorum::NodeError;
    /// assert!(matches!(NodeError::from_reply("OOM command not allowed"), NodeError::OutOfMemory(_)));
    /// assert!(matches!(NodeError::from_reply("WRONGPASS invalid username-password pair"), NodeError::Auth(_)));
    /// assert!(matches!(NodeError::from_reply("ERR max number of clients reached"), NodeError::MaxClients(_)));
    /// assert!(matches!(NodeError::from_reply("ERR unknown command"), NodeError::Server(_)));
    /// ```
    pub fn from_reply(text: &str) -> NodeError {
        let code = text.split(' ').next().unwrap_or_default();
        let text: Arc<str> = text.into();
        match code {
            "NOAUTH" | "WRONGPASS" => NodeError::Auth(text),
            "NOPERM" => NodeError::NoPermission(text),
            "OOM" => NodeError::OutOfMemory(text),
            "LOADING" => NodeError::Loading(text),
            "READONLY" => NodeError::ReadOnly(text),
            _ if text.contains("max number of clients reached") => NodeError::MaxClients(text),
            _ if text.contains("invalid password") => NodeError::Auth(text),
            _ => NodeError::Server(text),
        }
    }

    /// What to do about it, where something can be done: a sentence for
    /// an error's message.
    pub(crate) fn advice(&self) -> Option<&'static str> {
        Some(match self {
            NodeError::TimedOut => {
                "raise the node timeout (Builder::node_timeout) if the nodes are far or loaded"
            }
            NodeError::NotConnected(_) | NodeError::Connection(_) => {
                "check that the nodes are up (Redlock::probe, `redquorum nodes`)"
            }
            NodeError::Auth(_) => "check the user and password in the node URLs",
            NodeError::NoPermission(_) => {
                "grant the user the commands docs/operations.md lists (ACL SETUSER)"
            }
            NodeError::OutOfMemory(_) => {
                "free memory on the node or raise its maxmemory (locks need a few hundred bytes each)"
            }
            NodeError::MaxClients(_) => "raise the node's maxclients, or close idle connections",
            NodeError::Loading(_) => "wait for the node to load its dataset",
            NodeError::ReadOnly(_) => {
                "list masters only: this node is a replica (a lock node must be an independent master)"
            }
            NodeError::Tls(_) => "check the TLS settings (CA, client certificate, rediss://)",
            NodeError::Overloaded(_) => {
                "check the node: its calls are not answered (Redlock::probe, `redquorum nodes`)"
            }
            NodeError::Saturated(_) => "raise Builder::max_in_flight, or make fewer calls at once",
            NodeError::Server(_) | NodeError::Protocol(_) => return None,
        })
    }
}
