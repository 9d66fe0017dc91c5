//! Read/write locks on the five real nodes: readers overlap, a writer never
//! overlaps anyone — healthy, with a frozen minority and under random
//! minority faults (all through test proxies, so the shared nodes are not
//! disturbed) — writers are not starved by a stream of readers, waiters
//! are woken on release, and nothing is left on the nodes.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use redis::AsyncCommands;
use redquorum::{InputError, Lock, LockError, LockOptions, Redlock, Retry};
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
                let wait = LockOptions::new().wait(Duration::from_secs(10));
                while Instant::now() < end {
                    let write = rand::rng().random_ratio(1, 4);
                    let lock = if write {
                        redlock.write_lock_with(&resource, ttl, &wait).await
                    } else {
                        redlock.read_lock_with(&resource, ttl, &wait).await
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
    let first = redlock.read_lock(&resource, ttl).await.unwrap();
    match redlock.try_write_lock(&resource, ttl).await {
        Err(LockError::Taken { .. }) => {}
        other => panic!("the writer got in past a reader: {other:?}"),
    }
    match redlock.try_read_lock(&resource, ttl).await {
        Err(LockError::Taken { .. }) => {}
        other => panic!("a new reader got in past the writer's intent: {other:?}"),
    }
    // Negative control: without the intent, readers come in again.
    let intent = format!("{{{resource}}}:intent");
    for mut conn in raw_all().await {
        let _: () = conn.del(&intent).await.unwrap();
    }
    let second = redlock.try_read_lock(&resource, ttl).await.unwrap();
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
                let wait = LockOptions::new().wait(Duration::from_secs(20));
                let mut held = redlock.read_lock_with(&resource, ttl, &wait).await.unwrap();
                let mut since = Instant::now();
                let mut grants = 1u32;
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    match redlock.try_read_lock(&resource, ttl).await {
                        Ok(next) => {
                            held.release().await.unwrap();
                            (held, since) = (next, Instant::now());
                            grants += 1;
                        }
                        Err(_) if since.elapsed() > Duration::from_millis(200) => {
                            held.release().await.unwrap();
                            held = redlock.read_lock_with(&resource, ttl, &wait).await.unwrap();
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
    let wait = LockOptions::new().wait(Duration::from_secs(15));
    let writer = redlock.write_lock_with(&resource, ttl, &wait).await;
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
    let wait = LockOptions::new().wait(Duration::from_secs(25));
    let mut conns = raw_all().await;

    // A writer waiting behind a reader.
    let reader = holder.read_lock(&resource, ttl).await.unwrap();
    let waiting = {
        let (waiter, resource, wait) = (waiter.clone(), resource.clone(), wait.clone());
        tokio::spawn(async move {
            let lock = waiter.write_lock_with(&resource, ttl, &wait).await;
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
            let lock = waiter.read_lock_with(&resource, ttl, &wait).await;
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
    let wait = LockOptions::new().wait(Duration::from_secs(20));
    let mut conns = raw_all().await;
    for (round, readers) in [6, 6, 64, 64, 1000].into_iter().enumerate() {
        let resource = unique("rw-wake-many");
        let writer_key = format!("{{{resource}}}:writer");
        let readers =
            futures::future::try_join_all((0..readers).map(|_| holder.read_lock(&resource, ttl)))
                .await
                .unwrap();
        let count = readers.len();
        let waiting = {
            let (waiter, resource, wait) = (waiter.clone(), resource.clone(), wait.clone());
            tokio::spawn(async move { waiter.write_lock_with(&resource, ttl, &wait).await })
        };
        wait_subscribed(&mut conns, &writer_key).await;
        let released = Instant::now();
        futures::future::try_join_all(readers.into_iter().map(Lock::release))
            .await
            .unwrap();
        let writer = waiting.await.unwrap();
        let after = released.elapsed();
        println!("round {round}: writer had the lock {after:?} after {count} readers released");
        // A liveness bound far above the few ms a wake-up takes and far below
        // the 30 s the readers' keys would live.
        assert!(
            after < Duration::from_secs(1),
            "writer woken {after:?} after {count} readers released"
        );
        writer.unwrap().release().await.unwrap();
    }
}

#[tokio::test]
async fn released_locks_leave_nothing_on_the_nodes() {
    let redlock = redlock().await;
    let resource = unique("rw-clean");
    let ttl = Duration::from_secs(10);
    let keys: Vec<String> = ["writer", "readers", "intent"]
        .iter()
        .map(|role| format!("{{{resource}}}:{role}"))
        .collect();
    let mut conns = raw_all().await;
    let a = redlock.read_lock(&resource, ttl).await.unwrap();
    let b = redlock.read_lock(&resource, ttl).await.unwrap();
    settled(&redlock).await;
    for conn in &mut conns {
        let readers: Vec<String> = conn.zrange(&keys[1], 0, -1).await.unwrap();
        assert_eq!(readers.len(), 2);
        let pttl: i64 = conn.pttl(&keys[1]).await.unwrap();
        assert!(pttl > 0 && pttl <= 10_001, "readers key PTTL {pttl}");
        // The key expires 1 ms after its latest reader, on the scores' clock
        // (a relative PEXPIRE could fall up to 1 ms short: a writer let in
        // while a reader still held). PEXPIRETIME: Redis 7, Valkey.
        let latest: Vec<(String, u64)> = conn.zrange_withscores(&keys[1], -1, -1).await.unwrap();
        let expires: u64 = redis::cmd("PEXPIRETIME")
            .arg(&keys[1])
            .query_async(conn)
            .await
            .unwrap();
        assert_eq!(
            expires,
            latest[0].1 + 1,
            "readers key expiry vs. its latest score"
        );
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    let writer = redlock.write_lock(&resource, ttl).await.unwrap();
    settled(&redlock).await;
    for conn in &mut conns {
        let holder: Option<String> = conn.get(&keys[0]).await.unwrap();
        assert_eq!(holder.as_deref(), Some(writer.token()));
    }
    writer.release().await.unwrap();
    // The release returned at its quorum; the last nodes get it just after.
    settled(&redlock).await;
    for conn in &mut conns {
        let left: usize = conn.exists(&keys).await.unwrap();
        assert_eq!(left, 0, "keys left behind");
    }
}

/// The bug: a writer that one node refused (a reader still stood there —
/// in CI, a reader's release not yet applied on the last node) marked its
/// intent there, got the lock from the other four, and released only the
/// writer key: the intent stayed on that node until its TTL, refusing
/// readers there. The release now clears the writer's own intent.
#[tokio::test]
async fn a_writer_refused_on_one_node_clears_its_intent_there_on_release() {
    let redlock = redlock().await;
    let resource = unique("rw-intent");
    let ttl = Duration::from_secs(10);
    let (readers, intent) = (
        format!("{{{resource}}}:readers"),
        format!("{{{resource}}}:intent"),
    );
    // A reader only node 5 knows of, live for 10 s on its clock.
    let mut node5 = raw(4).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut node5).await.unwrap();
    let until = secs * 1000 + micros / 1000 + 10_000;
    let _: () = node5.zadd(&readers, "straggler", until).await.unwrap();

    let writer = redlock.try_write_lock(&resource, ttl).await.unwrap();
    settled(&redlock).await;
    let marked: Option<String> = node5.get(&intent).await.unwrap();
    assert_eq!(
        marked.as_deref(),
        Some(writer.token()),
        "node 5 refused the writer"
    );
    let _: () = node5.zrem(&readers, "straggler").await.unwrap();

    writer.release().await.unwrap();
    settled(&redlock).await;
    let mut conns = raw_all().await;
    for (i, conn) in conns.iter_mut().enumerate() {
        let left: Vec<String> = conn.keys(format!("{{{resource}}}:*")).await.unwrap();
        assert!(left.is_empty(), "node {} kept {left:?}", i + 1);
    }
    // Another writer's intent is not ours to clear.
    let writer = redlock.try_write_lock(&resource, ttl).await.unwrap();
    let _: () = node5.set_ex(&intent, "another-writer", 10).await.unwrap();
    writer.release().await.unwrap();
    settled(&redlock).await;
    let kept: Option<String> = node5.get(&intent).await.unwrap();
    assert_eq!(kept.as_deref(), Some("another-writer"));
    let _: () = node5.del(&intent).await.unwrap();
}

/// A waiting writer that gives up takes its intent back, so readers are not
/// turned away for a writer no longer coming; a single refused
/// `try_write_lock` leaves it (documented: a caller retrying by hand is not
/// starved), which is also the control that the intent was there to take.
#[tokio::test]
async fn a_writer_that_gives_up_takes_its_intent_back() {
    let redlock = redlock().await;
    let resource = unique("rw-give-up");
    let ttl = Duration::from_secs(10);
    let intent = format!("{{{resource}}}:intent");
    let reader = redlock.read_lock(&resource, ttl).await.unwrap();
    let marked = |conns: Vec<redis::aio::MultiplexedConnection>| {
        let intent = intent.clone();
        async move {
            let mut n = 0;
            for mut conn in conns {
                let exists: bool = conn.exists(&intent).await.unwrap();
                n += usize::from(exists);
            }
            n
        }
    };

    let refused = redlock.try_write_lock(&resource, ttl).await;
    assert!(
        matches!(refused, Err(LockError::Taken { .. })),
        "{refused:?}"
    );
    settled(&redlock).await;
    assert_eq!(marked(raw_all().await).await, 5, "a single try leaves it");
    for mut conn in raw_all().await {
        let _: () = conn.del(&intent).await.unwrap();
    }

    let wait = LockOptions::new().wait(Duration::from_millis(300));
    let gave_up = redlock.write_lock_with(&resource, ttl, &wait).await;
    assert!(
        matches!(gave_up, Err(LockError::Timeout { .. })),
        "{gave_up:?}"
    );
    settled(&redlock).await;
    assert_eq!(
        marked(raw_all().await).await,
        0,
        "the intent outlived its writer"
    );
    let other = redlock.try_read_lock(&resource, ttl).await.unwrap();
    other.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test]
async fn extend_keeps_a_reader_and_a_writer() {
    let redlock = redlock().await;
    let resource = unique("rw-extend");
    let mut reader = redlock
        .read_lock(&resource, Duration::from_millis(500))
        .await
        .unwrap();
    reader.extend(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(reader.is_valid());
    assert!(
        redlock
            .try_write_lock(&resource, Duration::from_secs(1))
            .await
            .is_err(),
        "the extended reader still excludes writers"
    );
    reader.release().await.unwrap();
    let mut writer = redlock
        .write_lock_with(
            &resource,
            Duration::from_millis(500),
            &LockOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    writer.extend(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        redlock
            .try_read_lock(&resource, Duration::from_secs(1))
            .await
            .is_err()
    );
    writer.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let redlock = redlock().await;
    let ttl = Duration::from_secs(1);
    assert!(matches!(
        redlock.read_lock("", ttl).await,
        Err(LockError::Input(InputError::EmptyResource))
    ));
    assert!(matches!(
        redlock
            .write_lock_with("r", ttl, &LockOptions::new().fenced())
            .await,
        Err(LockError::Input(InputError::FencedReadWrite))
    ));
    assert!(matches!(
        redlock.try_write_lock("r", Duration::ZERO).await,
        Err(LockError::Input(_))
    ));
}

/// A program that ends right after a library call keeps that call's
/// clean-up: `shutdown` before the runtime goes lets a dropped waiting
/// writer's intent withdrawal and a dropped lock's release reach every node.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_before_the_runtime_ends_loses_no_clean_up() {
    let redlock = redlock().await;
    let resource = unique("rw-shutdown");
    let ttl = Duration::from_secs(10);
    let intent = format!("{{{resource}}}:intent");
    let reader = redlock.read_lock(&resource, ttl).await.unwrap();
    let plain = unique("shutdown-plain");
    {
        let (resource, plain) = (resource.clone(), plain.clone());
        // A whole program: its own runtime, ended right after the calls.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let redlock = support::patient().build().await.unwrap();
                let lock = redlock.lock(&plain, ttl).await.unwrap();
                drop(lock); // released in the background
                let wait = LockOptions::new().wait(Duration::from_secs(30));
                let writer = redlock.write_lock_with(&resource, ttl, &wait);
                // Dropped while it waits, its intent marked on every node.
                let _ = tokio::time::timeout(Duration::from_millis(300), writer).await;
                redlock.shutdown().await;
            });
        })
        .join()
        .unwrap();
    }
    let mut conns = raw_all().await;
    for (i, conn) in conns.iter_mut().enumerate() {
        let left: u32 = conn.exists(&[&intent, &lock_key(&plain)]).await.unwrap();
        assert_eq!(left, 0, "node {} kept a key after shutdown", i + 1);
    }
    reader.release().await.unwrap();
}

/// `run_read` and `run_write` keep their lease as `run` does: readers run
/// together, the writer alone after them, each lease extended while its
/// work runs (the work outlives the TTL here) and released at its end.
#[tokio::test(flavor = "multi_thread")]
async fn run_read_and_run_write_keep_their_leases() {
    let redlock = redlock().await;
    let resource = unique("rw-run");
    let ttl = Duration::from_millis(600);
    let inside = Arc::new(Mutex::new((0usize, 0usize))); // readers, writers
    let (both_in_tx, both_in) = tokio::sync::watch::channel(0usize);
    let both_in_tx = Arc::new(both_in_tx);
    let reader = |n: usize| {
        let (redlock, resource, inside, tx) = (
            redlock.clone(),
            resource.clone(),
            inside.clone(),
            both_in_tx.clone(),
        );
        tokio::spawn(async move {
            redlock
                .run_read(&resource, ttl, |lease| async move {
                    inside.lock().unwrap().0 += 1;
                    tx.send_modify(|k| *k += 1);
                    // Longer than the TTL: kept alive meanwhile.
                    tokio::time::sleep(Duration::from_millis(900)).await;
                    assert!(lease.is_valid(), "reader {n}'s lease lapsed");
                    assert_eq!(inside.lock().unwrap().1, 0, "a writer with a reader");
                    inside.lock().unwrap().0 -= 1;
                })
                .await
        })
    };
    let (a, b) = (reader(1), reader(2));
    let mut both_in = both_in;
    both_in.wait_for(|k| *k == 2).await.unwrap();
    let wait = LockOptions::new().wait(Duration::from_secs(10));
    let written = redlock
        .run_write_with(&resource, ttl, &wait, |lease| {
            let inside = inside.clone();
            async move {
                let now = *inside.lock().unwrap();
                assert_eq!(now, (0, 0), "the writer ran beside {now:?}");
                assert!(lease.is_valid());
                "written"
            }
        })
        .await
        .unwrap();
    assert_eq!(written, "written");
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    settled(&redlock).await;
    let seen = redlock.inspect_rw(&resource).await.unwrap();
    assert_eq!(
        (seen.readers_held(), seen.intent_nodes()),
        (0, 0),
        "{seen:?}"
    );
}
