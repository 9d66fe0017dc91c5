//! The holder's own fence, exactly: inspection, `leader()` and `observe()`
//! report the fence (term) the holder was granted, even after other
//! candidates' rounds (and nodes the holder's key is restored on) have
//! moved the nodes' counters past it.

use std::time::Duration;

use crate::support::memory::{Until, five};
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::election::{Election, LeaderState};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test]
async fn inspection_reports_the_holders_fence_after_counters_moved_on() {
    let (nodes, redlock) = five().await;
    let lock = redlock
        .lock_with("ledger", TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let fence = lock.fence().unwrap();
    // Other candidates' rounds took nodes 1 and 5 for a moment, many times,
    // each drawing a counter there (the holder's key stays).
    let fence_key = redlock.key_layout().fence_key("ledger");
    for i in [0, 4] {
        nodes[i].set_counter(&fence_key, fence + 17);
    }
    let seen = redlock.inspect("ledger").await.unwrap();
    assert_eq!(seen.fence(), Some(fence), "{seen:?}");
    lock.release().await.unwrap();
}

#[tokio::test]
async fn the_leaders_term_is_its_own_after_counters_moved_on() {
    let (nodes, redlock) = five().await;
    let election = Election::new(&redlock, "scheduler").unwrap();
    let leadership = election
        .campaign_with(
            TTL,
            &AcquireOptions::new().label("replica-1"),
            &LeaseOptions::new(),
        )
        .await
        .unwrap();
    let term = leadership.term();
    let fence_key = redlock.key_layout().fence_key("scheduler");
    for i in [0, 4] {
        nodes[i].set_counter(&fence_key, term + 17);
    }
    match election.leader().await.unwrap() {
        LeaderState::Leading(leader) => assert_eq!(leader.term, term, "{leader:?}"),
        other => panic!("no leader seen: {other:?}"),
    }
    leadership.resign().await.unwrap();
}

/// A key the holder's extension sets again on a node that lost it carries
/// the holder's fence too, whatever that node's counter says.
#[tokio::test]
async fn a_restored_key_carries_the_holders_fence() {
    let (nodes, redlock) = five().await;
    let mut lock = redlock
        .lock_with("restored", TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let fence = lock.fence().unwrap();
    let fence_key = redlock.key_layout().fence_key("restored");
    // Nodes 1 and 2 lose everything (restarted empty, counters included),
    // then others' rounds draw counters there before the holder extends.
    for node in &nodes[..2] {
        node.wipe();
        node.set_counter(&fence_key, fence + 40);
    }
    lock.extend(TTL).await.unwrap();
    let key = redlock.key_layout().lock_key("restored");
    for node in &nodes[..2] {
        node.until(Duration::from_secs(5), "the key restored", |n| {
            n.holder(&key).is_some()
        })
        .await;
    }
    let seen = redlock.inspect("restored").await.unwrap();
    assert_eq!(seen.fence(), Some(fence), "{seen:?}");
    for view in seen.nodes() {
        let read = view.read.as_ref().unwrap();
        assert_eq!(read.granted_fence, Some(fence), "{view:?}");
    }
    lock.release().await.unwrap();
}
