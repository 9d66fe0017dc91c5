//! Cancelling an operation never leaves a key behind, and the public futures
//! are `Send`. Runs on in-memory nodes whose answers the test holds back at
//! will (see `support/memory.rs`); the same coordinator code runs against
//! Redis in the other suites.

mod support;

use std::sync::Arc;
use std::time::Duration;

use redquorum::node::Node;
use redquorum::{Lock, Redlock};
use support::memory::MemoryNode;

const BOUND: Duration = Duration::from_secs(5);
const KEY: &str = "{job}:lock";

async fn cluster() -> (Vec<Arc<MemoryNode>>, Redlock) {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        // Long enough that only the test decides when a round ends.
        .node_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    (nodes, redlock)
}

#[tokio::test]
async fn dropping_lock_mid_round_releases_what_it_set() {
    let (nodes, redlock) = cluster().await;
    for n in &nodes[2..] {
        n.close(); // three nodes hold their answers: the round stays open
    }
    let lock = redlock.lock("job", Duration::from_secs(60));
    tokio::select! {
        r = lock => panic!("round decided with three nodes silent: {r:?}"),
        _ = async {
            nodes[0].until(BOUND, "key set", |n| n.holder(KEY).is_some()).await;
            nodes[1].until(BOUND, "key set", |n| n.holder(KEY).is_some()).await;
        } => {}
    }
    // The lock future is dropped: its keys must go, on the answering nodes
    // now and on the silent ones once they apply the queued acquire.
    for n in &nodes[..2] {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
    for n in &nodes[2..] {
        n.open();
    }
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
    // And the resource is free.
    let lock = redlock
        .try_lock("job", Duration::from_secs(60))
        .await
        .unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn dropping_release_mid_round_still_releases() {
    let (nodes, redlock) = cluster().await;
    let lock = redlock.lock("job", Duration::from_secs(60)).await.unwrap();
    let token = lock.token().to_owned();
    for n in &nodes {
        n.until(BOUND, "key set", |n| {
            n.holder(KEY).as_deref() == Some(&token)
        })
        .await;
        n.close();
    }
    let release = lock.release();
    tokio::select! {
        r = release => panic!("release confirmed by closed nodes: {r:?}"),
        _ = tokio::task::yield_now() => {}
    }
    for n in &nodes {
        n.open();
    }
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
}

#[tokio::test]
async fn dropping_a_lock_releases_it() {
    let (nodes, redlock) = cluster().await;
    let lock = redlock.lock("job", Duration::from_secs(60)).await.unwrap();
    drop(lock);
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
}

/// Every public future can move between threads.
#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let redlock: Option<Redlock> = None;
    if let Some(r) = redlock {
        send(&r.lock("r", Duration::from_secs(1)));
        send(&r.try_lock("r", Duration::from_secs(1)));
        send(&r.lock_wait("r", Duration::from_secs(1), Duration::from_secs(1)));
        send(&Redlock::connect(["redis://127.0.0.1:7001"]));
        send(&Redlock::builder().build());
    }
    let lock: Option<Lock> = None;
    if let Some(mut l) = lock {
        send(&l.extend(Duration::from_secs(1)));
        send(&l.release());
    }
    fn sync<T: Send + Sync>() {}
    sync::<Redlock>();
    sync::<Lock>();
    sync::<redquorum::LockError>();
}
