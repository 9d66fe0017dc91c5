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
    let nodes = nodes
        .iter()
        .map(|n| std::sync::Arc::clone(n) as std::sync::Arc<dyn redquorum::node::Node>);
    client_of(nodes, builder).await
}

/// A client over `nodes` of any kind, with [`client_over`]'s settings.
async fn client_of(
    nodes: impl IntoIterator<Item = std::sync::Arc<dyn redquorum::node::Node>>,
    builder: redquorum::Builder,
) -> redquorum::Redlock {
    builder
        .custom_nodes(nodes)
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

/// An in-memory node behind a link that fails, while it is on
/// ([`fail`](Self::fail)), every call `fails` picks, with `error`: never
/// applied, never sent again. Every other call goes through. A node that
/// misses some rounds of a waiting writer (its acquires lost as on a
/// connection that is down), or one whose releases are refused for good.
pub struct FailingLink {
    inner: std::sync::Arc<MemoryNode>,
    fails: fn(&redquorum::node::Op<'_>) -> bool,
    error: fn() -> redquorum::NodeError,
    on: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for FailingLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailingLink")
            .field("inner", &self.inner)
            .finish()
    }
}

impl FailingLink {
    /// A link to `inner`, failing nothing yet.
    pub fn new(
        inner: std::sync::Arc<MemoryNode>,
        fails: fn(&redquorum::node::Op<'_>) -> bool,
        error: fn() -> redquorum::NodeError,
    ) -> std::sync::Arc<Self> {
        std::sync::Arc::new(FailingLink {
            inner,
            fails,
            error,
            on: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Fails the calls it picks from now on (`true`), or no longer.
    pub fn fail(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl redquorum::node::Node for FailingLink {
    fn name(&self) -> &std::sync::Arc<str> {
        redquorum::node::Node::name(&*self.inner)
    }

    fn call<'a>(
        &'a self,
        op: redquorum::node::Op<'a>,
    ) -> futures::future::BoxFuture<'a, Result<redquorum::node::Reply, redquorum::NodeError>> {
        if self.on.load(std::sync::atomic::Ordering::SeqCst) && (self.fails)(&op) {
            return Box::pin(std::future::ready(Err((self.error)())));
        }
        self.inner.call(op)
    }

    fn quarantined(&self) -> bool {
        redquorum::node::Node::quarantined(&*self.inner)
    }
}

/// Five in-memory nodes behind [`FailingLink`]s (`fails`, `error`), and a
/// client over the links ([`client_over`]'s settings).
pub async fn five_failing(
    fails: fn(&redquorum::node::Op<'_>) -> bool,
    error: fn() -> redquorum::NodeError,
) -> (
    Vec<std::sync::Arc<MemoryNode>>,
    Vec<std::sync::Arc<FailingLink>>,
    redquorum::Redlock,
) {
    let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
    let links: Vec<_> = nodes
        .iter()
        .map(|n| FailingLink::new(std::sync::Arc::clone(n), fails, error))
        .collect();
    let over = links
        .iter()
        .map(|l| std::sync::Arc::clone(l) as std::sync::Arc<dyn redquorum::node::Node>);
    let client = client_of(over, redquorum::Redlock::builder()).await;
    (nodes, links, client)
}
