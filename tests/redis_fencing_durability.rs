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
    let lock = redlock.lock_fenced(resource, TTL).await.unwrap();
    let fence = lock.fence().unwrap();
    lock.release().await.unwrap();
    fence
}

#[tokio::test]
async fn tokens_keep_increasing_across_restarts_from_the_aof() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("fence-aof");
    let before = fenced(&client().await, &resource).await;
    for node in 1..=5 {
        drop(Killed::new(node)); // SIGKILL, then start with the same data
    }
    let after = fenced(&client().await, &resource).await;
    assert!(after > before, "{after} after {before}");
}

/// Counters 3 everywhere; nodes 1–3 restart empty; another holder sits on
/// nodes 4 and 5, so the next grant comes from the wiped nodes alone and its
/// token goes backwards. This is why counters must be durable.
#[tokio::test]
async fn an_empty_restart_of_a_quorum_breaks_token_order() {
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
    let after = fenced(&client().await, &resource).await;
    for conn in &mut conns[3..] {
        let _: () = conn.del(lock_key(&resource)).await.unwrap();
    }
    assert!(
        after <= last,
        "expected the token to go backwards: {after} after {last}"
    );
}
