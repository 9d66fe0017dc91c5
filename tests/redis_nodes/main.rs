//! Lock semantics on the five real Redis nodes (no faults injected here; see
//! `tests/redis_faults.rs`). Every test uses its own resource names, so they run
//! concurrently.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod setup;
#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{Answer, ConfigError, InputError, LockError, Redlock, Retry};
use redquorum_test_support::checks::{Exclusion, eventually_ok};
use support::*;

const FOREIGN: &str = "another-holder-token";

/// All 32 ways another holder may already hold some of the five nodes: the
/// lock is granted iff at least 3 nodes are free, a refusal is `Taken`, and
/// afterwards every node holds exactly the keys it held before.
#[tokio::test]
async fn every_subset_of_prelocked_nodes() {
    // A long node timeout makes the clean-up of a refused round finish
    // before try_lock returns, even on a loaded machine.
    let redlock = support::patient().build().await.unwrap();
    let mut conns = raw_all().await;
    for mask in 0u32..32 {
        let resource = unique(&format!("subset{mask}"));
        let key = lock_key(&resource);
        for (i, conn) in conns.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                let _: () = conn.set_ex(&key, FOREIGN, 30).await.unwrap();
            }
        }
        let before = snapshot(&mut conns, &resource).await;
        let free = 5 - mask.count_ones();

        match redlock.try_lock(&resource, Duration::from_secs(10)).await {
            Ok(lock) => {
                assert!(
                    free >= 3,
                    "granted with only {free} free nodes (mask {mask:05b})"
                );
                assert!(lock.is_valid());
                // Our token sits exactly on the free nodes: a grant returns
                // once a quorum said yes, and the calls to the others land
                // a moment later (within a second on a loaded machine).
                for (i, conn) in conns.iter_mut().enumerate() {
                    let want = if mask & (1 << i) != 0 {
                        FOREIGN
                    } else {
                        lock.token()
                    };
                    // (The tail of the round reaches the others in the
                    // background: 5 s for a loaded machine.)
                    eventually_ok(
                        &format!("node {i} mask {mask:05b} holds {want}"),
                        Duration::from_secs(5),
                        async || {
                            let v: Option<String> = conn.get(&key).await.unwrap();
                            if v.as_deref() == Some(want) {
                                return Ok(());
                            }
                            assert!(v.is_none(), "node {i} mask {mask:05b}: {v:?}, not {want}");
                            Err(format!("{v:?}"))
                        },
                    )
                    .await;
                }
                lock.release().await.unwrap();
            }
            Err(LockError::Taken { votes }) => {
                assert!(
                    free < 3,
                    "refused with {free} free nodes (mask {mask:05b}): {votes}"
                );
                // Refused at the third "held", possibly before the rest answered.
                assert!(
                    votes.held() >= 3 && votes.held() <= mask.count_ones() as usize,
                    "{votes}"
                );
                assert_eq!(
                    votes.yes() + votes.held() + votes.failed() + undecided(&votes),
                    5
                );
            }
            Err(e) => panic!("mask {mask:05b}: unexpected error {e}"),
        }
        eventually_snapshot(&mut conns, &resource, &before, Duration::from_secs(2)).await;
    }
}

fn undecided(votes: &redquorum::Votes) -> usize {
    votes
        .iter()
        .filter(|(_, a)| **a == Answer::Undecided)
        .count()
}

/// Release deletes our keys and nothing else: not other resources' keys, not
/// a key another holder set after ours expired.
#[tokio::test]
async fn release_removes_only_our_keys() {
    // A long node timeout lets a refused round wait for all five nodes.
    let redlock = support::patient().build().await.unwrap();
    let mut conns = raw_all().await;
    let ours = unique("release-ours");
    let other = unique("release-other");
    let other_key = lock_key(&other);
    for conn in conns.iter_mut() {
        let _: () = conn.set_ex(&other_key, FOREIGN, 30).await.unwrap();
    }

    let lock = redlock.lock(&ours, Duration::from_secs(10)).await.unwrap();
    // Set on a quorum before `lock` returned, and on the others right after.
    let set = BTreeMap::from([(lock_key(&ours), lock.token().to_owned())]);
    eventually_snapshot(&mut conns, &ours, &vec![set; 5], Duration::from_secs(2)).await;
    lock.release().await.unwrap();
    eventually_gone(&mut conns, &ours, Duration::from_secs(2)).await;
    for conn in conns.iter_mut() {
        let v: Option<String> = conn.get(&other_key).await.unwrap();
        assert_eq!(v.as_deref(), Some(FOREIGN));
    }

    // Our lease "expired" and someone else took the resource on every node:
    // our release must leave their keys alone.
    let lock = redlock.lock(&ours, Duration::from_secs(10)).await.unwrap();
    for conn in conns.iter_mut() {
        let _: () = conn.set_ex(lock_key(&ours), FOREIGN, 30).await.unwrap();
    }
    let before = snapshot(&mut conns, &ours).await;
    lock.release().await.unwrap(); // confirmed: the key is not ours anywhere
    // Each node applies one connection's commands in order, so once this
    // round has heard from every node, the release has run everywhere.
    assert!(matches!(
        redlock.try_lock(&ours, Duration::from_secs(10)).await,
        Err(LockError::Taken { .. })
    ));
    assert_eq!(snapshot(&mut conns, &ours).await, before);
}

