//! Readiness: what each node looks like right now, on demand.
//!
//! [`Redlock::probe`] pings every node at once (outside any lock round, on
//! the node's current connection) and reports whether it answered, how fast,
//! and which server it is. It changes nothing on the nodes.

use std::time::Duration;

use tokio::time::Instant;

use crate::api::redlock::Redlock;
use crate::engine::dispatch::Member;
use crate::proto::error::NodeError;
use crate::transport::link::Standing;

/// One node's health, as [`Redlock::probe`] saw it.
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

impl Redlock {
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
    /// let health = redlock.probe(Duration::from_millis(100)).await;
    /// assert!(!health[0].is_reachable());
    /// let up = health.iter().filter(|h| h.is_reachable()).count();
    /// println!("{up} of {} nodes reachable (quorum {})", health.len(), redlock.quorum());
    /// # }
    /// ```
    pub async fn probe(&self, timeout: Duration) -> Vec<NodeHealth> {
        let agreed = self.agreement().map(|a| a.standing());
        let agreed = &agreed;
        let probes =
            self.driver()
                .members()
                .enumerate()
                .map(|(place, (member, in_flight))| async move {
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
                });
        futures::future::join_all(probes).await
    }
}

impl Redlock {
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
    /// assert!(redlock.deployment().is_none()); // custom nodes keep no record
    /// # }
    /// ```
    pub fn deployment(&self) -> Option<crate::proto::deployment::Record> {
        self.agreement()?.standing().record
    }

    fn agreement(&self) -> Option<&crate::transport::agreement::Agreement> {
        self.driver()
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
