//! The crate's in-memory nodes (`redquorum::testing`, feature `testing`),
//! with a bounded wait for the tests.

use std::time::Duration;

pub use redquorum::testing::MemoryNode;

/// Waits on a node's state, failing the test after a bound.
pub trait Until {
    /// Waits (at most `bound`) until `f` holds of this node.
    async fn until(&self, bound: Duration, what: &str, f: impl Fn(&MemoryNode) -> bool);
}

impl Until for MemoryNode {
    async fn until(&self, bound: Duration, what: &str, f: impl Fn(&MemoryNode) -> bool) {
        tokio::time::timeout(bound, self.wait_until(f))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}: {what} not within {bound:?}",
                    redquorum::node::Node::name(self)
                )
            });
    }
}

/// A client over `nodes` with a patient node timeout (1 s: only the test
/// decides when a node answers late).
pub async fn client_over(nodes: &[std::sync::Arc<MemoryNode>]) -> redquorum::Redlock {
    client_with(nodes, redquorum::Redlock::builder()).await
}

/// [`client_over`] from `builder`'s other settings.
pub async fn client_with(
    nodes: &[std::sync::Arc<MemoryNode>],
    builder: redquorum::Builder,
) -> redquorum::Redlock {
    builder
        .custom_nodes(
            nodes
                .iter()
                .map(|n| std::sync::Arc::clone(n) as std::sync::Arc<dyn redquorum::node::Node>),
        )
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("in-memory nodes build")
}

/// Five new in-memory nodes and a client over them ([`client_over`]).
pub async fn five() -> (Vec<std::sync::Arc<MemoryNode>>, redquorum::Redlock) {
    let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
    let client = client_over(&nodes).await;
    (nodes, client)
}
