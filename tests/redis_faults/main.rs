//! Faults on the five real nodes: frozen (SIGSTOP of the server), killed and
//! restarted with their AOF, down or frozen at start-up.
//!
//! The tests change the shared cluster, so they take turns through one
//! mutex, and every fault is undone by a guard even when a test fails.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod chaos;
#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::{self, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::seq::SliceRandom;
use redis::AsyncCommands;
use redquorum::{Answer, LockError, LockOptions, NodeError, Redlock, Retry};
use redquorum_test_support::checks::{eventually, eventually_ok};
use support::*;
use tokio::sync::Mutex;

static CLUSTER: Mutex<()> = Mutex::const_new(());

/// A frozen node must never stall a round: a generous ceiling, far below
/// what waiting for the frozen node would cost (the TCP response timeout).
const NO_STALL: Duration = Duration::from_millis(750);

/// A client whose node timeout (250 ms) leaves a shared machine's stalls
/// room: these tests check which nodes answer, not how fast (the grace
/// that drops an unresponsive node's connection stays 1 s).
async fn client() -> Redlock {
    Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_millis(250))
        .trust_durable_restarts(true)
        .build()
        .await
        .expect("connect")
}

/// Whether node `needed` (1-based) grants: another holder sits on two other
/// nodes, so a lock on `resource` is granted only with `needed`'s vote.
async fn grants_with_node(redlock: &Redlock, resource: &str, needed: usize) -> bool {
    let mut conns = raw_all().await;
    let key = lock_key(resource);
    let others: Vec<usize> = (1..=5).filter(|&n| n != needed).take(2).collect();
    for &n in &others {
        let _: () = conns[n - 1]
            .set_ex(&key, "another-holder", 30)
            .await
            .unwrap();
    }
    let granted = match redlock.try_lock(resource, Duration::from_secs(5)).await {
        Ok(lock) => {
            lock.release().await.unwrap();
            true
        }
        Err(_) => false,
    };
    for &n in &others {
        let _: () = conns[n - 1].del(&key).await.unwrap();
    }
    granted
}

#[tokio::test]
async fn minority_frozen_during_rounds_costs_at_most_the_node_timeout() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("frozen-minority");
    let mut cycles = Vec::new();
    // A round that a loaded machine stalls past the node timeout on every
    // node is tried again (the wait): what is measured is what the frozen
    // node costs the cycles, not whether the host ever stalls.
    let again = LockOptions::new().wait(NO_STALL);
    for i in 0..60 {
        // Freeze node 5 a third of the way in, thaw it at two thirds.
        let _frozen = (20..40).contains(&i).then(|| Frozen::new(&[5]));
        let start = Instant::now();
        let mut lock = redlock
            .lock_with(&resource, Duration::from_secs(5), &again)
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        lock.extend(Duration::from_secs(5)).await.unwrap();
        lock.release().await.unwrap();
        cycles.push(start.elapsed());
    }
    // Nine in ten cycles with node 5 frozen within the bound: waiting for
    // the frozen node (its grace is 1 s) would take every one past it.
    let mut frozen = cycles[20..40].to_vec();
    frozen.sort();
    assert!(
        frozen[17] < NO_STALL,
        "cycles with node 5 frozen took {frozen:?}"
    );
    // Nothing left behind, on the frozen node either, once it has caught up.
    let mut conns = raw_all().await;
    eventually_gone(&mut conns, &resource, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn majority_frozen_is_unavailable_then_recovers_without_leftovers() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("frozen-majority");
    {
        let _frozen = Frozen::new(&[1, 2, 3]);
        for _ in 0..5 {
            let start = Instant::now();
            match redlock.try_lock(&resource, Duration::from_secs(5)).await {
                Err(LockError::Unavailable { votes }) => {
                    assert!(votes.failed() >= 3, "{votes}");
                    // Timed out, or — once a call has outlived the grace
                    // and the connection was dropped — refused at once.
                    for (node, answer) in votes.iter().take(3) {
                        assert!(
                            matches!(
                                answer,
                                Answer::Failed(NodeError::TimedOut | NodeError::NotConnected(_))
                            ),
                            "{node}: {answer:?}"
                        );
                    }
                }
                other => panic!("expected Unavailable, got {other:?}"),
            }
            assert!(start.elapsed() < NO_STALL, "took {:?}", start.elapsed());
        }
    }
    // Thawed: the queued acquires and their releases run in order, the
    // dropped connections come back (within the reconnect backoff), and a
    // round is granted again.
    let lock = redlock
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    lock.release().await.unwrap();
    let mut conns = raw_all().await;
    eventually_gone(&mut conns, &resource, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn node_down_at_connect_does_not_delay_and_rejoins() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("down-at-start");
    // A client that knew node 2 before it went down: it vouches for the
    // dataset node 2 comes back with (the test's own client meets node 2
    // first after a long time down, and could not).
    let witness = client().await;
    let killed = Killed::new(2);
    let start = Instant::now();
    let redlock = client().await;
    assert!(
        start.elapsed() < NO_STALL,
        "connect took {:?}",
        start.elapsed()
    );

    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    match redlock.try_lock(&resource, Duration::from_secs(1)).await {
        Ok(lock) => drop(lock),
        Err(e) => panic!("four of five nodes must grant: {e}"),
    }

    drop(killed); // node 2 starts again
    let probe = unique("down-at-start-probe");
    eventually("node 2 rejoins", Duration::from_secs(10), || {
        grants_with_node(&redlock, &probe, 2)
    })
    .await;
    drop(witness);
}

#[tokio::test]
async fn node_frozen_at_connect_does_not_delay() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("frozen-at-start");
    let frozen = Frozen::new(&[4]);
    let start = Instant::now();
    let redlock = client().await;
    assert!(
        start.elapsed() < NO_STALL,
        "connect took {:?}",
        start.elapsed()
    );
    let start = Instant::now();
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    assert!(
        start.elapsed() < NO_STALL,
        "lock+release took {:?}",
        start.elapsed()
    );
    drop(frozen);
}

