//! The client's nodes as it sees them ([`Redlock::nodes`]): their names,
//! the quorum, the calls in flight and which are degraded right now (from
//! memory, no call), the deployment record agreed with them, and a probe on
//! demand ([`Nodes::probe`]: every node pinged at once, outside any lock
//! round, on the node's current connection; nothing changes on the nodes).

use std::time::Duration;

use tokio::time::Instant;

use crate::api::redlock::Redlock;
use crate::engine::dispatch::Member;
use crate::proto::error::NodeError;
use crate::transport::link::Standing;

/// One node's health, as [`Nodes::probe`] saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHealth {
    /// The node's name (any password masked).
    pub node: String,
    /// The round trip of a `PING`, or why there was none (not connected,
    /// no answer within the probe's timeout, an error).
    pub reachable: Result<Duration, NodeError>,
    /// The server and its version, as its last connection reported them
    /// (`redis 7.0.15`, `valkey 8.1.8`); `None` for nodes of your own, or
    /// where `INFO` is not allowed.
    pub server: Option<String>,
    /// Calls to the node queued or awaiting an answer now.
    pub in_flight: usize,
    /// How much longer the node's yes counts toward no new grant: it
    /// restarted without persistence (or lost its data) less than the
    /// longest TTL ago ([`Builder::restart_quarantine`](crate::Builder::restart_quarantine)).
    pub quarantined_for: Option<Duration>,
    /// Whether the node persists every write (`appendonly yes`,
    /// `appendfsync always`), as its last connection read; `None`: unknown.
    pub durable: Option<bool>,
    /// The node's `maxmemory-policy` where it may evict lock keys (a memory
    /// limit with an evicting policy): an evicted key can be granted twice.
    pub evicting: Option<String>,
    /// The node is a replica: a lock node must be an independent master.
    pub replica: bool,
    /// The member the deployment record knows this node as (its id;
    /// docs/agreement.md); `None` before the record is agreed, and for
    /// clusters and nodes of your own.
    pub member: Option<String>,
    /// Why the node's yes counts toward no grant under the deployment
    /// record: it is no member (a new server, another deployment's), or
    /// no record is agreed yet (too few nodes answered).
    pub excluded: Option<String>,
}

impl NodeHealth {
    /// Whether the node answered.
    pub fn is_reachable(&self) -> bool {
        self.reachable.is_ok()
    }
}

/// The client's nodes, as [`Redlock::nodes`] gives them: a view, cheap to
/// take, that reads the client's own state (no call is made but by
/// [`probe`](Self::probe)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let redlock = redquorum::testing::redlock(5).await;
/// let nodes = redlock.nodes();
/// assert_eq!((nodes.len(), nodes.quorum()), (5, 3));
/// for node in nodes.iter() {
///     println!("{}: {} calls in flight", node.name(), node.in_flight());
/// }
/// assert_eq!(nodes.iter().filter(|n| n.is_degraded()).count(), 0);
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct Nodes<'a> {
    redlock: &'a Redlock,
}

impl std::fmt::Debug for Nodes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One node as the client sees it now ([`Nodes::iter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStatus<'a> {
    name: &'a str,
    in_flight: usize,
    degraded: bool,
}

impl<'a> NodeStatus<'a> {
    /// The node's name (any password masked).
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The calls queued or awaiting an answer right now. Never above
    /// [`Builder::max_in_flight`](crate::Builder::max_in_flight); a node
    /// near the bound is slow or frozen.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the node is degraded: its last calls (at least two in a
    /// row) timed out, found no connection, hit the in-flight bound or got
    /// an error reply. It stops being so at its next answer. The client
    /// logs one `WARN` when a node becomes degraded and one `INFO` when it
    /// recovers (see `docs/operations.md`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// // Nothing listens on those ports: two refused rounds make every node degraded.
    /// for _ in 0..2 {
    ///     let _ = redlock.try_lock("job", std::time::Duration::from_secs(1)).await;
    /// }
    /// assert!(redlock.nodes().iter().all(|node| node.is_degraded()));
    /// # }
    /// ```
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }
}

impl<'a> Nodes<'a> {
    pub(crate) fn new(redlock: &'a Redlock) -> Self {
        Nodes { redlock }
    }

    /// How many nodes the client was given.
    pub fn len(&self) -> usize {
        self.redlock.driver().nodes().len()
    }

