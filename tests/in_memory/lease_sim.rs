//! Leases on simulated nodes in virtual time: kept for many TTLs while the
//! nodes answer, lost — with the work stopped before the deadline and never
//! completed — when a majority freezes. The same coordinator and keeper as on
//! real nodes (`tests/redis_leases.rs`), but exact and fast.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::memory::MemoryNode;
use redquorum::node::Node;
use redquorum::{LockError, Redlock};
use tokio::time::Instant;

async fn cluster() -> (Vec<Arc<MemoryNode>>, Redlock) {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        .build()
        .await
        .unwrap();
    (nodes, redlock)
}

#[tokio::test(start_paused = true)]
async fn lease_is_kept_for_ten_ttls() {
    let (nodes, redlock) = cluster().await;
    let ttl = Duration::from_secs(3);
    let out = redlock
        .run("job", ttl, |lease| async move {
            for _ in 0..100 {
                tokio::time::sleep(ttl / 10).await;
                assert!(lease.is_valid());
                // Every node holds our token all along.
                for n in &nodes {
                    assert_eq!(n.holder("{job}:lock").as_deref(), Some(lease.token()));
                }
            }
            "done"
        })
        .await;
    assert_eq!(out.unwrap(), "done");
}

#[tokio::test(start_paused = true)]
async fn lease_lost_to_a_frozen_majority_stops_the_work_before_its_deadline() {
    let (nodes, redlock) = cluster().await;
    let ttl = Duration::from_secs(3);
    let completed = Arc::new(AtomicBool::new(false));
    let last_step = Arc::new(std::sync::Mutex::new(None));
    let (done, step) = (completed.clone(), last_step.clone());
    let frozen_at = Instant::now() + Duration::from_secs(5);
    let freezer = {
        let nodes = nodes.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(frozen_at).await;
            for n in &nodes[..3] {
                n.freeze();
            }
        })
    };
    let result = redlock
        .run("job", ttl, |lease| async move {
            for _ in 0..1000 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                *step.lock().unwrap() = Some((Instant::now(), lease.deadline()));
            }
            done.store(true, Ordering::SeqCst);
        })
        .await;
    freezer.await.unwrap();
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    assert!(!completed.load(Ordering::SeqCst));
    let (at, deadline) = last_step.lock().unwrap().expect("work ran");
    assert!(at.into_std() < deadline, "a step ran after the deadline");
    // The last extension came at most a third of the TTL before the freeze,
    // so the work stops within the TTL of it.
    assert!(
        at < frozen_at + ttl,
        "stopped {:?} after the freeze",
        at - frozen_at
    );
}
