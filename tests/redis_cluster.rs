//! Redis Cluster members: three members, each a three-master cluster of local
//! `redis-server --cluster-enabled yes` processes (`scripts/cluster-nodes`,
//! started by `scripts/test`). Every lock kind works; resources that hash to
//! different slots are refused before anything is sent; one frozen master of
//! one member costs a round nothing; a slot migration during a run loses no
//! lock; one cluster named twice is one member.
//!
//! Needs `REDQUORUM_CLUSTER_NODES` (the three seed URLs) and
//! `REDQUORUM_SCRIPTS_CLUSTER` (the path of `scripts/cluster-nodes`); fails
//! loudly without them.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::Value;
use redquorum::LeaseOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::{ConfigError, InputError, LockError, LockOptions, Redlock, Retry, Semaphore};
use support::cluster::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_works_on_cluster_members() {
    let _serial = SERIAL.lock().await;
    let redlock = members().await;
    assert_eq!(redlock.nodes().quorum(), 2);
    let ttl = Duration::from_secs(10);

    // Plain: granted on every member, refused to a rival, gone on release.
    // Resources spread over many slots, so every master of every member is
    // used.
    for i in 0..12 {
        let resource = support::unique(&format!("cluster-plain-{i}"));
        let key = support::lock_key(&resource);
        let lock = redlock.try_lock(&resource, ttl).await.unwrap();
        // The grant returns at a quorum of members; the third follows.
        eventually(&format!("{resource} held on every member"), || async {
            members_holding(&key).await == 3
        })
        .await;
        assert!(matches!(
            redlock.try_lock(&resource, ttl).await,
            Err(LockError::Taken { .. })
        ));
        lock.release().await.unwrap();
        // The release returns at a quorum of members; the third follows.
        eventually(&format!("{resource} released on every member"), || async {
            members_holding(&key).await == 0
        })
        .await;
    }

    // Extend.
    let resource = support::unique("cluster-extend");
    let mut lock = redlock.try_lock(&resource, ttl).await.unwrap();
    lock.extend(Duration::from_secs(20)).await.unwrap();
    assert!(lock.remaining() > Duration::from_secs(10));
    lock.release().await.unwrap();

    // Fenced: the lock key and the counter share a slot.
    let resource = support::unique("cluster-fenced");
    let first = redlock
        .lock_with(&resource, ttl, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let a = first.fence().unwrap();
    first.release().await.unwrap();
    let second = redlock
        .lock_with(&resource, ttl, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    assert!(second.fence().unwrap() > a);
    second.release().await.unwrap();

    // Reentrant.
    let resource = support::unique("cluster-reentrant");
    let outer = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let inner = ReentrantLock::new(&redlock, &resource, "me")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    assert!(matches!(
        ReentrantLock::new(&redlock, &resource, "other")
            .unwrap()
            .lock(ttl)
            .await,
        Err(LockError::Taken { .. })
    ));
    inner.release().await.unwrap();
    assert_eq!(members_holding(&support::lock_key(&resource)).await, 3);
    outer.release().await.unwrap();
    assert_eq!(members_holding(&support::lock_key(&resource)).await, 0);

    // Several resources under one hash tag: one slot, all or nothing.
    let tag = support::unique("acct");
    let a = format!("{{{tag}}}:1");
    let b = format!("{{{tag}}}:2");
    let both = redlock.lock_many(&[&a, &b], ttl).await.unwrap();
    assert!(matches!(
        redlock.lock_many(&[&b], ttl).await,
        Err(LockError::Taken { .. })
    ));
    both.release().await.unwrap();

    // Read/write: three keys under the resource's hash tag, one slot.
    let resource = support::unique("cluster-rw");
    let readers_key = format!("{{{resource}}}:readers");
    let a = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(ttl)
        .await
        .unwrap();
    let b = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_read(ttl)
        .await
        .unwrap();
    eventually("both readers on every member", || async {
        let mut on = 0;
        for cluster in 1..=3 {
            let slot = keyslot(&readers_key).await;
            let port = port(cluster, owner(cluster, slot).await);
            on += usize::from(query(port, &["ZCARD", &readers_key]).await == Value::Int(2));
        }
        on == 3
    })
    .await;
    assert!(matches!(
        RwLock::new(&redlock, &resource)
            .unwrap()
            .try_write(ttl)
            .await,
        Err(LockError::Taken { .. })
    ));
    a.release().await.unwrap();
    b.release().await.unwrap();
    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await
        .unwrap();
    assert!(matches!(
        RwLock::new(&redlock, &resource)
            .unwrap()
            .try_read(ttl)
            .await,
        Err(LockError::Taken { .. })
    ));
    writer.release().await.unwrap();

    // A semaphore: its slots are plain locks, each in its own slot.
    let name = support::unique("cluster-permits");
    let semaphore = Semaphore::new(&redlock, &name, 2).unwrap();
    let p1 = semaphore.try_acquire(ttl).await.unwrap();
    let p2 = semaphore.try_acquire(ttl).await.unwrap();
    assert!(matches!(
        semaphore.try_acquire(ttl).await,
        Err(LockError::Taken { .. })
    ));
    p1.release().await.unwrap();
    p2.release().await.unwrap();

    // Resources in different slots: refused before anything is sent.
    let (x, y) = (support::unique("cross-x"), support::unique("cross-y"));
    match redlock.lock_many(&[&x, &y], ttl).await {
        Err(LockError::Input(InputError::CrossSlot { resources })) => {
            assert_eq!(resources, [x.clone(), y.clone()]);
        }
        other => panic!("expected CrossSlot, got {other:?}"),
    }
    assert_eq!(members_holding(&support::lock_key(&x)).await, 0);

    // A release wakes a waiter (pub/sub through each cluster's seed): its
    // pauses between rounds are drawn up to 10 minutes, so only a wake-up
    // lets it in within seconds.
    let resource = support::unique("cluster-wake");
    let long = Duration::from_secs(600);
    // The longest TTL a lock may have (Builder::max_ttl's default): far
    // longer than the seconds a wake-up takes.
    let held = redlock
        .try_lock(&resource, Duration::from_secs(60))
        .await
        .unwrap();
    let waiter = Redlock::builder()
        .nodes(urls())
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::new(3, long))
        .require_quorum(true)
        .build()
        .await
        .unwrap();
    let waiting = {
        let resource = resource.clone();
        tokio::spawn(async move {
            waiter
                .lock_with(&resource, ttl, &LockOptions::new().wait(long))
                .await
        })
    };
    // Once refused, the waiter listens: wait until a quorum of members
    // count its shard subscription where the key's slot is served.
    let channel = support::lock_key(&resource);
    eventually("the waiter subscribes on a quorum of members", || async {
        members_listening(&channel).await >= 2
    })
    .await;
    held.release().await.unwrap();
    let lock = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not woken within 10 s")
        .unwrap()
        .unwrap();
    lock.release().await.unwrap();
}

/// Thaws a frozen master even when the test fails.
struct Frozen(u16, u16);

impl Drop for Frozen {
    fn drop(&mut self) {
        script(&["thaw", &self.0.to_string(), &self.1.to_string()]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_of_one_member_costs_a_round_nothing() {
    let _serial = SERIAL.lock().await;
    let redlock = members().await;
    let ttl = Duration::from_secs(10);
    script(&["freeze", "1", "1"]);
    let _thaw = Frozen(1, 1);
    let mut on_frozen = 0;
    for i in 0..24 {
        let resource = support::unique(&format!("cluster-frozen-{i}"));
        let key = support::lock_key(&resource);
        // Granted by the other members (Retry::none: one round).
        let lock = redlock.try_lock(&resource, ttl).await.unwrap();
        // Member 1 still takes the locks whose slot a healthy master serves.
        match owner_asking(1, 2, keyslot(&key).await).await {
            Some(1) => on_frozen += 1,
            Some(master) => {
                let conn = connect(port(1, master)).await;
                eventually(&format!("{resource} on member 1"), || {
                    let mut conn = conn.clone();
                    let key = key.clone();
                    async move {
                        let exists: i64 = redis::cmd("EXISTS")
                            .arg(&key)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        exists == 1
                    }
                })
                .await;
            }
            None => panic!("no master serves {key}"),
        }
        // A grant returns at its quorum (two members): the third's write
        // may still be on its way.
        for member in [2, 3] {
            eventually(&format!("{resource} on member {member}"), || async {
                copies(member, &key).await == 1
            })
            .await;
        }
        lock.release().await.unwrap();
    }
    assert!(on_frozen > 0, "no resource hashed to the frozen master");
    assert!(on_frozen < 24, "every resource hashed to the frozen master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_during_a_run_loses_no_lock() {
    let _serial = SERIAL.lock().await;
    let redlock = members().await;
    let rival = members().await;
    let resource = support::unique("cluster-migrate");
    let key = support::lock_key(&resource);
    let slot = keyslot(&key).await;
    let from = owner(1, slot).await;
    let to = from % 3 + 1;
    let id = |master| async move { text(&query(port(1, master), &["CLUSTER", "MYID"]).await) };
    let (from_id, to_id) = (id(from).await, id(to).await);

    let (migrated_tx, migrated_rx) = tokio::sync::oneshot::channel::<()>();
    let (lease_tx, lease_rx) = tokio::sync::oneshot::channel();
    let ttl = Duration::from_secs(1);
    let options = LeaseOptions::new().extend_every(Duration::from_millis(200));
    let run = {
        let redlock = redlock.clone();
        let resource = resource.clone();
        tokio::spawn(async move {
            redlock
                .run_with(
                    &resource,
                    ttl,
                    &LockOptions::new(),
                    &options,
                    |lease| async move {
                        let _ = lease_tx.send(lease.clone());
                        let _ = migrated_rx.await;
                        lease.is_valid()
                    },
                )
                .await
        })
    };
    let refused = |rival: Redlock, resource: String| async move {
        match rival.try_lock(&resource, ttl).await {
            Err(LockError::Taken { .. }) => {}
            other => panic!("the rival was not refused: {other:?}"),
        }
    };
    // Held, on every member, before anything moves.
    let lease = lease_rx.await.expect("the run took the lease");
    eventually("every member holds the key", || async {
        members_holding(&key).await == 3
    })
    .await;
    refused(rival.clone(), resource.clone()).await;

    // The slot migrates, each step outliving two extensions (every 200 ms
    // against a 1 s TTL): while the key is still on `from`, after it
    // moved but before the slot did (`from` answers ASK), and after (the
    // client's map is stale: MOVED).
    let slot_s = slot.to_string();
    query(
        port(1, to),
        &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id],
    )
    .await;
    query(
        port(1, from),
        &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id],
    )
    .await;
    extended_twice(&lease).await;
    refused(rival.clone(), resource.clone()).await;
    let to_port = port(1, to).to_string();
    query(
        port(1, from),
        &[
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "KEYS",
            &key,
        ],
    )
    .await;
    extended_twice(&lease).await;
    refused(rival.clone(), resource.clone()).await;
    for master in 1..=3 {
        query(
            port(1, master),
            &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id],
        )
        .await;
    }
    extended_twice(&lease).await;
    refused(rival.clone(), resource.clone()).await;
    assert_eq!(owner(1, slot).await, to);
    assert_eq!(
        copies(1, &key).await,
        1,
        "the key lives on the new master only"
    );

    migrated_tx.send(()).unwrap();
    let still_valid = run
        .await
        .unwrap()
        .expect("the lease was kept through the migration");
    assert!(still_valid);
    // The release returns at a quorum of members; the third follows.
    eventually("released everywhere", || async {
        members_holding(&key).await == 0
    })
    .await;
    // And the slot is usable afterwards.
    let lock = rival.try_lock(&resource, ttl).await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_named_twice_is_one_member() {
    let _serial = SERIAL.lock().await;
    let urls = urls();
    let built = Redlock::builder()
        .nodes([
            urls[0].clone(),
            urls[0].replace("7301", "7302"),
            urls[1].clone(),
        ])
        .node_timeout(Duration::from_secs(1))
        .build()
        .await;
    assert!(
        matches!(built, Err(ConfigError::SameServer { .. })),
        "{built:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_each_cluster() {
    let _serial = SERIAL.lock().await;
    let redlock = members().await;
    let health = redlock.nodes().probe(Duration::from_secs(2)).await;
    assert_eq!(health.len(), 3);
    for member in &health {
        assert!(member.is_reachable(), "{member:?}");
        let server = member.server.as_deref().unwrap_or_default();
        assert!(server.contains("cluster of 3 masters"), "{server}");
        assert!(
            member.node.starts_with("redis+cluster://"),
            "{}",
            member.node
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_named_as_a_plain_master_says_so() {
    let _serial = SERIAL.lock().await;
    // Three cluster masters named redis://: each answers MOVED for the slots
    // it does not serve, and the vote says what to write instead.
    let redlock = Redlock::builder()
        .nodes((1..=3).map(|m| format!("redis://127.0.0.1:{}", port(1, m))))
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .build()
        .await
        .unwrap();
    let resource = support::unique("plain-named");
    match redlock.try_lock(&resource, Duration::from_secs(5)).await {
        Err(LockError::Unavailable { votes }) => {
            let said = format!("{votes:?}");
            assert!(said.contains("redis+cluster://"), "{said}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_a_member_like_any_other() {
    let _serial = SERIAL.lock().await;
    let dir =
        std::env::var("REDQUORUM_TLS_DIR").expect("REDQUORUM_TLS_DIR (scripts/tls-nodes dir)");
    let read = |name: &str| std::fs::read(format!("{dir}/{name}")).unwrap();
    let tls = script(&["tls-url"]);
    assert!(tls.starts_with("rediss+cluster://"));
    // The TLS cluster alone: every grant is its vote.
    let redlock = Redlock::builder()
        .nodes([tls])
        .tls_ca(read("ca.crt"))
        .tls_client_cert(read("client.crt"), read("client.key"))
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .require_quorum(true)
        .build()
        .await
        .expect("the TLS cluster");
    let health = redlock.nodes().probe(Duration::from_secs(2)).await;
    assert!(health[0].is_reachable(), "{:?}", health[0]);
    assert!(
        health[0]
            .server
            .as_deref()
            .unwrap_or_default()
            .contains("cluster of 3 masters"),
        "{:?}",
        health[0]
    );
    let ttl = Duration::from_secs(10);
    for i in 0..6 {
        let resource = support::unique(&format!("tls-cluster-{i}"));
        let lock = redlock
            .lock_with(&resource, ttl, &redquorum::LockOptions::new().fenced())
            .await
            .unwrap();
        assert!(lock.fence().is_some());
        assert!(matches!(
            redlock.try_lock(&resource, ttl).await,
            Err(LockError::Taken { .. })
        ));
        lock.release().await.unwrap();
        let again = ReentrantLock::new(&redlock, &resource, "me")
            .unwrap()
            .lock(ttl)
            .await
            .unwrap();
        again.release().await.unwrap();
    }
}

/// Calls keep the order they were made in across `MOVED`: a slot moved
/// behind the client, then an acquire and at once its release (the lock's
/// own, or an operator's `release_token`) — both are redirected, and the
/// release must reach the new master after the acquire, leaving no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_sends_after_a_slot_move_keep_the_order_calls_were_made() {
    let _serial = SERIAL.lock().await;
    let plain = support::node_urls();
    // One cluster member and two masters: the acquire is decided by the
    // masters before the cluster's redirected call has returned.
    let redlock = Redlock::builder()
        .nodes([urls()[0].clone(), plain[0].clone(), plain[1].clone()])
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .require_quorum(true)
        .build()
        .await
        .expect("connect");
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for master in 1..=3 {
            ids.push(text(&query(port(1, master), &["CLUSTER", "MYID"]).await));
        }
        ids
    };
    let mut left = Vec::new();
    for i in 0..60 {
        let resource = support::unique("cluster-order");
        let key = support::lock_key(&resource);
        let slot = keyslot(&key).await;
        let from = owner(1, slot).await;
        let to = from % 3 + 1;
        let slot_s = slot.to_string();
        for master in 1..=3 {
            query(
                port(1, master),
                &[
                    "CLUSTER",
                    "SETSLOT",
                    &slot_s,
                    "NODE",
                    &ids[usize::from(to) - 1],
                ],
            )
            .await;
        }
        // The old owner is busy for a few ms (a script that spins): the two
        // masters decide the acquire before its `MOVED` comes back, and
        // the release is made while the acquire still waits for it.
        let busy = tokio::spawn(async move {
            let mut conn = connect(port(1, from)).await;
            let spin = "local t = redis.call('TIME') local until_us = t[1] * 1000000 + t[2] + 5000 \
                        repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us";
            let _: redis::RedisResult<Value> = redis::cmd("EVAL")
                .arg(spin)
                .arg(0)
                .query_async(&mut conn)
                .await;
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let lock = redlock
            .try_lock(&resource, Duration::from_secs(10))
            .await
            .expect("granted by the two masters at least");
        if i % 2 == 0 {
            lock.release().await.expect("release");
        } else {
            let votes = redlock
                .release_token(&resource, lock.token())
                .await
                .expect("release_token");
            assert!(votes.yes() >= 2, "{votes}");
            std::mem::forget(lock); // its drop would release a second time
        }
        busy.await.unwrap();
        support::settled(&redlock).await;
        if copies(1, &key).await != 0 {
            left.push(key);
        }
    }
    assert!(
        left.is_empty(),
        "{} of 60 keys outlived their release on the cluster: {left:?}",
        left.len()
    );
}
