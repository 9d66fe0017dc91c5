//! Read/write locks on the five real nodes: readers overlap, a writer never
//! overlaps anyone — healthy, with a frozen minority and under random
//! minority faults (all through test proxies, so the shared nodes are not
//! disturbed) — writers are not starved by a stream of readers, waiters
//! are woken on release, and nothing is left on the nodes.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod clean_up;
mod shutdown_races;
#[path = "../support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use redis::AsyncCommands;
use redquorum::AcquireOptions;
use redquorum::RwLock;
use redquorum::{InputError, Lock, LockError, Redlock, Retry};
use support::*;
use tokio::time::Instant;

/// Who holds a resource right now, counted while their locks are valid,
/// and what was seen.
#[derive(Debug, Default)]
struct Census {
    readers: usize,
    writers: usize,
    most_readers: usize,
    reads: usize,
    writes: usize,
    /// Grants that met a holder they must exclude.
    overlaps: usize,
}

impl Census {
    fn enter(&mut self, write: bool) {
        if self.writers > 0 || (write && self.readers > 0) {
            self.overlaps += 1;
        }
        if write {
            self.writers += 1;
            self.writes += 1;
        } else {
            self.readers += 1;
            self.reads += 1;
            self.most_readers = self.most_readers.max(self.readers);
        }
    }

    fn leave(&mut self, write: bool) {
        if write {
            self.writers -= 1;
        } else {
            self.readers -= 1;
        }
    }
}

