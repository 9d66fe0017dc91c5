//! Every reachable node holds what a round set (docs/design.md §2): a round
//! decides at the quorum, but every grant and every extension reaches all
//! five healthy nodes — on a loaded host, where stragglers are the rule.
//!
//! 16 tasks take 400 locks of each kind while both cores are kept busy; after
//! each grant every node must hold it within 100 ms, and after each
//! extension every node's PTTL must show it.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redquorum::ReentrantLock;
use redquorum::{Lock, Redlock};
use support::load::Burners;
use support::{lock_key, raw_all, unique};

const TASKS: usize = 16;
const PER_TASK: usize = 25;
const TTL: Duration = Duration::from_secs(10);
const EXTENDED: Duration = Duration::from_secs(60);
/// How long after the call returns every node must show its effect: a
/// call that never arrives never shows, so the bound is room for a loaded
/// machine (both cores are kept busy here), not the property.
const SPREAD_BOUND: Duration = Duration::from_secs(1);
const OWNER: &str = "delivery-owner";

#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fenced,
    Reentrant,
    Many,
}

/// What node `conn` must show for `lock`: its keys with our mark, and —
/// once extended — a PTTL above the first TTL.
async fn shows(conn: &mut MultiplexedConnection, kind: Kind, lock: &Lock, extended: bool) -> bool {
    for resource in lock.resources() {
        let key = lock_key(resource);
        let held = match kind {
            Kind::Reentrant => {
                let count: Option<u32> = conn.hget(&key, OWNER).await.unwrap_or(None);
                count == Some(1)
            }
            // The token; a fenced lock's key stores its fence after it
            // (`token \0 label \0 fence`) where the write-back reached it
            // (the nodes counted for the grant), and then the holder's.
            Kind::Fenced => {
                let value: Option<String> = conn.get(&key).await.unwrap_or(None);
                let fence = lock.fence().map(|f| f.to_string());
                value.as_deref().is_some_and(|v| {
                    let mut parts = v.split('\0');
                    parts.next() == Some(lock.token())
                        && parts.nth(1).is_none_or(|f| Some(f) == fence.as_deref())
                })
            }
            _ => {
                let token: Option<String> = conn.get(&key).await.unwrap_or(None);
                token.as_deref() == Some(lock.token())
            }
        };
        if !held {
            return false;
        }
        if extended {
            let pttl: i64 = conn.pttl(&key).await.unwrap_or(-2);
            if pttl <= TTL.as_millis() as i64 {
                return false;
            }
        }
    }
    true
}

/// How many nodes did not show `lock` within [`SPREAD_BOUND`].
async fn misses(conns: &[MultiplexedConnection], kind: Kind, lock: &Lock, extended: bool) -> usize {
    let start = Instant::now();
    let checks = conns.iter().map(|conn| {
        let mut conn = conn.clone();
        async move {
            loop {
                if shows(&mut conn, kind, lock, extended).await {
                    return 0;
                }
                if start.elapsed() > SPREAD_BOUND {
                    return 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    futures::future::join_all(checks).await.into_iter().sum()
}

async fn take(redlock: &Redlock, kind: Kind) -> Lock {
    let resource = unique("spread");
    match kind {
        Kind::Plain => redlock.lock(&resource, TTL).await,
        Kind::Fenced => {
            redlock
                .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
                .await
        }
        Kind::Reentrant => {
            ReentrantLock::new(redlock, &resource, OWNER)
                .unwrap()
                .lock(TTL)
                .await
        }
        Kind::Many => {
            let other = format!("{resource}:b");
            redlock.lock_many(&[&resource, &other], TTL).await
        }
    }
    .unwrap_or_else(|e| panic!("{kind:?}: {e}"))
}

/// Grants, and grants and extensions that missed a node.
async fn spread(kind: Kind) -> (usize, usize, usize) {
    let redlock = support::patient().build().await.expect("connect");
    let conns = Arc::new(raw_all().await);
    let (grants, grant_misses, extend_misses) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let _load = Burners::start(2, Duration::from_secs(120));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (redlock, conns) = (redlock.clone(), conns.clone());
            let (grants, grant_misses, extend_misses) =
                (grants.clone(), grant_misses.clone(), extend_misses.clone());
            tokio::spawn(async move {
                for _ in 0..PER_TASK {
                    let mut lock = take(&redlock, kind).await;
                    grants.fetch_add(1, Ordering::Relaxed);
                    let missed = misses(&conns, kind, &lock, false).await;
                    grant_misses.fetch_add(usize::from(missed > 0), Ordering::Relaxed);
                    lock.extend(EXTENDED).await.expect("extend");
                    let missed = misses(&conns, kind, &lock, true).await;
                    extend_misses.fetch_add(usize::from(missed > 0), Ordering::Relaxed);
                    lock.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let out = (
        grants.load(Ordering::Relaxed),
        grant_misses.load(Ordering::Relaxed),
        extend_misses.load(Ordering::Relaxed),
    );
    println!(
        "{kind:?}: {} grants; {} not on all 5 nodes within {SPREAD_BOUND:?}; {} extensions not on all 5",
        out.0, out.1, out.2
    );
    out
}

/// One kind at a time: each brings its own load.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn check(kind: Kind) {
    let _serial = SERIAL.lock().await;
    // Calls queued while the node's connection is busy go out together
    // (one write per node): each must still reach every node, in order.
    let (grants, grant_misses, extend_misses) = spread(kind).await;
    assert_eq!(grants, TASKS * PER_TASK);
    assert_eq!(
        grant_misses, 0,
        "{kind:?}: grants that reached only part of the healthy nodes"
    );
    assert_eq!(
        extend_misses, 0,
        "{kind:?}: extensions that reached only part of the healthy nodes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_grants_and_extensions_reach_every_node() {
    check(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_grants_and_extensions_reach_every_node() {
    check(Kind::Fenced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_grants_and_extensions_reach_every_node() {
    check(Kind::Reentrant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_resource_grants_and_extensions_reach_every_node() {
    check(Kind::Many).await;
}
