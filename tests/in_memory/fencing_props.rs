//! Property: fencing tokens strictly increase across successive holders,
//! whatever the starting counters, whichever nodes are frozen during each
//! grant (so the grant sets S and write-back sets W vary), and however the
//! frozen nodes' queued operations interleave with later grants. Runs the
//! real coordinator on in-memory nodes on virtual time.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::MemoryNode;
use proptest::prelude::*;
use redquorum::Redlock;
use redquorum::node::Node;

/// One holder: which nodes are frozen while it locks, and whether the
/// frozen nodes thaw before the next holder (else they stay frozen into it).
#[derive(Debug, Clone)]
struct Grant {
    frozen: Vec<usize>,
    thaw_after: bool,
}

fn grant() -> impl Strategy<Value = Grant> {
    (
        proptest::sample::subsequence((0..5).collect::<Vec<_>>(), 0..=2),
        any::<bool>(),
    )
        .prop_map(|(frozen, thaw_after)| Grant { frozen, thaw_after })
}

fn run(counters: [u64; 5], grants: Vec<Grant>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
        for (node, c) in nodes.iter().zip(counters) {
            node.set_counter("{r}:fence", c);
        }
        let redlock = Redlock::builder()
            .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
            .node_timeout(Duration::from_millis(20))
            .retry(redquorum::Retry::new(10, Duration::from_millis(5)))
            .build()
            .await
            .unwrap();
        let mut last = 0;
        let mut frozen_now: Vec<usize> = Vec::new();
        for g in &grants {
            // At most two nodes frozen at once (a quorum stays reachable):
            // thaw earlier ones as needed, which lets their queued
            // operations land in the middle of this grant.
            for n in &g.frozen {
                if !frozen_now.contains(n) {
                    frozen_now.push(*n);
                }
                nodes[*n].freeze();
            }
            while frozen_now.len() > 2 {
                let i = frozen_now
                    .iter()
                    .position(|n| !g.frozen.contains(n))
                    .unwrap();
                nodes[frozen_now.remove(i)].thaw();
            }
            let lock = redlock
                .lock_with(
                    "r",
                    Duration::from_secs(10),
                    &redquorum::LockOptions::new().fenced(),
                )
                .await;
            let lock = lock.map_err(|e| TestCaseError::fail(format!("no grant: {e}")))?;
            let t = lock.fence().unwrap();
            prop_assert!(t > last, "token {} after {} (grants {:?})", t, last, grants);
            last = t;
            lock.release().await.unwrap_or(());
            if g.thaw_after {
                for n in frozen_now.drain(..) {
                    nodes[n].thaw();
                }
            }
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn fencing_tokens_strictly_increase(
        counters in proptest::array::uniform5(0u64..50),
        grants in proptest::collection::vec(grant(), 1..8),
    ) {
        run(counters, grants)?;
    }
}
