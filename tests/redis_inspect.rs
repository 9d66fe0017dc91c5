//! Inspection on the five real nodes: a held, a free and a contested
//! resource get the right verdict, for every kind of lock.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::inspect::{Holder, TimeLeft};
use redquorum::{Semaphore, verdict::Verdict};
use support::*;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_held_lock_is_held_by_its_token_with_its_time_and_fence() {
    let redlock = redlock().await;
    let resource = unique("inspect-held");
    let lock = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    settled(&redlock).await;
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(
        seen.verdict(),
        &Verdict::Held {
            holder: Holder::Token(lock.token().to_owned()),
            nodes: 5
        }
    );
    // The grant's write-back stored its fence on the nodes that granted by
    // the decision, a quorum at least, and moved their counters up to it.
    // A node whose yes came later drew its own counter (floored at its
    // clock) and carries no fence with its key: docs/fencing.md.
    assert_eq!(seen.fence(), lock.fence());
    let mut written_back = 0;
    for node in seen.nodes() {
        let holding = node.read.as_ref().unwrap();
        if let Some(granted) = holding.granted_fence {
            assert_eq!(Some(granted), lock.fence(), "{node:?}");
            assert!(holding.fence >= lock.fence(), "{node:?}");
            written_back += 1;
        }
        let Some(TimeLeft::For(left)) = holding.time_left else {
            panic!("{node:?}")
        };
        assert!(
            left <= TTL && left > TTL - Duration::from_secs(5),
            "{left:?}"
        );
    }
    assert!(written_back >= 3, "{:?}", seen.nodes());
    assert!(matches!(seen.time_left(), Some(TimeLeft::For(left)) if left <= TTL));
    lock.release().await.unwrap();
    settled(&redlock).await;
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(seen.verdict(), &Verdict::Free { nodes: 5 });
    assert_eq!(seen.time_left(), None);
}

#[tokio::test]
async fn a_contested_resource_is_neither_held_nor_free() {
    let redlock = redlock().await;
    let resource = unique("inspect-contested");
    let key = lock_key(&resource);
    // Two holders on two nodes each (leftovers of a split vote), one free.
    let mut conns = raw_all().await;
    for (i, conn) in conns.iter_mut().enumerate().take(4) {
        let token = if i < 2 { "a" } else { "b" };
        let _: () = conn.pset_ex(&key, token, 30_000).await.unwrap();
    }
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(seen.verdict(), &Verdict::NotHeld { free: 1 });
    for conn in &mut conns {
        let _: () = conn.del(&key).await.unwrap();
    }
}

