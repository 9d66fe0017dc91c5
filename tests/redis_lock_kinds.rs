//! Reentrant, multi-resource and fenced locks on the five real nodes.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::ReentrantLock;
use redquorum::{InputError, LockError, Redlock};
use redquorum_test_support::checks::eventually_ok;
use support::proxy::Proxy;
use support::*;
use tokio::sync::Mutex;

const TTL: Duration = Duration::from_secs(10);

fn fence_key(resource: &str) -> String {
    format!("{{{resource}}}:fence")
}

// ---------------------------------------------------------------- reentrant

#[tokio::test]
async fn reentrant_counts_holds_per_owner() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("reentrant");
    let key = lock_key(&resource);

    let outer = ReentrantLock::new(&redlock, &resource, "owner-a")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    assert_eq!(outer.token(), "owner-a");
    let inner = ReentrantLock::new(&redlock, &resource, "owner-a")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    // A quorum has count 2 (stragglers may still be on their way).
    let mut twos = 0;
    for conn in conns.iter_mut() {
        let count: Option<u32> = conn.hget(&key, "owner-a").await.unwrap();
        twos += usize::from(count == Some(2));
    }
    assert!(twos >= 3, "{twos} nodes count two holds");

    // Another owner, and a plain lock, are refused.
    assert!(matches!(
        redlock.try_lock(&resource, TTL).await,
        Err(LockError::Taken { .. })
    ));
    assert!(matches!(
        ReentrantLock::new(&redlock, &resource, "owner-b")
            .unwrap()
            .lock(TTL)
            .await,
        Err(LockError::Taken { .. })
    ));

    inner.release().await.unwrap();
    assert!(matches!(
        ReentrantLock::new(&redlock, &resource, "owner-b")
            .unwrap()
            .lock(TTL)
            .await,
        Err(LockError::Taken { .. })
    ));
    outer.release().await.unwrap();
    eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;
    let b = ReentrantLock::new(&redlock, &resource, "owner-b")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    b.release().await.unwrap();
}

#[tokio::test]
async fn reentrant_entry_refreshes_the_ttl_and_plain_locks_exclude_it() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("reentrant-ttl");
    let key = lock_key(&resource);
    let short = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(Duration::from_millis(500))
        .await
        .unwrap();
    let long = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    let pttl: i64 = conns[0].pttl(&key).await.unwrap();
    assert!(pttl > 9_000, "ttl refreshed to the longer one: {pttl}");
    drop(short);
    drop(long);
    eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;

    let plain = redlock.lock(&resource, TTL).await.unwrap();
    assert!(matches!(
        ReentrantLock::new(&redlock, &resource, "me")
            .unwrap()
            .lock(TTL)
            .await,
        Err(LockError::Taken { .. })
    ));
    plain.release().await.unwrap();
    assert_eq!(
        ReentrantLock::new(&redlock, &resource, "").unwrap_err(),
        InputError::EmptyOwner
    );
}

/// A re-entry that did not count on one node (down at the time) must not
/// give back the outer hold there when released.
#[tokio::test]
async fn releasing_a_reentry_leaves_nodes_that_did_not_count_it() {
    let urls = node_urls();
    let mut proxies = Vec::new();
    for url in &urls {
        proxies.push(Proxy::start(url.trim_start_matches("redis://")).await);
    }
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .node_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let mut conns = raw_all().await;
    let resource = unique("reentry-members");
    let key = lock_key(&resource);

    let outer = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    // The grant returns at its quorum: the outer hold reaches node 5 first.
    settled(&redlock).await;
    proxies[4].set_down(true);
    let inner = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    proxies[4].set_down(false);
    // Node 5 back and reachable again before the release.
    let probe = unique("reentry-members-probe");
    let lock = eventually_ok("node 5 back", Duration::from_secs(10), async || {
        for conn in &mut conns[..2] {
            let _: () = conn
                .set_ex(lock_key(&probe), "another-holder", 30)
                .await
                .unwrap();
        }
        redlock.try_lock(&probe, TTL).await
    })
    .await;
    lock.release().await.unwrap();

    inner.release().await.unwrap();
    settled(&redlock).await;
    // Counts: one hold everywhere; node 5 never counted the re-entry.
    let mut counts = Vec::new();
    for conn in conns.iter_mut() {
        let c: Option<u32> = conn.hget(&key, "me").await.unwrap();
        counts.push(c);
    }
    assert_eq!(
        counts[4],
        Some(1),
        "node 5 gave back the outer hold: {counts:?}"
    );
    assert!(
        counts.iter().filter(|c| **c == Some(1)).count() >= 4,
        "{counts:?}"
    );
    outer.release().await.unwrap();
}

// ------------------------------------------------------------ many resources