/// A node killed and restarted from its AOF keeps our key, loses its script
/// cache (NOSCRIPT → EVAL fallback) and is reconnected in the background.
#[tokio::test]
async fn restarted_node_keeps_keys_and_scripts_still_work() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("restart");
    let mut lock = redlock
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    // The grant returns at its quorum: node 1's write lands first.
    settled(&redlock).await;
    drop(Killed::new(1)); // kill, then start with the same data

    let mut conn = raw(0).await;
    let v: Option<String> = conn.get(lock_key(&resource)).await.unwrap();
    assert_eq!(v.as_deref(), Some(lock.token()), "AOF lost the key");

    // The old connection is dead: the first call to node 1 sees it, the quorum
    // still extends, and the background task reconnects; node 1's script
    // cache is empty, so its first script call falls back to EVAL.
    lock.extend(Duration::from_secs(30)).await.unwrap();
    let probe = unique("restart-probe");
    eventually("node 1 rejoins", Duration::from_secs(10), || {
        grants_with_node(&redlock, &probe, 1)
    })
    .await;
    lock.extend(Duration::from_secs(30)).await.unwrap();
    lock.release().await.unwrap();
}

/// One node behind a 20 ms link, then cut off: neither slows a round, since
/// the quorum never waits for that node.
#[tokio::test]
async fn slow_or_cut_node_does_not_slow_rounds() {
    let _turn = CLUSTER.lock().await;
    let urls = node_urls();
    let proxy = support::proxy::Proxy::start(urls[0].trim_start_matches("redis://")).await;
    let mut via_proxy = urls.clone();
    via_proxy[0] = proxy.url();
    let redlock = Redlock::builder()
        .nodes(&via_proxy)
        .node_timeout(Duration::from_millis(200))
        .trust_durable_restarts(true)
        .build()
        .await
        .unwrap();
    let resource = unique("slow-link");
    // Healthy link: node 1 takes part.
    assert!(grants_with_node(&redlock, &resource, 1).await);
    proxy.set_latency(Duration::from_millis(20));
    // Slow link: still granted with node 1 needed (40 ms < 200 ms timeout)…
    assert!(grants_with_node(&redlock, &resource, 1).await);
    // …and without needing it, a round does not wait for it: a cycle that
    // waited for node 1 takes a round trip of 40 ms at least, so the
    // fastest of five is under it (the others may meet the machine's
    // stalls).
    let mut fastest = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let lock = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .unwrap();
        lock.release().await.unwrap();
        fastest = fastest.min(start.elapsed());
    }
    assert!(fastest < Duration::from_millis(40), "{fastest:?}");
    proxy.set_latency(Duration::ZERO);
    proxy.set_cut(true);
    assert!(
        !grants_with_node(&redlock, &resource, 1).await,
        "granted through a cut link"
    );
    proxy.set_cut(false);
    assert!(
        grants_with_node(&redlock, &resource, 1).await,
        "link healed"
    );
}

