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
