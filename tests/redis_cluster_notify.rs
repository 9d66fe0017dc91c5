//! Wake-ups through Redis Cluster members are sharded: a release is
//! published on the shard that serves its key (`SPUBLISH`), and the
//! member's listener subscribes there (`SSUBSCRIBE`), so no other shard
//! hears it. A cluster-wide `PUBLISH` costs every other node of the cluster
//! a message over the cluster bus; a release through redquorum costs none.
//!
//! Needs `REDQUORUM_CLUSTER_NODES` (the three seed URLs) and
//! `REDQUORUM_SCRIPTS_CLUSTER`; fails loudly without them. Built only with
//! the `redis-tests` feature, which `scripts/test` turns on (it starts the
//! nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::{Duration, Instant};

use redquorum::{LockOptions, Redlock};
use support::cluster::*;
use support::unique;

/// `CLUSTER INFO`'s `field`, summed over the three masters of `cluster`.
async fn bus_messages(cluster: u16, field: &str) -> u64 {
    let mut total = 0;
    for master in 1..=3 {
        let info = text(&query(port(cluster, master), &["CLUSTER", "INFO"]).await);
        total += info
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map_or(0, |v| v.trim().parse::<u64>().unwrap());
    }
    total
}

async fn client() -> Redlock {
    Redlock::builder()
        .nodes(urls())
        .node_timeout(Duration::from_secs(1))
        .require_quorum(true)
        .build()
        .await
        .expect("the three clusters")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_through_a_cluster_member_reaches_one_shard() {
    let _one = SERIAL.lock().await;
    let redlock = client().await;
    const RELEASES: u64 = 20;
    let field = "cluster_stats_messages_publish_sent";

    // For comparison: one cluster-wide PUBLISH, as the release scripts sent
    // before, reaches the two other masters of the cluster over the bus.
    let before = bus_messages(1, field).await;
    query(port(1, 1), &["PUBLISH", "redquorum-test-channel", "x"]).await;
    let per_publish = bus_messages(1, field).await - before;
    assert_eq!(
        per_publish, 2,
        "a cluster-wide PUBLISH on a 3-master cluster"
    );

    let before = bus_messages(1, field).await;
    for _ in 0..RELEASES {
        let lock = redlock
            .lock(&unique("sharded"), Duration::from_secs(10))
            .await
            .unwrap();
        lock.release().await.unwrap();
    }
    let after = bus_messages(1, field).await;
    println!(
        "cluster bus messages per release: {} with PUBLISH, {} through redquorum ({RELEASES} releases)",
        per_publish,
        (after - before) as f64 / RELEASES as f64
    );
    assert_eq!(after - before, 0, "releases went out cluster-wide");
    redlock.shutdown().await;
}

/// The shard that serves the key tells a shard subscriber; a classic
/// subscriber on another master hears nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_keys_shard_hears_the_release() {
    let _one = SERIAL.lock().await;
    let redlock = client().await;
    let resource = unique("one-shard");
    let key = support::lock_key(&resource);
    let owner = owner(1, keyslot(&key).await).await;
    let other = (1..=3).find(|m| *m != owner).unwrap();
    let (_sharded_conn, mut sharded) =
        support::shard_subscriber(&format!("redis://127.0.0.1:{}", port(1, owner)), &key).await;
    // A classic subscriber on another master: cluster-wide PUBLISH reached it.
    let other_client =
        redis::Client::open(format!("redis://127.0.0.1:{}", port(1, other))).unwrap();
    let mut classic = other_client.get_async_pubsub().await.unwrap();
    classic.subscribe(&key).await.unwrap();
    let lock = redlock
        .lock(&resource, Duration::from_secs(10))
        .await
        .unwrap();
    lock.release().await.unwrap();
    let heard = support::next_release(&mut sharded).await;
    // The shard has published; a cluster-wide publication would have
    // reached the other master by now (it did, before: the negative case
    // this test was seen failing on).
    use futures::StreamExt;
    let mut messages = classic.on_message();
    let stray = tokio::time::timeout(Duration::from_millis(300), messages.next()).await;
    assert!(
        stray.is_err(),
        "master {other} (not the key's) heard the release: {stray:?} (owner heard {heard:?})"
    );
    redlock.shutdown().await;
}

/// A waiter on cluster members is woken by the release, through the
/// members' sharded listeners, long before the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_cluster_members_is_woken_by_the_release() {
    let _one = SERIAL.lock().await;
    let (holder, waiter) = (client().await, client().await);
    let resource = unique("woken");
    let ttl = Duration::from_secs(20);
    let lock = holder.lock(&resource, ttl).await.unwrap();
    let waiting = tokio::spawn({
        let resource = resource.clone();
        async move {
            let start = Instant::now();
            let got = waiter
                .lock_with(
                    &resource,
                    ttl,
                    &LockOptions::new().wait(Duration::from_secs(15)),
                )
                .await
                .expect("the lock after the release");
            let waited = start.elapsed();
            got.release().await.unwrap();
            waiter.shutdown().await;
            waited
        }
    });
    // The waiter's channel subscribed on a quorum of members (each on the
    // master that serves the key) before the release.
    let key = support::lock_key(&resource);
    eventually("the waiter subscribed on two members", || async {
        members_listening(&key).await >= 2
    })
    .await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let waited = waiting.await.unwrap();
    let after = released.elapsed();
    println!("waiter: {waited:?} in all, done {after:?} after the release");
    assert!(
        after < Duration::from_secs(3),
        "the waiter took {after:?} after the release (its TTL fallback is {ttl:?}): not woken"
    );
    holder.shutdown().await;
}
