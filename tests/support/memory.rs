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

/// An in-memory node whose link loses a writer's acquires while
/// [`lose_write_acquires`](Self::lose_write_acquires) is on: they fail as
/// on a connection that is down, and are never applied (every other call
/// goes through). A node that misses some rounds of a waiting writer.
#[derive(Debug)]
pub struct LosesWriteAcquires {
    inner: std::sync::Arc<MemoryNode>,
    lose: std::sync::atomic::AtomicBool,
}

impl LosesWriteAcquires {
    /// A link to `inner`, losing nothing yet.
    pub fn new(inner: std::sync::Arc<MemoryNode>) -> std::sync::Arc<Self> {
        std::sync::Arc::new(LosesWriteAcquires {
            inner,
            lose: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Loses a writer's acquires from now on (`true`), or no longer.
    pub fn lose_write_acquires(&self, on: bool) {
        self.lose.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl redquorum::node::Node for LosesWriteAcquires {
    fn name(&self) -> &std::sync::Arc<str> {
        redquorum::node::Node::name(&*self.inner)
    }

    fn call<'a>(
        &'a self,
        op: redquorum::node::Op<'a>,
    ) -> futures::future::BoxFuture<'a, Result<redquorum::node::Reply, redquorum::NodeError>> {
        let lost = matches!(op, redquorum::node::Op::AcquireWrite { .. })
            && self.lose.load(std::sync::atomic::Ordering::SeqCst);
        if lost {
            let err = redquorum::NodeError::NotConnected("link down (test)".into());
            return Box::pin(std::future::ready(Err(err)));
        }
        self.inner.call(op)
    }
}

/// An in-memory node whose releases fail for good (`NOPERM`, as for a user
/// not allowed the release script) while
/// [`refuse_releases`](Self::refuse_releases) is on: never applied, never
/// sent again. Every other call goes through.
#[derive(Debug)]
pub struct RefusesReleases {
    inner: std::sync::Arc<MemoryNode>,
    refuse: std::sync::atomic::AtomicBool,
}

impl RefusesReleases {
    /// A link to `inner`, refusing nothing yet.
    pub fn new(inner: std::sync::Arc<MemoryNode>) -> std::sync::Arc<Self> {
        std::sync::Arc::new(RefusesReleases {
            inner,
            refuse: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Refuses releases from now on (`true`), or no longer.
    pub fn refuse_releases(&self, on: bool) {
        self.refuse.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl redquorum::node::Node for RefusesReleases {
    fn name(&self) -> &std::sync::Arc<str> {
        redquorum::node::Node::name(&*self.inner)
    }

    fn call<'a>(
        &'a self,
        op: redquorum::node::Op<'a>,
    ) -> futures::future::BoxFuture<'a, Result<redquorum::node::Reply, redquorum::NodeError>> {
        let refused = matches!(op, redquorum::node::Op::Release { .. })
            && self.refuse.load(std::sync::atomic::Ordering::SeqCst);
        if refused {
            let err = redquorum::NodeError::NoPermission("NOPERM (test)".into());
            return Box::pin(std::future::ready(Err(err)));
        }
        self.inner.call(op)
    }
}