/// Locks held across restarts with the AOF (`appendfsync always`) stay
/// exclusive: a whole quorum of nodes is restarted one at a time while we
/// hold, and a fresh client is refused after each restart, seeing our key on
/// every node.
#[tokio::test]
async fn aof_restarts_keep_held_locks_exclusive() {
    let _turn = CLUSTER.lock().await;
    let holder = client().await;
    let resource = unique("aof-restart");
    let mut lock = holder
        .try_lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    settled(&holder).await;
    for n in 1..=3 {
        drop(Killed::new(n)); // SIGKILL, then start from the AOF
        let other = client().await;
        match other.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Taken { votes }) => {
                assert!(votes.held() >= 3, "after restarting node {n}: {votes}");
                assert_eq!(votes.yes(), 0, "after restarting node {n}: {votes}");
            }
            other => panic!("after restarting node {n}, a second client got {other:?}"),
        }
        assert!(lock.is_valid());
    }
    let mut conns = raw_all().await;
    for (i, conn) in conns.iter_mut().enumerate() {
        let v: Option<String> = conn.get(lock_key(&resource)).await.unwrap();
        assert_eq!(
            v.as_deref(),
            Some(lock.token()),
            "node {} lost the key",
            i + 1
        );
    }
    // The holder's connections to the restarted nodes are re-established in
    // the background; extend works again once they are.
    let start = Instant::now();
    while lock.extend(Duration::from_secs(30)).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "extend never recovered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lock.release().await.unwrap();
    let other = client().await;
    other
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .expect("free after release")
        .release()
        .await
        .unwrap();
}

/// What persistence is for, shown by breaking it: a node restarted EMPTY
/// within the TTL forgets a key it granted, and a second client wins a quorum
/// while the first still holds a valid lock.
///
/// The first lock is held on exactly nodes {1, 2, 3} (a foreign holder sits
/// on 4 and 5 during the acquire, then goes away). Node 3 is wiped and
/// restarted; the second client then gets {3, 4, 5}. Both locks are valid at
/// once: the overlap that `appendfsync always` (or keeping a restarted node
/// out for longer than the largest TTL) rules out. See docs/operations.md.
#[tokio::test]
async fn empty_restart_within_the_ttl_lets_a_second_holder_in() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("empty-restart");
    let key = lock_key(&resource);
    let mut conns = raw_all().await;
    for conn in &mut conns[3..] {
        let _: () = conn.set_ex(&key, "foreign-holder", 30).await.unwrap();
    }
    let first = client()
        .await
        .try_lock(&resource, Duration::from_secs(30))
        .await
        .expect("nodes 1-3 are free");
    for (i, conn) in conns.iter_mut().enumerate() {
        let v: Option<String> = conn.get(&key).await.unwrap();
        let want = if i < 3 {
            first.token()
        } else {
            "foreign-holder"
        };
        assert_eq!(v.as_deref(), Some(want), "node {}", i + 1);
    }
    for conn in &mut conns[3..] {
        let _: () = conn.del(&key).await.unwrap();
    }

    wipe_restart(3);

    // The new client may need a moment to connect to the restarted node.
    // Its quarantine is off: with it, the wiped node counts toward nothing
    // until it has been up for the longest TTL (tests/redis_restarts/).
    let second_client = Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_millis(250))
        .restart_quarantine(false)
        .build()
        .await
        .expect("connect");
    let second = eventually_ok(
        "an empty node 3 plus free nodes 4 and 5 make a quorum",
        Duration::from_secs(10),
        || second_client.try_lock(&resource, Duration::from_secs(30)),
    )
    .await;
    assert!(
        first.is_valid() && second.is_valid(),
        "expected two valid holders at once"
    );
    assert_ne!(first.token(), second.token());
    let mut conns = raw_all().await;
    let holders: Vec<Option<String>> = {
        let mut v = Vec::new();
        for conn in &mut conns {
            v.push(conn.get(&key).await.unwrap());
        }
        v
    };
    let first_token = Some(first.token().to_owned());
    let second_token = Some(second.token().to_owned());
    assert_eq!(holders[..2], [first_token.clone(), first_token]);
    assert_eq!(
        holders[2..],
        [second_token.clone(), second_token.clone(), second_token]
    );
    let _ = first.release().await;
    let _ = second.release().await;
    adopt(3);
}