/// A lock extended past its first TTL stays valid and stays on every node.
#[tokio::test]
async fn extend_past_the_first_ttl() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("extend");
    let first_ttl = Duration::from_millis(400);
    let mut lock = redlock.lock(&resource, first_ttl).await.unwrap();
    let first_deadline = lock.deadline();
    lock.extend(Duration::from_secs(5)).await.unwrap();
    assert!(lock.deadline() > first_deadline);
    // The extension returns at its quorum: the rest lands just after.
    settled(&redlock).await;

    // Let the first TTL run out (time passing is what is tested here).
    tokio::time::sleep(first_ttl + Duration::from_millis(100)).await;
    assert!(lock.is_valid());
    assert!(lock.remaining() > Duration::from_secs(3));
    for conn in conns.iter_mut() {
        let v: Option<String> = conn.get(lock_key(&resource)).await.unwrap();
        assert_eq!(v.as_deref(), Some(lock.token()));
        let pttl: i64 = conn.pttl(lock_key(&resource)).await.unwrap();
        assert!(pttl > 3_000, "pttl {pttl}");
    }

    // Extending to a shorter TTL never shortens the keys or the deadline.
    let deadline = lock.deadline();
    lock.extend(Duration::from_millis(500)).await.unwrap();
    assert_eq!(lock.deadline(), deadline);
    settled(&redlock).await;
    let pttl: i64 = conns[0].pttl(lock_key(&resource)).await.unwrap();
    assert!(pttl > 3_000, "pttl {pttl}");
    lock.release().await.unwrap();
}

/// An expired lease is refused by extend, and extend never re-creates keys.
#[tokio::test]
async fn expired_lease_is_neither_extended_nor_recreated() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("expired");
    let key = lock_key(&resource);

    // Keys gone on every node while the lock still looks valid locally.
    let mut lock = redlock
        .lock(&resource, Duration::from_secs(10))
        .await
        .unwrap();
    // Every node's SET has landed (no straggler can undo the DEL below).
    let set = BTreeMap::from([(key.clone(), lock.token().to_owned())]);
    eventually_snapshot(&mut conns, &resource, &vec![set; 5], Duration::from_secs(2)).await;
    for conn in conns.iter_mut() {
        let _: () = conn.del(&key).await.unwrap();
    }
    match lock.extend(Duration::from_secs(10)).await {
        Err(LockError::Expired { votes }) => {
            let not_held = votes.iter().filter(|(_, a)| **a == Answer::NotHeld).count();
            assert!(not_held >= 3 && votes.yes() == 0, "{votes}");
        }
        other => panic!("expected Expired, got {other:?}"),
    }
    assert_eq!(
        snapshot(&mut conns, &resource).await,
        vec![Default::default(); 5]
    );
    drop(lock);

    // Past its validity: refused locally, nothing sent.
    let mut lock = redlock
        .lock(&resource, Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!lock.is_valid());
    assert_eq!(lock.remaining(), Duration::ZERO);
    assert!(matches!(
        lock.extend(Duration::from_secs(10)).await,
        Err(LockError::Expired { .. })
    ));
    // Nothing was sent: no key outlives the 100 ms it was set for. (A node
    // the quorum did not wait for may have taken its SET late, on a busy
    // machine, and still hold it for a few ms: its TTL, not ours.)
    for conn in conns.iter_mut() {
        let pttl: i64 = conn.pttl(&key).await.unwrap();
        assert!(pttl <= 100, "key extended or re-created: pttl {pttl}");
    }
    eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;
}

/// The scripts are called by SHA and must survive `SCRIPT FLUSH`.
#[tokio::test]
async fn scripts_survive_script_flush() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("flush");
    for round in 0..3 {
        for conn in conns.iter_mut() {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(conn)
                .await
                .unwrap();
        }
        let mut lock = redlock
            .lock(&resource, Duration::from_secs(5))
            .await
            .unwrap();
        for conn in conns.iter_mut() {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(conn)
                .await
                .unwrap();
        }
        lock.extend(Duration::from_secs(5)).await.unwrap();
        for conn in conns.iter_mut() {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(conn)
                .await
                .unwrap();
        }
        lock.release().await.unwrap();
        eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;
        let _ = round;
    }
}

