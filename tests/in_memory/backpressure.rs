//! The client's own bound on calls in flight is back-pressure, not a node
//! failure: a round over the bound of a healthy node waits for room (within
//! its budget), so every lock reaches every node and no caller is told the
//! nodes are unavailable. In-memory nodes; on real ones:
//! tests/redis_backpressure.rs.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, client_with};
use redquorum::node::Node;
use redquorum::{LockError, Redlock};

const TTL: Duration = Duration::from_secs(30);

/// Before: with 8 calls in flight allowed per node and 200 locks taken at
/// once, rounds were refused `Overloaded` by the client itself — locks on
/// 3 or 4 of 5 nodes, or `Unavailable`. Now every lock is on all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_reaches_every_node_past_the_in_flight_bound() {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = client_with(&nodes, Redlock::builder().max_in_flight(8)).await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let redlock = redlock.clone();
        tasks.push(tokio::spawn(async move {
            redlock.try_lock(&format!("bp:{i}"), TTL).await
        }));
    }
    let mut locks = Vec::new();
    for task in tasks {
        locks.push(task.await.unwrap().expect("healthy nodes grant every lock"));
    }
    crate::support::settled(&redlock).await; // every call made has ended
    for lock in &locks {
        let key = format!("{{{}}}:lock", lock.resource());
        for n in &nodes {
            assert_eq!(
                n.holder(&key).as_deref(),
                Some(lock.token()),
                "{key} on {:?}",
                n.name()
            );
        }
    }
}

/// 100 tasks in a `try_lock` loop on one resource, 8 calls in flight
/// allowed per node: the lock keeps being handed on, and no caller is ever
/// told `Unavailable` (only `Taken`, or `Busy` where the client itself had
/// no room within the round's budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_resource_keeps_being_handed_on() {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = client_with(&nodes, Redlock::builder().max_in_flight(8)).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let redlock = redlock.clone();
        tasks.push(tokio::spawn(async move {
            let (mut granted, mut unavailable) = (0, 0);
            while tokio::time::Instant::now() < until {
                match redlock.try_lock("hot", TTL).await {
                    Ok(lock) => {
                        granted += 1;
                        lock.release().await.unwrap();
                    }
                    Err(LockError::Unavailable { .. }) => unavailable += 1,
                    Err(_) => tokio::task::yield_now().await,
                }
            }
            (granted, unavailable)
        }));
    }
    let (mut granted, mut unavailable) = (0, 0);
    for task in tasks {
        let (g, u) = task.await.unwrap();
        granted += g;
        unavailable += u;
    }
    eprintln!("hot resource, 100 tasks, 1 s: {granted} grants, {unavailable} Unavailable");
    assert_eq!(unavailable, 0);
    assert!(granted > 10, "the lock was handed on {granted} times");
}
