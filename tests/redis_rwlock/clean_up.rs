//! What read/write locks leave behind and keep: nothing on the nodes after
//! their release, a refused or abandoned writer's intent taken back, leases
//! extended, shutdown that loses no clean-up, `run_read` and `run_write`.
//! Also: bad input is a typed error.

use super::*;
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::RwLock;

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
    let a = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
    let b = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
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
    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .write(ttl)
        .await
        .unwrap();
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

    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await
        .unwrap();
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
    // Another writer's intent is not ours to clear. (The acquire returns
    // at its quorum: its call to node 5, which clears the intent where it
    // grants, is waited for before the other writer's intent is set, or it
    // would clear it.)
    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await
        .unwrap();
    settled(&redlock).await;
    let _: () = node5.set_ex(&intent, "another-writer", 10).await.unwrap();
    writer.release().await.unwrap();
    settled(&redlock).await;
    let kept: Option<String> = node5.get(&intent).await.unwrap();
    assert_eq!(kept.as_deref(), Some("another-writer"));
    let _: () = node5.del(&intent).await.unwrap();
}

/// A waiting writer that gives up takes its intent back, so readers are not
/// turned away for a writer no longer coming; a single refused
/// `RwLock::try_write` leaves it (documented: a caller retrying by hand is not
/// starved), which is also the control that the intent was there to take.
#[tokio::test]
async fn a_writer_that_gives_up_takes_its_intent_back() {
    let redlock = redlock().await;
    let resource = unique("rw-give-up");
    let ttl = Duration::from_secs(10);
    let intent = format!("{{{resource}}}:intent");
    let reader = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
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

    let refused = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await;
    assert!(
        matches!(refused, Err(LockError::Taken { .. })),
        "{refused:?}"
    );
    settled(&redlock).await;
    assert_eq!(marked(raw_all().await).await, 5, "a single try leaves it");
    for mut conn in raw_all().await {
        let _: () = conn.del(&intent).await.unwrap();
    }

    let wait = AcquireOptions::new().wait(Duration::from_millis(300));
    let gave_up = RwLock::new(&redlock, &resource)
        .unwrap()
        .write_with(ttl, &wait)
        .await;
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
    let other = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_read(ttl)
        .await
        .unwrap();
    other.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test]
async fn extend_keeps_a_reader_and_a_writer() {
    let redlock = redlock().await;
    let resource = unique("rw-extend");
    let mut reader = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(Duration::from_millis(500))
        .await
        .unwrap();
    reader.extend(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(reader.is_valid());
    assert!(
        RwLock::new(&redlock, &resource)
            .unwrap()
            .try_write(Duration::from_secs(1))
            .await
            .is_err(),
        "the extended reader still excludes writers"
    );
    reader.release().await.unwrap();
    let mut writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .write_with(
            Duration::from_millis(500),
            &AcquireOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    writer.extend(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        RwLock::new(&redlock, &resource)
            .unwrap()
            .try_read(Duration::from_secs(1))
            .await
            .is_err()
    );
    writer.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let redlock = redlock().await;
    assert_eq!(
        RwLock::new(&redlock, "").unwrap_err(),
        InputError::EmptyResource
    );
    assert!(matches!(
        RwLock::new(&redlock, "r")
            .unwrap()
            .try_write(Duration::ZERO)
            .await,
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
    let reader = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
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
                let wait = AcquireOptions::new().wait(Duration::from_secs(30));
                let doc = RwLock::new(&redlock, &resource).unwrap();
                let writer = doc.write_with(ttl, &wait);
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
            RwLock::new(&redlock, &resource)
                .unwrap()
                .run_read(ttl, |lease| async move {
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
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let written = RwLock::new(&redlock, &resource)
        .unwrap()
        .run_write_with(ttl, &wait, &LeaseOptions::new(), |lease| {
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
    let seen = RwLock::new(&redlock, &resource)
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!(
        (seen.readers_held(), seen.intent_nodes()),
        (0, 0),
        "{seen:?}"
    );
}