#[tokio::test]
async fn lock_many_is_all_or_nothing() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let base = unique("many");
    let (a, b, c) = (
        format!("{base}:a"),
        format!("{base}:b"),
        format!("{base}:c"),
    );

    let ab = redlock.lock_many(&[&a, &b], TTL).await.unwrap();
    assert_eq!(ab.resources().collect::<Vec<_>>(), [a.as_str(), b.as_str()]);
    // Each node holds both keys or neither (one MGET reads both at once):
    // a quorum, ours, before `lock_many` returned. A straggler may still
    // land, or never (a grant dropped half-way is not retried).
    let mut ours = Vec::new();
    for conn in conns.iter_mut() {
        let v: Vec<Option<String>> = conn.mget(&[lock_key(&a), lock_key(&b)]).await.unwrap();
        assert_eq!(v[0], v[1], "one key without the other");
        ours.push(v[0].as_deref() == Some(ab.token()));
    }
    let quorum = ours.iter().filter(|&&o| o).count();
    assert!(quorum >= 3, "both keys on {quorum} nodes");
    // Overlapping set: refused. A node that holds `b` refuses it as a
    // whole, so `c` is never set there and `b` stays ours.
    let bc = support::patient()
        .retry(redquorum::Retry::none())
        .build()
        .await
        .unwrap()
        .lock_many(&[&b, &c], TTL)
        .await;
    assert!(matches!(bc, Err(LockError::Taken { .. })), "{bc:?}");
    for (conn, _) in conns.iter_mut().zip(&ours).filter(|(_, o)| **o) {
        let v: Vec<Option<String>> = conn.mget(&[lock_key(&b), lock_key(&c)]).await.unwrap();
        assert_eq!(v[0].as_deref(), Some(ab.token()), "b changed hands");
        assert_eq!(v[1], None, "c was set by a refused multi-lock");
    }
    // A node that granted `b` and `c` (one our straggler had not reached)
    // has them released by the refused round, in the background for a node
    // that answered after the decision.
    let ab_only: BTreeMap<String, String> = [&a, &b]
        .into_iter()
        .map(|r| (lock_key(r), ab.token().to_owned()))
        .collect();
    eventually_keys(
        &mut conns,
        &base,
        Duration::from_secs(2),
        "on each node: a and b, ours, or nothing",
        |now| now.iter().all(|keys| keys.is_empty() || *keys == ab_only),
    )
    .await;

    // Extend and release act on every key.
    let mut ab = ab;
    ab.extend(Duration::from_secs(30)).await.unwrap();
    for r in [&a, &b] {
        // A quorum confirmed; stragglers may still be on their way.
        let mut extended = 0;
        for conn in conns.iter_mut() {
            let pttl: i64 = conn.pttl(lock_key(r)).await.unwrap();
            extended += usize::from(pttl > 20_000);
        }
        assert!(extended >= 3, "{r}: extended on {extended} nodes");
    }
    ab.release().await.unwrap();
    eventually_gone(&mut conns, &base, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn multi_resource_names_never_collide() {
    let redlock = redlock().await;
    let base = unique("collide");
    let (ab, c) = (format!("{base}ab"), format!("{base}c"));
    let (a, bc) = (format!("{base}a"), format!("{base}bc"));
    let first = redlock.lock_many(&[&ab, &c], TTL).await.unwrap();
    let second = redlock.lock_many(&[&a, &bc], TTL).await.unwrap();
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert!(matches!(
        redlock.lock_many(&[], TTL).await,
        Err(LockError::Input(InputError::NoResources))
    ));
    assert!(matches!(
        redlock.lock_many(&["x", "x"], TTL).await,
        Err(LockError::Input(InputError::DuplicateResource(_)))
    ));
}

// ------------------------------------------------------------------ fencing

#[tokio::test]
async fn fencing_tokens_increase_across_sequential_holders() {
    let redlock = redlock().await;
    let resource = unique("fence-seq");
    let mut last = 0;
    for _ in 0..10 {
        let lock = redlock
            .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
            .await
            .unwrap();
        let fence = lock.fence().unwrap();
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        lock.release().await.unwrap();
    }
    assert!(
        redlock
            .lock(&resource, TTL)
            .await
            .unwrap()
            .fence()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_contending_holders() {
    let resource = Arc::new(unique("fence-contended"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let redlock = support::patient()
            .retry(redquorum::Retry::new(3, Duration::from_millis(5)))
            .build()
            .await
            .unwrap();
        let (resource, order) = (resource.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let options = redquorum::LockOptions::new()
                    .fenced()
                    .wait(Duration::from_secs(20));
                let lock = redlock.lock_with(&resource, TTL, &options).await.unwrap();
                // Under the lock: record tokens in holding order.
                order.lock().await.push(lock.fence().unwrap());
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().await;
    assert_eq!(order.len(), 40);
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
}

/// Counters 1000, 0, 0, 0, 0, and another holder on nodes 4 and 5, so the
/// first grant comes from nodes 1–3: it gets more than 1000 and writes it
/// back to nodes 2 and 3. Then, with node 1 cut off and nodes 4 and 5 free,
/// the next holder's token is still larger: every quorum of nodes 2–5
/// includes node 2 or 3. Without the write-back it would be about 2.
#[tokio::test]
async fn write_back_keeps_tokens_increasing_when_the_leading_node_is_gone() {
    let urls = node_urls();
    let resource = unique("fence-writeback");
    let mut conns = raw_all().await;
    let _: () = conns[0].set(fence_key(&resource), 1000).await.unwrap();
    for conn in &mut conns[3..] {
        let _: () = conn
            .set_ex(lock_key(&resource), "another-holder", 30)
            .await
            .unwrap();
    }

    let proxy = Proxy::start(urls[0].trim_start_matches("redis://")).await;
    let mut via_proxy = urls.clone();
    via_proxy[0] = proxy.url();
    // A long node timeout: connect waits for node 1's first connection.
    let redlock = Redlock::builder()
        .nodes(&via_proxy)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();

    let a = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let ta = a.fence().unwrap();
    assert!(ta > 1000, "{ta}");
    a.release().await.unwrap();
    for conn in &mut conns[3..] {
        let _: () = conn.del(lock_key(&resource)).await.unwrap();
    }

    proxy.set_cut(true);
    let b = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let tb = b.fence().unwrap();
    assert!(tb > ta, "{tb} after {ta}");
    b.release().await.unwrap();
    proxy.set_cut(false);

    // The counters carry no TTL.
    let ttl: i64 = conns[1].pttl(fence_key(&resource)).await.unwrap();
    assert_eq!(ttl, -1);
}