/// A single try is refused by a native `SET NX` and learns nothing of the
/// holder's TTL; a waiter asks for it (it sleeps on it) and hears it from
/// every node that answered.
#[tokio::test]
async fn only_a_waiter_asks_for_the_holders_ttl() {
    let redlock = redlock().await;
    let resource = unique("holderttl");
    let holder = redlock
        .try_lock(&resource, Duration::from_secs(20))
        .await
        .unwrap();

    match redlock.try_lock(&resource, Duration::from_secs(5)).await {
        Err(LockError::Taken { votes }) => {
            assert!(votes.held() >= 3, "{votes}");
            assert_eq!(votes.min_pttl(), None, "{votes}");
        }
        other => panic!("expected Taken, got {other:?}"),
    }

    let waited = redlock
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::ZERO),
        )
        .await;
    let Err(LockError::Timeout { last, .. }) = waited else {
        panic!("expected Timeout, got {waited:?}");
    };
    let LockError::Taken { votes } = *last else {
        panic!("expected Taken, got {last:?}");
    };
    // The reported TTL bounds a waiter's sleep, so every refusal carries it,
    // no longer than the holder's 20 s.
    assert!(votes.held() >= 3, "{votes}");
    for (node, answer) in votes.iter() {
        if let Answer::Held { pttl, .. } = answer {
            assert!(
                pttl.is_some_and(|t| t > Duration::from_secs(10) && t <= Duration::from_secs(20)),
                "{node}: {answer:?}"
            );
        }
    }
    holder.release().await.unwrap();
}

/// A key of another type under our lock key is someone else's: refused, and
/// untouched by our clean-up.
#[tokio::test]
async fn wrong_type_key_counts_as_taken() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("wrongtype");
    let key = lock_key(&resource);
    for conn in conns.iter_mut().take(3) {
        let _: () = conn.hset(&key, "f", "v").await.unwrap();
    }
    let before = snapshot(&mut conns, &resource).await;
    match redlock.try_lock(&resource, Duration::from_secs(5)).await {
        Err(LockError::Taken { votes }) => {
            assert_eq!(votes.held(), 3);
            // No expiry on those keys: reported as such.
            assert_eq!(votes.min_pttl(), None);
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    eventually_snapshot(&mut conns, &resource, &before, Duration::from_secs(2)).await;
    for conn in conns.iter_mut() {
        let _: () = conn.del(&key).await.unwrap();
    }
}

/// Dropping a held lock releases it in the background.
#[tokio::test]
async fn dropping_a_lock_releases_it() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("drop");
    let lock = redlock
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    drop(lock);
    eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;
    redlock
        .try_lock(&resource, Duration::from_secs(1))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A waiting `lock_with` wakes by the time an abandoned holder's keys expire, and gives
/// up with `Timeout` after `max_wait`.
#[tokio::test]
async fn a_wait_outlasts_an_abandoned_holder() {
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("wait");
    let key = lock_key(&resource);
    // An abandoned holder: keys nobody releases, given their short TTL
    // once the short wait is over (set with it, a stall of the machine
    // before that wait could outlast them); a minute till then, should the
    // test end first.
    for conn in conns.iter_mut() {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(FOREIGN)
            .arg("EX")
            .arg(60)
            .query_async(conn)
            .await
            .unwrap();
    }
    match redlock
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::from_millis(100)),
        )
        .await
    {
        Err(LockError::Timeout { waited, last }) => {
            assert!(waited >= Duration::from_millis(100), "{waited:?}");
            assert!(matches!(*last, LockError::Taken { .. }), "{last}");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    for conn in conns.iter_mut() {
        let _: () = conn.pexpire(&key, 600).await.unwrap();
    }
    let lock = redlock
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    settled(&redlock).await;
    let pttl: i64 = conns[0].pttl(&key).await.unwrap();
    assert!(pttl > 4_000, "we hold the fresh key: pttl {pttl}");
    lock.release().await.unwrap();
}

/// Many tasks contending for one resource never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_tasks_never_overlap() {
    let redlock = support::patient()
        .retry(Retry::new(3, Duration::from_millis(5)))
        .build()
        .await
        .unwrap();
    let resource = Arc::new(unique("contend"));
    let exclusion = Exclusion::default();
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (redlock, resource, exclusion, grants) = (
            redlock.clone(),
            resource.clone(),
            exclusion.clone(),
            grants.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let lock = redlock
                    .lock_with(
                        &resource,
                        Duration::from_secs(5),
                        &redquorum::LockOptions::new().wait(Duration::from_secs(20)),
                    )
                    .await
                    .unwrap();
                let inside = exclusion.enter();
                tokio::task::yield_now().await;
                assert!(lock.is_valid());
                drop(inside);
                grants.fetch_add(1, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(grants.load(Ordering::SeqCst), 120);
}
