//! Fencing counters across node restarts, on the five real nodes: restarted
//! from their AOF they keep tokens increasing; restarted empty they do not
//! (the assumption docs/fencing.md states). Kills and wipes nodes, so the
//! tests take turns.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::Redlock;
use support::*;
use tokio::sync::Mutex;

static CLUSTER: Mutex<()> = Mutex::const_new(());
const TTL: Duration = Duration::from_secs(10);

/// A fresh client that waits for every node's first connection.
async fn client() -> Redlock {
    support::patient().build().await.unwrap()
}

async fn fenced(redlock: &Redlock, resource: &str) -> u64 {
    let lock = redlock
        .lock_with(resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let fence = lock.fence().unwrap();
    lock.release().await.unwrap();
    fence
}

/// Nodes killed and started again from their AOF, one after another, with
/// a client that trusts durable restarts connected all along (it stamps
/// each node's dataset mark): every restart kept its data, so the next
/// client counts every node at once, and tokens keep increasing.
/// The kills block a worker thread, not the client's tasks: a service's
/// runtime goes on while its nodes restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_across_restarts_from_the_aof() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("fence-aof");
    let stamping = client().await;
    let before = fenced(&stamping, &resource).await;
    for node in 1..=5 {
        // SIGKILL, then start with the same data.
        tokio::task::block_in_place(|| drop(Killed::new(node)));
    }
    let fresh = client().await;
    let health = fresh.nodes().probe(Duration::from_secs(2)).await;
    for (n, node) in health.iter().enumerate() {
        assert_eq!(node.quarantined_for, None, "node {}: {node:?}", n + 1);
    }
    let after = fenced(&fresh, &resource).await;
    assert!(after > before, "{after} after {before}");
    drop(stamping);
}

/// Counters drawn everywhere; nodes 1–3 restart empty; another holder sits
/// on nodes 4 and 5, so the next grant comes from the wiped nodes alone
/// (the quarantine off, to reach the counters themselves). A counter is
/// floored at its node's clock in microseconds, so the token still goes
/// up. Before the floor this test asserted the opposite — the token went
/// back (3, then 1) — which is why counters needed durable nodes
/// (docs/fencing.md, "Restarts").
#[tokio::test]
async fn an_empty_restart_of_a_quorum_keeps_token_order() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("fence-wiped");
    let redlock = client().await;
    let mut last = 0;
    for _ in 0..3 {
        last = fenced(&redlock, &resource).await;
    }
    for node in 1..=3 {
        nodes_script(&["wipe-restart", &node.to_string()]);
    }
    let mut conns = raw_all().await;
    for conn in &mut conns[3..] {
        let _: () = conn
            .set_ex(lock_key(&resource), "another-holder", 30)
            .await
            .unwrap();
    }
    let unguarded = support::patient()
        .restart_quarantine(false)
        .build()
        .await
        .unwrap();
    let after = fenced(&unguarded, &resource).await;
    for conn in &mut conns[3..] {
        let _: () = conn.del(lock_key(&resource)).await.unwrap();
    }
    for node in 1..=3 {
        adopt(node);
    }
    assert!(after > last, "the token went back: {after} after {last}");
}