#[tokio::test]
async fn reentrant_read_write_and_permits_are_inspected() {
    let redlock = redlock().await;
    let resource = unique("inspect-kinds");
    let outer = ReentrantLock::new(&redlock, &resource, "worker-7")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    let inner = ReentrantLock::new(&redlock, &resource, "worker-7")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    settled(&redlock).await;
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(
        seen.verdict(),
        &Verdict::Held {
            holder: Holder::Owner("worker-7".into()),
            nodes: 5
        }
    );
    assert!(
        seen.nodes()
            .iter()
            .all(|n| n.read.as_ref().unwrap().holds == Some(2))
    );
    inner.release().await.unwrap();
    outer.release().await.unwrap();

    let rw = unique("inspect-rw");
    let a = RwLock::new(&redlock, &rw).unwrap().read(TTL).await.unwrap();
    let b = RwLock::new(&redlock, &rw).unwrap().read(TTL).await.unwrap();
    settled(&redlock).await;
    let seen = RwLock::new(&redlock, &rw).unwrap().inspect().await.unwrap();
    assert_eq!(seen.readers_held(), 2);
    assert!(!seen.readers_uncertain());
    assert_eq!(seen.writer().verdict(), &Verdict::Free { nodes: 5 });
    assert_eq!(seen.intent_nodes(), 0);
    // A writer refused by them marks its intent.
    assert!(
        RwLock::new(&redlock, &rw)
            .unwrap()
            .try_write(TTL)
            .await
            .is_err()
    );
    settled(&redlock).await;
    assert_eq!(
        RwLock::new(&redlock, &rw)
            .unwrap()
            .inspect()
            .await
            .unwrap()
            .intent_nodes(),
        5
    );
    a.release().await.unwrap();
    b.release().await.unwrap();
    let writer = RwLock::new(&redlock, &rw)
        .unwrap()
        .write(TTL)
        .await
        .unwrap();
    settled(&redlock).await;
    let seen = RwLock::new(&redlock, &rw).unwrap().inspect().await.unwrap();
    assert_eq!(
        seen.writer().verdict(),
        &Verdict::Held {
            holder: Holder::Token(writer.token().into()),
            nodes: 5
        }
    );
    assert_eq!((seen.readers_held(), seen.intent_nodes()), (0, 0));
    writer.release().await.unwrap();

    let semaphore = Semaphore::new(&redlock, &unique("inspect-permits"), 3).unwrap();
    let one = semaphore.try_acquire(TTL).await.unwrap();
    let two = semaphore.try_acquire(TTL).await.unwrap();
    settled(&redlock).await;
    let seen = semaphore.inspect().await.unwrap();
    assert_eq!((seen.held(), seen.slots().len()), (2, 3));
    let slot = &seen.slots()[one.slot() as usize];
    assert_eq!(
        slot.verdict(),
        &Verdict::Held {
            holder: Holder::Token(one.lock().token().into()),
            nodes: 5
        }
    );
    one.release().await.unwrap();
    two.release().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_minority_leaves_the_verdict_and_a_majority_makes_it_unknown() {
    let (proxies, redlock) = proxied(Duration::from_millis(200)).await;
    let resource = unique("inspect-unreachable");
    let lock = redlock.lock(&resource, TTL).await.unwrap();
    settled(&redlock).await;
    proxies[0].set_cut(true);
    let seen = redlock.inspect(&resource).await.unwrap();
    assert!(
        matches!(seen.verdict(), Verdict::Held { nodes: 4, .. }),
        "{seen:?}"
    );
    assert!(seen.nodes()[0].read.is_err());
    proxies[1].set_cut(true);
    proxies[2].set_cut(true);
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(seen.verdict(), &Verdict::Unknown { reachable: 2 });
    for proxy in &proxies {
        proxy.set_cut(false);
    }
    drop(lock);
}

/// `list` finds what is held on a quorum by name pattern — a plain lock
/// with its label, a fenced one with its fence, a reentrant owner, a
/// writer, readers, a semaphore's permits — and not what was released;
/// its limit is a bound, and a listing cut by it says so.
#[tokio::test]
async fn list_finds_every_kind_held_and_nothing_released() {
    use redquorum::inspect::ListedKind;
    let redlock = redlock().await;
    let base = unique("list");
    let ttl = Duration::from_secs(30);
    let name = |s: &str| format!("{base}:{s}");
    let labeled = redquorum::LockOptions::new().label("nightly");
    let plain = redlock
        .lock_with(&name("plain"), ttl, &labeled)
        .await
        .unwrap();
    let fenced = redquorum::LockOptions::new().fenced();
    let fenced = redlock
        .lock_with(&name("fenced"), ttl, &fenced)
        .await
        .unwrap();
    let reentrant = ReentrantLock::new(&redlock, &name("reentrant"), "worker-1")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let writer = RwLock::new(&redlock, &name("doc"))
        .unwrap()
        .write(ttl)
        .await
        .unwrap();
    let reader = RwLock::new(&redlock, &name("catalog"))
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
    let permit = Semaphore::new(&redlock, &name("api"), 3)
        .unwrap()
        .acquire(ttl)
        .await
        .unwrap();
    let released = redlock.lock(&name("gone"), ttl).await.unwrap();
    released.release().await.unwrap();

    let listing = redlock.list(&format!("{base}:*"), 100).await.unwrap();
    assert!(
        listing.complete && listing.unscanned.is_empty(),
        "{listing:?}"
    );
    let kinds: Vec<(ListedKind, String)> = listing
        .held
        .iter()
        .map(|l| (l.kind, l.resource.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ListedKind::Semaphore, name("api")),
            (ListedKind::Readers, name("catalog")),
            (ListedKind::Writer, name("doc")),
            (ListedKind::Fenced, name("fenced")),
            (ListedKind::Lock, name("plain")),
            (ListedKind::Reentrant, name("reentrant")),
        ]
    );
    let plain_entry = &listing.held[4];
    assert_eq!(plain_entry.label.as_deref(), Some("nightly"));
    assert_eq!(plain_entry.holder.as_deref(), Some(&plain.token()[..8]));
    assert_eq!(plain_entry.nodes, 5);
    assert!(matches!(plain_entry.time_left, Some(TimeLeft::For(d)) if d <= ttl));
    assert_eq!(listing.held[3].fence, fenced.fence());
    assert_eq!(listing.held[5].holder.as_deref(), Some("worker-1"));

    let cut = redlock.list(&format!("{base}:*"), 2).await.unwrap();
    assert_eq!(cut.held.len(), 2);
    assert!(!cut.complete, "a listing cut by its limit says so");
    assert!(redlock.list("", 10).await.is_err());
    assert!(redlock.list("*", 0).await.is_err());

    for lock in [plain, fenced, writer, reader] {
        lock.release().await.unwrap();
    }
    reentrant.release().await.unwrap();
    permit.release().await.unwrap();
    let after = redlock.list(&format!("{base}:*"), 100).await.unwrap();
    assert_eq!(after.held, [], "released, yet listed");
}
