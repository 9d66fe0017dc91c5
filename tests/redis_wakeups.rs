//! Waiters woken on release, on the five real nodes: prompt hand-off with
//! notifications, a correct fallback without them, and mutual exclusion
//! either way.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redquorum::ReentrantLock;
use redquorum::{Redlock, Retry};
use redquorum_test_support::checks::Exclusion;
use support::*;
use tokio::time::Instant;

/// A client whose polling alone would be slow (retry ceiling 5 s), so a
/// prompt hand-off can only come from a notification.
async fn slow_poller(urls: &[String], notify: bool) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::new(3, Duration::from_secs(5)))
        .notify_waiters(notify)
        .build()
        .await
        .unwrap()
}

/// Starts `waiter` waiting (up to 20 s) for `resource`; resolves to when
/// it got the lock (released at once).
fn spawn_waiter(waiter: Redlock, resource: String) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let lock = waiter
            .lock_with(
                &resource,
                Duration::from_secs(5),
                &redquorum::LockOptions::new().wait(Duration::from_secs(20)),
            )
            .await
            .unwrap();
        let got = Instant::now();
        lock.release().await.unwrap();
        got
    })
}

/// How long after the holder's release a waiting client gets the lock.
/// The release comes once the waiter's subscription is live on every node,
/// so a notification can reach it.
async fn hand_off(urls: &[String]) -> Duration {
    let holder = support::redlock().await;
    let waiter = slow_poller(urls, true).await;
    let resource = unique("wake");
    let lock = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    let key = lock_key(&resource);
    let waiting = spawn_waiter(waiter, resource);
    let mut conns = raw_all().await;
    wait_subscribed(&mut conns, &key).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    waiting.await.unwrap() - released
}

#[tokio::test]
async fn a_release_wakes_the_waiter_at_once() {
    let urls = node_urls();
    let after = hand_off(&urls).await;
    // Polling alone would take up to the 5 s retry ceiling.
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
}

/// A client that may not subscribe (ACL) gets no notifications and must fall
/// back to polling: still granted, and never later than its retry ceiling
/// allows (here 300 ms, far below the holder's 30 s TTL).
#[tokio::test]
async fn without_notifications_a_waiter_falls_back_to_polling() {
    let user = support::acl::AclUser::create(
        "rq-nosub",
        &[
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-subscribe",
            "-psubscribe",
        ],
    )
    .await;
    let urls = user.urls("pw");
    let holder = support::redlock().await;
    let waiter = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::new(3, Duration::from_millis(300)))
        .build()
        .await
        .unwrap();
    let resource = unique("nosub");
    let lock = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    let release_at = Instant::now() + Duration::from_millis(400);
    let releaser = tokio::spawn(async move {
        tokio::time::sleep_until(release_at).await;
        lock.release().await.unwrap();
    });
    let got = waiter
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    let after = Instant::now() - release_at;
    releaser.await.unwrap();
    got.release().await.unwrap();
    drop(user);
    assert!(
        after < Duration::from_secs(2),
        "granted {after:?} after the release"
    );
}