    /// Never true: a client has at least one node. For symmetry with
    /// [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many nodes must agree: `N / 2 + 1` of the configured `N`.
    pub fn quorum(&self) -> usize {
        self.redlock.driver().quorum()
    }

    /// Each node, in configured order.
    pub fn iter(&self) -> impl Iterator<Item = NodeStatus<'a>> + 'a {
        self.redlock.driver().nodes().iter().map(|node| NodeStatus {
            name: node.name(),
            in_flight: node.in_flight(),
            degraded: node.degraded(),
        })
    }

    /// Pings every node at once, waiting at most `timeout` for each, and
    /// reports each one's reachability, latency and server version, in the
    /// configured order. Nodes of your own ([`Builder::custom_nodes`](crate::Builder::custom_nodes))
    /// report reachable with a zero latency: they have no `PING`. A Redis
    /// node whose connection is down is tried again at once, not after its
    /// reconnect backoff; if an attempt begun before the probe fails, the
    /// probe's `PING` waits for one more, made at once.
    ///
    /// # Cancel safety
    ///
    /// It only pings: dropping this future changes nothing on the nodes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:1"]) // nothing listens here
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// let nodes = redlock.nodes();
    /// let health = nodes.probe(Duration::from_millis(100)).await;
    /// assert!(!health[0].is_reachable());
    /// let up = health.iter().filter(|h| h.is_reachable()).count();
    /// println!("{up} of {} nodes reachable (quorum {})", nodes.len(), nodes.quorum());
    /// # }
    /// ```
    pub async fn probe(&self, timeout: Duration) -> Vec<NodeHealth> {
        let agreed = self.agreement().map(|a| a.standing());
        let agreed = &agreed;
        let probes = self.redlock.driver().members().enumerate().map(
            |(place, (member, in_flight))| async move {
                let (reachable, server, standing) = match member {
                    Member::Redis(node) => (
                        timed(node.ping(), timeout).await,
                        node.server(),
                        node.standing(),
                    ),
                    Member::Cluster(node) => (
                        timed(node.ping(), timeout).await,
                        node.server(),
                        node.standing(),
                    ),
                    Member::Custom(_) => (Ok(Duration::ZERO), None, Standing::default()),
                };
                NodeHealth {
                    node: member.name().to_string(),
                    reachable,
                    server: server.map(|s| s.to_string()),
                    in_flight,
                    quarantined_for: standing.quarantined_for(Instant::now()),
                    durable: standing.durable,
                    evicting: standing.evicting.map(|p| p.to_string()),
                    replica: standing.replica,
                    member: agreed.as_ref().and_then(|a| a.ids.get(place)?.clone()),
                    excluded: agreed.as_ref().and_then(|a| a.excluded.get(place)?.clone()),
                }
            },
        );
        futures::future::join_all(probes).await
    }

    /// The deployment record this client agreed with its nodes: the
    /// members (by the ids the nodes hold) and `max_ttl`
    /// (docs/agreement.md); `None` before it is agreed, and for clients of
    /// clusters or nodes of your own, or with
    /// [`Builder::deployment_record(false)`](crate::Builder::deployment_record).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let nodes = (0..3).map(|i| redquorum::testing::MemoryNode::new(i) as _);
    /// let redlock = redquorum::Redlock::builder().custom_nodes(nodes).build().await.unwrap();
    /// assert!(redlock.nodes().deployment().is_none()); // custom nodes keep no record
    /// # }
    /// ```
    pub fn deployment(&self) -> Option<crate::proto::deployment::Record> {
        self.agreement()?.standing().record
    }

    fn agreement(&self) -> Option<&'a crate::transport::agreement::Agreement> {
        self.redlock
            .driver()
            .members()
            .find_map(|(member, _)| match member {
                Member::Redis(node) => node.link().agreement().map(|(a, _)| &**a),
                _ => None,
            })
    }
}

/// How long `ping` took, if it answered within `timeout`.
async fn timed(
    ping: impl Future<Output = Result<(), NodeError>>,
    timeout: Duration,
) -> Result<Duration, NodeError> {
    let start = Instant::now();
    tokio::time::timeout(timeout, ping)
        .await
        .unwrap_or(Err(NodeError::TimedOut))
        .map(|()| start.elapsed())
}
