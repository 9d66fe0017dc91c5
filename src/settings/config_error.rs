//! Setting a client up: errors at the boundary with the outside world
//! (URLs, TLS, credentials, which servers answer), as `Builder::build`
//! reports them; and every error type, re-exported in one place.

use std::fmt;
use std::time::Duration;

use crate::proto::input::Pow2;
use crate::proto::quorum::MAX_TTL_MS;
use crate::settings::MAX_CONNECT_TIMEOUT;

use crate::proto::input::InputError;

/// A client that could not be set up: a node list, URL, TLS material,
/// credentials or setting that does not work; or, wrapped, a setting the
/// protocol refuses ([`ConfigError::Input`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node URLs were given.
    NoNodes,
    /// The same node appears twice: it would vote twice.
    DuplicateNode(String),
    /// A node URL that does not parse, or is not `redis://`, `unix://`,
    /// `redis+unix://` (or `valkey://`, `valkey+unix://`).
    InvalidUrl {
        /// The URL with its user info, query values and fragment masked
        /// (only the scheme, for one that does not parse at all).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A node refused our credentials (wrong password or user).
    Auth {
        /// The node, with any password masked.
        node: String,
        /// The node's error message.
        message: String,
    },
    /// The node timeout is below 1 ms or above
    /// [`MAX_TTL_MS`](crate::proto::quorum::MAX_TTL_MS).
    InvalidNodeTimeout,
    /// A retry policy with zero attempts, or a delay above
    /// [`MAX_TTL_MS`](crate::proto::quorum::MAX_TTL_MS).
    InvalidRetry,
    /// Two members are the same server (the same `run_id`), so it would
    /// vote twice: `redis://localhost:7001` and `redis://127.0.0.1:7001`.
    SameServer {
        /// The member that connected first.
        first: String,
        /// The member that turned out to be the same server.
        second: String,
    },
    /// TLS could not be set up: a CA bundle or client certificate that does
    /// not parse, or — when every node failed its TLS handshake the same
    /// way — a certificate the client rejects, a server that requires a
    /// client certificate, or TLS spoken to a port that does not speak it.
    Tls(String),
    /// [`Builder::require_quorum`](crate::Builder::require_quorum): fewer
    /// than a quorum of nodes answered at connect.
    TooFewNodes {
        /// Nodes that answered.
        reachable: usize,
        /// Nodes configured.
        nodes: usize,
        /// The quorum.
        quorum: usize,
        /// Each unreachable node and why (passwords masked).
        detail: String,
    },
    /// A per-node bound on calls in flight of zero.
    InvalidMaxInFlight,
    /// A connect timeout ([`Builder::connect_timeout`](crate::Builder::connect_timeout))
    /// below 1 ms or above an hour.
    InvalidConnectTimeout(Duration),
    /// `#insecure` on a `rediss://` URL (certificate verification off)
    /// without [`Builder::danger_accept_invalid_certificates`](crate::Builder::danger_accept_invalid_certificates).
    Insecure {
        /// The URL, redacted.
        url: String,
    },
    /// The user may not run commands the library needs on a node (found at
    /// connect, before any lock is taken): grant them (docs/operations.md
    /// lists them).
    Permission {
        /// The node, with any password masked.
        node: String,
        /// The commands denied, as the node names them (`fcall`, `set`…),
        /// or the node's refusal.
        message: String,
    },
    /// [`Builder::strict`](crate::Builder::strict): a node may evict lock
    /// keys (a memory limit with an evicting `maxmemory-policy`).
    Evicting {
        /// The node, with any password masked.
        node: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
    /// A longest TTL ([`Builder::max_ttl`](crate::Builder::max_ttl)) of
    /// zero, or above [`MAX_TTL_MS`](crate::proto::quorum::MAX_TTL_MS).
    InvalidMaxTtl(Duration),
    /// This client's nodes or `max_ttl` differ from the deployment record
    /// its nodes hold (docs/agreement.md): it would count other nodes, or
    /// grant longer than other clients' restart quarantines cover, than
    /// the clients that recorded it.
    Deployment(crate::proto::deployment::Mismatch),
    /// A setting the protocol refuses (a drift factor, a key prefix).
    Input(InputError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoNodes => write!(f, "no nodes configured"),
            ConfigError::DuplicateNode(a) => write!(f, "node {0} is listed more than once", a),
            ConfigError::InvalidUrl { reason, url, .. } => {
                write!(f, "invalid node URL {url:?}: {reason}")
            }
            ConfigError::Auth { message, node, .. } => {
                write!(f, "node {node} rejected the credentials: {message}")
            }
            ConfigError::InvalidNodeTimeout => {
                write!(
                    f,
                    "node timeout must be between 1 ms and {} ms",
                    Pow2(MAX_TTL_MS)
                )
            }
            ConfigError::InvalidRetry => write!(
                f,
                "retry policy must allow at least one attempt, at most {} ms apart",
                Pow2(MAX_TTL_MS)
            ),
            ConfigError::SameServer { first, second, .. } => {
                write!(f, "nodes {first} and {second} are the same server")
            }
            ConfigError::Tls(a) => write!(f, "TLS: {0}", a),
            ConfigError::TooFewNodes {
                detail,
                nodes,
                quorum,
                reachable,
                ..
            } => write!(
                f,
                "only {reachable} of {nodes} nodes reachable at connect, {quorum} needed: {detail}"
            ),
            ConfigError::InvalidMaxInFlight => write!(f, "max_in_flight must be at least 1"),
            ConfigError::InvalidConnectTimeout(t) => {
                write!(
                    f,
                    "connect timeout {t:?} must be between 1 ms and {MAX_CONNECT_TIMEOUT:?}"
                )
            }
            ConfigError::Insecure { url, .. } => write!(
                f,
                "{url}: #insecure would turn certificate verification off; give the nodes' CA with \
         Builder::tls_ca, or opt in with Builder::danger_accept_invalid_certificates"
            ),
            ConfigError::Permission { node, message } => write!(
                f,
                "node {node} does not let this user run what redquorum needs ({message}): grant \
                 it (ACL SETUSER; docs/operations.md lists the commands)"
            ),
            ConfigError::Evicting { node, policy } => write!(
                f,
                "node {node} may evict lock keys (maxmemory-policy {policy} with a memory \
                 limit), and a lock whose keys are evicted can be granted twice: set \
                 maxmemory-policy noeviction (docs/operations.md, eviction)"
            ),
            ConfigError::InvalidMaxTtl(t) => write!(
                f,
                "the longest TTL {t:?} must be between 1 ms and {} ms",
                Pow2(MAX_TTL_MS)
            ),
            ConfigError::Deployment(mismatch) => write!(
                f,
                "{mismatch}: every client of these nodes must list the same members (in any \
                 spelling) and the same max_ttl; to change them, see docs/agreement.md"
            ),
            ConfigError::Input(e) => write!(f, "{e}"),
        }
    }
}

/// No source: the message already says its cause.
impl std::error::Error for ConfigError {}

impl From<InputError> for ConfigError {
    fn from(e: InputError) -> Self {
        ConfigError::Input(e)
    }
}