/// Eight tasks, each taking read locks (three times in four) or write locks
/// of `ttl` for `run`, waiting up to 10 s for each and holding it a few
/// milliseconds.
async fn contend(redlock: &Redlock, resource: &str, ttl: Duration, run: Duration) -> Census {
    let census = Arc::new(Mutex::new(Census::default()));
    let end = Instant::now() + run;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (redlock, census, resource) =
                (redlock.clone(), census.clone(), resource.to_owned());
            tokio::spawn(async move {
                let wait = AcquireOptions::new().wait(Duration::from_secs(10));
                while Instant::now() < end {
                    let write = rand::rng().random_ratio(1, 4);
                    let lock = if write {
                        RwLock::new(&redlock, &resource)
                            .unwrap()
                            .write_with(ttl, &wait)
                            .await
                    } else {
                        RwLock::new(&redlock, &resource)
                            .unwrap()
                            .read_with(ttl, &wait)
                            .await
                    }
                    .expect("a lock within 10 s");
                    census.lock().unwrap().enter(write);
                    let hold = rand::rng().random_range(2..=15);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    // Counted only while valid: the promise is about valid
                    // locks.
                    assert!(lock.is_valid(), "held past its validity");
                    census.lock().unwrap().leave(write);
                    // Under faults a release may miss its quorum (the keys then
                    // expire at their TTL): not what is checked here.
                    let _ = lock.release().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    Arc::into_inner(census).unwrap().into_inner().unwrap()
}

fn check(census: &Census, what: &str) {
    println!("{what}: {census:?}");
    assert_eq!(
        census.overlaps, 0,
        "{what}: a writer overlapped: {census:?}"
    );
    assert!(census.most_readers >= 2, "{what}: readers never overlapped");
    assert!(census.writes > 0 && census.reads > 0, "{what}: {census:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_overlaps_nobody() {
    let redlock = redlock().await;
    let census = contend(
        &redlock,
        &unique("rw"),
        Duration::from_secs(5),
        Duration::from_secs(2),
    )
    .await;
    check(&census, "healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_minority_changes_nothing() {
    let (proxies, redlock) = proxied(Duration::from_millis(200)).await;
    // Two of five links held: requests pile up unanswered, as to a
    // SIGSTOPped server.
    proxies[1].set_cut(true);
    proxies[3].set_cut(true);
    let census = contend(
        &redlock,
        &unique("rw-frozen"),
        Duration::from_secs(5),
        Duration::from_secs(2),
    )
    .await;
    check(&census, "nodes 2 and 4 frozen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_minority_faults_change_nothing() {
    let (proxies, redlock) = proxied(Duration::from_millis(100)).await;
    let (census, faults) = under_chaos(
        &proxies,
        contend(
            &redlock,
            &unique("rw-chaos"),
            // Short: a lock whose release met a closed link lives on that
            // node until its TTL.
            Duration::from_secs(1),
            Duration::from_secs(3),
        ),
    )
    .await;
    println!("{faults} link faults injected");
    assert!(faults > 0);
    check(&census, "random minority faults");
}

/// A writer refused by readers marks its intent; new readers are then
/// refused while the readers in place still hold. The negative control
/// deletes the intent, and a new reader gets in again: the intent is what
/// holds readers off. (A single try leaves its intent; a writer that waits
/// and gives up takes it back, see below.)
#[tokio::test]
async fn a_waiting_writer_holds_new_readers_off() {
    let redlock = redlock().await;
    let resource = unique("rw-intent");
    let ttl = Duration::from_secs(10);
    let first = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
    match RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await
    {
        Err(LockError::Taken { .. }) => {}
        other => panic!("the writer got in past a reader: {other:?}"),
    }
    match RwLock::new(&redlock, &resource)
        .unwrap()
        .try_read(ttl)
        .await
    {
        Err(LockError::Taken { .. }) => {}
        other => panic!("a new reader got in past the writer's intent: {other:?}"),
    }
    // Negative control: without the intent, readers come in again.
    let intent = format!("{{{resource}}}:intent");
    for mut conn in raw_all().await {
        let _: () = conn.del(&intent).await.unwrap();
    }
    let second = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_read(ttl)
        .await
        .unwrap();
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// Six readers hand over hand (each takes a new read lock before it gives
/// its old one back, so some reader always holds) keep the resource read
/// without a gap. A writer waiting behind them still gets in: its intent
/// refuses their new locks, and the old ones are given back within 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_of_readers_does_not_starve_a_writer() {
    let redlock = redlock().await;
    let resource = unique("rw-stream");
    let ttl = Duration::from_secs(5);
    let stop = Arc::new(AtomicBool::new(false));
    // The writer asks once every reader has handed over at least once: the
    // stream is running.
    let (handed_over, mut streaming) = tokio::sync::watch::channel(0usize);
    let handed_over = Arc::new(handed_over);
    let readers: Vec<_> = (0..6)
        .map(|i| {
            let (redlock, resource, stop) = (redlock.clone(), resource.clone(), stop.clone());
            let handed_over = handed_over.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10 * i)).await;
                let wait = AcquireOptions::new().wait(Duration::from_secs(20));
                let mut held = RwLock::new(&redlock, &resource)
                    .unwrap()
                    .read_with(ttl, &wait)
                    .await
                    .unwrap();
                let mut since = Instant::now();
                let mut grants = 1u32;
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    match RwLock::new(&redlock, &resource)
                        .unwrap()
                        .try_read(ttl)
                        .await
                    {
                        Ok(next) => {
                            held.release().await.unwrap();
                            (held, since) = (next, Instant::now());
                            grants += 1;
                        }
                        Err(_) if since.elapsed() > Duration::from_millis(200) => {
                            held.release().await.unwrap();
                            held = RwLock::new(&redlock, &resource)
                                .unwrap()
                                .read_with(ttl, &wait)
                                .await
                                .unwrap();
                            since = Instant::now();
                            grants += 1;
                        }
                        Err(_) => continue,
                    }
                    if grants == 2 {
                        handed_over.send_modify(|n| *n += 1);
                    }
                }
                held.release().await.unwrap();
                grants
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(10), streaming.wait_for(|n| *n == 6))
        .await
        .expect("the readers never got streaming")
        .unwrap();
    let started = Instant::now();
    let wait = AcquireOptions::new().wait(Duration::from_secs(15));
    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .write_with(ttl, &wait)
        .await;
    let waited = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut grants = 0;
    for r in readers {
        grants += r.await.unwrap();
    }
    println!("the writer waited {waited:?} behind a stream of {grants} read grants");
    let writer = writer.expect("the writer starved");
    writer.release().await.unwrap();
}

/// A client that waits for a lock but polls only every 30 s: a prompt
/// grant can only come from a release notification.
async fn slow_poller() -> Redlock {
    patient()
        .retry(Retry::new(3, Duration::from_secs(30)))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn waiters_are_woken_by_a_release() {
    let holder = redlock().await;
    let waiter = slow_poller().await;
    let resource = unique("rw-wake");
    let writer_key = format!("{{{resource}}}:writer");
    let ttl = Duration::from_secs(30);
    let wait = AcquireOptions::new().wait(Duration::from_secs(25));
    let mut conns = raw_all().await;

    // A writer waiting behind a reader.
    let reader = RwLock::new(&holder, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
    let waiting = {
        let (waiter, resource, wait) = (waiter.clone(), resource.clone(), wait.clone());
        tokio::spawn(async move {
            let lock = RwLock::new(&waiter, &resource)
                .unwrap()
                .write_with(ttl, &wait)
                .await;
            (Instant::now(), lock)
        })
    };
    wait_subscribed(&mut conns, &writer_key).await;
    let released = Instant::now();
    reader.release().await.unwrap();
    let (got, writer) = waiting.await.unwrap();
    let after = got - released;
    println!("writer woken {after:?} after the reader's release");
    assert!(
        after < Duration::from_secs(10),
        "writer woken {after:?} after"
    );

    // A reader waiting behind that writer.
    let waiting = {
        let (waiter, resource) = (waiter.clone(), resource.clone());
        tokio::spawn(async move {
            let lock = RwLock::new(&waiter, &resource)
                .unwrap()
                .read_with(ttl, &wait)
                .await;
            (Instant::now(), lock)
        })
    };
    wait_subscribed(&mut conns, &writer_key).await;
    let released = Instant::now();
    writer.unwrap().release().await.unwrap();
    let (got, reader) = waiting.await.unwrap();
    let after = got - released;
    println!("reader woken {after:?} after the writer's release");
    assert!(
        after < Duration::from_secs(10),
        "reader woken {after:?} after"
    );
    reader.unwrap().release().await.unwrap();
}

/// Readers that release together: their wake-ups reach the nodes
/// interleaved and in bursts per node, and the waiting writer must still
/// hear them (not sleep out the readers' 30 s TTL), however many they are.
#[tokio::test(flavor = "multi_thread")]
async fn readers_releasing_together_wake_the_writer() {
    let holder = redlock().await;
    let waiter = slow_poller().await;
    let ttl = Duration::from_secs(30);
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let mut conns = raw_all().await;
    for (round, readers) in [6, 6, 64, 64, 1000].into_iter().enumerate() {
        let resource = unique("rw-wake-many");
        let writer_key = format!("{{{resource}}}:writer");
        let doc = RwLock::new(&holder, &resource).unwrap();
        let readers = futures::future::try_join_all((0..readers).map(|_| doc.read(ttl)))
            .await
            .unwrap();
        let count = readers.len();
        let waiting = {
            let (waiter, resource, wait) = (waiter.clone(), resource.clone(), wait.clone());
            tokio::spawn(async move {
                RwLock::new(&waiter, &resource)
                    .unwrap()
                    .write_with(ttl, &wait)
                    .await
            })
        };
        wait_subscribed(&mut conns, &writer_key).await;
        let released = Instant::now();
        futures::future::try_join_all(readers.into_iter().map(Lock::release))
            .await
            .unwrap();
        let writer = waiting.await.unwrap();
        let after = released.elapsed();
        println!("round {round}: writer had the lock {after:?} after {count} readers released");
        // A liveness bound far above the few ms a wake-up takes (and the
        // readers' own releases, timed with it) and far below the 30 s the
        // readers' keys would live.
        assert!(
            after < Duration::from_secs(5),
            "writer woken {after:?} after {count} readers released"
        );
        writer.unwrap().release().await.unwrap();
    }
}