async fn contend(notify: bool) {
    let urls = node_urls();
    let resource = Arc::new(unique(if notify {
        "contend-notify"
    } else {
        "contend-poll"
    }));
    let exclusion = Exclusion::default();
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let redlock = Redlock::builder()
            .nodes(&urls)
            .notify_waiters(notify)
            // Not about timing: a loaded host must not fail a release.
            .node_timeout(Duration::from_secs(1))
            .retry(Retry::new(3, Duration::from_millis(20)))
            .build()
            .await
            .unwrap();
        let (resource, exclusion, grants) = (resource.clone(), exclusion.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let lock = redlock
                    .lock_with(
                        &resource,
                        Duration::from_secs(5),
                        &redquorum::LockOptions::new().wait(Duration::from_secs(30)),
                    )
                    .await
                    .unwrap();
                let inside = exclusion.enter();
                tokio::time::sleep(Duration::from_millis(1)).await;
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
    assert_eq!(grants.load(Ordering::SeqCst), 90);
    let mut conns = raw_all().await;
    eventually_gone(&mut conns, &resource, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_overlaps_with_notifications() {
    contend(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_overlaps_without_notifications() {
    contend(false).await;
}

/// A reentrant holder's releases all name the same owner: each must still
/// count as a new release for the waiters, so each publishes a nonce of its
/// own (the hold's token), never the owner name. Checked on what node 1
/// publishes over three release cycles of one owner; then a waiter behind
/// that owner is woken by the next release.
#[tokio::test]
async fn every_reentrant_release_publishes_a_new_nonce_and_wakes_the_waiter() {
    let holder = support::redlock().await;
    let resource = unique("wake-reentrant");
    let key = lock_key(&resource);
    let ttl = Duration::from_secs(30);
    let (_subscribed, mut pushes) = support::shard_subscriber(&node_urls()[0], &key).await;
    let mut nonces = Vec::new();
    for _ in 0..3 {
        let lock = ReentrantLock::new(&holder, &resource, "owner-a")
            .unwrap()
            .lock(ttl)
            .await
            .unwrap();
        lock.release().await.unwrap();
        nonces.push(support::next_release(&mut pushes).await);
    }
    println!("published: {nonces:?}");
    assert!(
        nonces.iter().all(|n| n != "owner-a"),
        "the owner name was published"
    );
    assert!(
        nonces[0] != nonces[1] && nonces[1] != nonces[2] && nonces[0] != nonces[2],
        "two releases published the same nonce: {nonces:?}"
    );
    // And a waiter behind that owner is woken at once.
    let lock = ReentrantLock::new(&holder, &resource, "owner-a")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let waiter = slow_poller(&node_urls(), true).await;
    let waiting = spawn_waiter(waiter, resource.clone());
    let mut conns = raw_all().await;
    // Node 1 also counts the subscription this test listens on.
    wait_subscribed_by(&mut conns, &key, &[2, 1, 1, 1, 1]).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let after = waiting.await.unwrap() - released;
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
}

/// Many short waits on other resources from the same client (each one
/// registers, waits and unregisters) must not delay the subscription of a
/// waiter behind a held resource, nor its wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_under_registration_churn() {
    const CHURNERS: usize = 16;
    let holder = support::redlock().await;
    let client = slow_poller(&node_urls(), true).await;
    let ttl = Duration::from_secs(30);
    // Resources held elsewhere, so that every churning wait registers.
    let held: Vec<String> = (0..CHURNERS).map(|_| unique("churn")).collect();
    let mut holds = Vec::new();
    for r in &held {
        holds.push(holder.lock(r, ttl).await.unwrap());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let waits = Arc::new(AtomicUsize::new(0));
    let churners: Vec<_> = held
        .iter()
        .map(|r| {
            let (client, r, stop, waits) = (client.clone(), r.clone(), stop.clone(), waits.clone());
            tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    let refused = client
                        .lock_with(
                            &r,
                            Duration::from_secs(5),
                            &redquorum::LockOptions::new().wait(Duration::from_millis(2)),
                        )
                        .await;
                    assert!(refused.is_err(), "a held resource was granted");
                    waits.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resource = unique("wake-churn");
    let lock = holder.lock(&resource, ttl).await.unwrap();
    let key = lock_key(&resource);
    let (w, r) = (client.clone(), resource.clone());
    let waiting = tokio::spawn(async move {
        let lock = w
            .lock_with(
                &r,
                Duration::from_secs(5),
                &redquorum::LockOptions::new().wait(Duration::from_secs(25)),
            )
            .await
            .unwrap();
        let got = Instant::now();
        lock.release().await.unwrap();
        got
    });
    let start = Instant::now();
    let before = waits.load(Ordering::Relaxed);
    let mut conns = raw_all().await;
    wait_subscribed(&mut conns, &key).await;
    let subscribed = start.elapsed();
    let released = Instant::now();
    lock.release().await.unwrap();
    let after = waiting.await.unwrap() - released;
    let rate = (waits.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.await.unwrap();
    }
    for h in holds {
        h.release().await.unwrap();
    }
    println!(
        "churn: {rate:.0} registering waits/s; waiter subscribed on all 5 after {subscribed:?}, woken {after:?} after the release"
    );
    // Without a notification the waiter polls up to its 5 s ceiling.
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
}