/// A key our acquire left on a node that stopped answering is not chased:
/// past the grace the connection is dropped and the release is refused at
/// once, so after the thaw the key lives on that node — and only there —
/// until its TTL (docs/guarantees.md, "which node holds what").
#[tokio::test]
async fn leftovers_live_only_on_the_unreachable_node_until_their_ttl() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("leftover");
    let ttl = Duration::from_secs(3);
    let mut conns = raw_all().await;
    {
        let _frozen = Frozen::new(&[5]);
        let lock = redlock.try_lock(&resource, ttl).await.unwrap();
        // Held past the grace (4 × 250 ms, at least 1 s): node 5's
        // connection is dropped.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        lock.release().await.unwrap();
    }
    // Thawed: node 5 applies the acquire it had buffered; nothing else has
    // the key.
    let key = lock_key(&resource);
    let start = Instant::now();
    let mut seen_on_5 = false;
    loop {
        let snap = snapshot(&mut conns, &resource).await;
        assert!(
            snap[..4].iter().all(|m| m.is_empty()),
            "a key left on a node that was reachable: {snap:?}"
        );
        seen_on_5 |= snap[4].contains_key(&key);
        if seen_on_5 && snap[4].is_empty() {
            break; // it expired
        }
        if !seen_on_5 && start.elapsed() > Duration::from_secs(1) {
            break; // the acquire never reached node 5's socket: nothing to expire
        }
        assert!(
            start.elapsed() < ttl + Duration::from_secs(2),
            "the leftover outlived its TTL: {snap:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("leftover on node 5 after the thaw: {seen_on_5}");
}

/// How many nodes hold `token` under `key` (the value is the token, or the
/// token, a NUL and the holder's label).
async fn holding_token(key: &str, token: &str) -> usize {
    let mut n = 0;
    for mut conn in raw_all().await {
        let value: Option<Vec<u8>> = conn.get(key).await.unwrap();
        let ours = value.is_some_and(|v| {
            v == token.as_bytes()
                || (v.starts_with(token.as_bytes()) && v.get(token.len()) == Some(&0))
        });
        n += usize::from(ours);
    }
    n
}

/// The rolling restart docs/operations.md describes, with each node coming
/// back empty: a lease must not shrink node by node until it is lost. The
/// extension after each restart sets the key again on the node that lost
/// it (the lock being valid, that is as safe as an acquire), so after three
/// of five nodes restarted empty the lock is still held on all five.
/// Without restoring, the third restart left two holders and the lease was
/// lost (seen: 5 → 4 → 3 → lost).
#[tokio::test]
async fn extensions_restore_the_key_on_nodes_restarted_empty() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("restore");
    let key = lock_key(&resource);
    let ttl = Duration::from_secs(10);
    let mut lock = redlock
        .lock_with(&resource, ttl, &LockOptions::new().label("restored"))
        .await
        .expect("healthy nodes grant");
    let token = lock.token().to_owned();
    // Each call returns at its quorum: read (or restart) the nodes once
    // the rest has landed.
    settled(&redlock).await;
    assert_eq!(holding_token(&key, &token).await, 5);
    for node in 1..=3 {
        settled(&redlock).await;
        wipe_restart(node);
        assert_eq!(
            holding_token(&key, &token).await,
            5 - 1,
            "node {node} came back empty"
        );
        // The client reconnects to the restarted node in the background:
        // an extension (the lease's next one) restores the key there.
        eventually_ok(
            &format!("node {node}: the key restored"),
            Duration::from_secs(10),
            async || {
                lock.extend(ttl).await.unwrap_or_else(|e| {
                    panic!("after node {node} restarted empty, the lease is kept: {e}")
                });
                match holding_token(&key, &token).await {
                    5 => Ok(()),
                    held => Err(format!("{held} nodes hold it")),
                }
            },
        )
        .await;
        assert!(lock.is_valid());
    }
    // Restored with its label, and released everywhere.
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(seen.label(), Some("restored"));
    lock.release().await.unwrap();
    for node in 1..=3 {
        adopt(node);
    }
    settled(&redlock).await;
    assert_eq!(holding_token(&key, &token).await, 0);
}
