//! Misbehaving nodes give typed errors, never a panic: out of memory
//! (`maxmemory 1`, `noeviction`), a read-only replica, credentials revoked
//! while the client runs, a key of another type, least-privilege ACL users,
//! extreme settings. Each node change is undone by a guard, even when the
//! test fails, and the node-changing tests take turns through one mutex.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]
mod support;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::node::Node;
use redquorum::quorum::MAX_TTL_MS;
use redquorum::{Answer, ConfigError, LockError, NodeError, Redlock};
use support::acl::{AclUser, acl_all, blocking_conn};
use support::memory::MemoryNode;
use support::*;
use tokio::sync::Mutex;

/// One node-changing test at a time.
static CLUSTER: Mutex<()> = Mutex::const_new(());

/// A config value of nodes `nodes` (0-based), set for as long as this lives;
/// the old values are put back on drop, even when the test panics.
struct ConfigSet {
    nodes: Vec<usize>,
    saved: Vec<(String, String)>,
}

impl ConfigSet {
    async fn new(nodes: &[usize], settings: &[(&str, &str)]) -> ConfigSet {
        let mut saved = Vec::new();
        let mut first = raw(nodes[0]).await;
        for (name, _) in settings {
            let (_, old): (String, String) = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut first)
                .await
                .unwrap();
            saved.push((name.to_string(), old));
        }
        let guard = ConfigSet {
            nodes: nodes.to_vec(),
            saved,
        };
        for &n in nodes {
            let mut conn = raw(n).await;
            for (name, value) in settings {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
        guard
    }
}

impl Drop for ConfigSet {
    fn drop(&mut self) {
        for &n in &self.nodes {
            let mut conn = blocking_conn(n);
            for (name, value) in &self.saved {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query(&mut conn)
                    .expect("restore config");
            }
        }
    }
}

/// The nodes' own error, for a vote that failed with an error of the kind
/// `kind` picks (its text as the node gave it).
fn node_errors(votes: &redquorum::Votes, kind: impl Fn(&NodeError) -> Option<&str>) -> Vec<String> {
    votes
        .iter()
        .filter_map(|(_, a)| match a {
            Answer::Failed(e) => kind(e).map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// Nodes out of memory (`maxmemory 1`, `noeviction`) refuse the acquire
/// with their `OOM` error: a majority of them makes the round `Unavailable`
/// with that message per node; a minority costs nothing.
#[tokio::test]
async fn out_of_memory_nodes_give_typed_server_errors() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("oom");
    {
        let _oom = ConfigSet::new(
            &[0, 1, 2],
            &[("maxmemory", "1"), ("maxmemory-policy", "noeviction")],
        )
        .await;
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let errors = node_errors(&votes, |e| match e {
                    NodeError::OutOfMemory(m) => Some(m),
                    _ => None,
                });
                assert!(errors.len() >= 3, "{votes}");
                assert!(errors.iter().all(|m| m.contains("OOM")), "{errors:?}");
                // Its own advice, not the node timeout's.
                assert_eq!(votes.held(), 0);
                let text = LockError::Unavailable { votes }.to_string();
                assert!(
                    text.contains("maxmemory") && !text.contains("node timeout"),
                    "{text}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    {
        let _oom = ConfigSet::new(
            &[3, 4],
            &[("maxmemory", "1"), ("maxmemory-policy", "noeviction")],
        )
        .await;
        let lock = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .expect("three nodes with memory are a quorum");
        lock.release().await.unwrap();
    }
    // Memory runs out under a held lock: extending and releasing need none,
    // so both still work everywhere (docs/operations.md §2).
    let mut lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    {
        let _oom = ConfigSet::new(
            &[0, 1, 2, 3, 4],
            &[("maxmemory", "1"), ("maxmemory-policy", "noeviction")],
        )
        .await;
        lock.extend(Duration::from_secs(5))
            .await
            .expect("extend on full nodes");
        lock.release().await.expect("release on full nodes");
        settled(&redlock).await; // the release returns at its quorum
        for (i, conn) in raw_all().await.iter_mut().enumerate() {
            let left: bool = conn.exists(lock_key(&resource)).await.unwrap();
            assert!(!left, "node {} kept the key", i + 1);
        }
    }
    // Restored: all five take writes again.
    let mut conns = raw_all().await;
    for conn in &mut conns {
        let _: () = conn.set_ex(lock_key(&resource), "probe", 1).await.unwrap();
        let _: () = conn.del(lock_key(&resource)).await.unwrap();
    }
}

/// Nodes made replicas (`REPLICAOF`) for as long as this lives; masters
/// again (`REPLICAOF NO ONE`) on drop. A replica flushes its data when it
/// syncs, so only the tests of this binary, which take turns, may see it.
struct Replicas(Vec<usize>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for &n in &self.0 {
            let mut conn = blocking_conn(n);
            let _: () = redis::cmd("REPLICAOF")
                .arg("NO")
                .arg("ONE")
                .query(&mut conn)
                .expect("REPLICAOF NO ONE");
        }
    }
}

/// Read-only replicas refuse the acquire with `READONLY`: a majority of
/// them makes the round `Unavailable`, with each node's message.
#[tokio::test]
async fn read_only_replicas_give_typed_server_errors() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("replica");
    let master_port = node_urls()[4].rsplit(':').next().unwrap().to_owned();
    {
        let replicas = Replicas(vec![0, 1, 2]);
        for &n in &replicas.0 {
            let mut conn = raw(n).await;
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(&master_port)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let errors = node_errors(&votes, |e| match e {
                    NodeError::ReadOnly(m) => Some(m),
                    _ => None,
                });
                assert!(errors.len() >= 3, "{votes}");
                assert!(
                    errors
                        .iter()
                        .all(|m| m.to_lowercase().contains("read only replica")),
                    "{errors:?}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    // Masters again: the lock is granted (once any sync in progress ends).
    let start = std::time::Instant::now();
    loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "not writable again: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Credentials revoked while the client runs: the nodes cut the
/// connections, the background reconnect is refused, and rounds report each
/// such node as `Auth` or `NotConnected` with the node's authentication
/// message (never a hang, never a panic). Restoring the password brings the
/// nodes back without a new client.
#[tokio::test]
async fn credentials_revoked_at_round_time_are_typed() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser::create(
        "rq-revoked",
        &["on", ">first-password", "~*", "&*", "+@all"],
    )
    .await;
    let name = user.name();
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{name}:first-password@"), 1))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let resource = unique("revoked");
    redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .expect("valid credentials")
        .release()
        .await
        .unwrap();

    // New password on nodes 1-3, and their connections killed.
    for i in 0..3 {
        let mut conn = raw(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "resetpass", ">second-password"][..])
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: redis::Value = redis::cmd("CLIENT")
            .arg(&["KILL", "USER", name][..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let auth_refused = |a: &Answer| match a {
        Answer::Failed(NodeError::Auth(_)) => true,
        Answer::Failed(NodeError::NotConnected(m)) => {
            let m = m.to_lowercase();
            m.contains("auth") || m.contains("wrongpass")
        }
        _ => false,
    };
    // The first round may see the dropped connections; then the refused
    // reconnects. Bounded: the reconnect backoff starts at 10 ms.
    let start = std::time::Instant::now();
    let votes = loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let refused = votes
                    .iter()
                    .take(3)
                    .filter(|(_, a)| auth_refused(a))
                    .count();
                if refused == 3 {
                    break votes;
                }
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no authentication error reported within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (node, answer) in votes.iter().take(3) {
        assert!(!node.contains("password"), "password leaked: {node}");
        let text = format!("{answer:?}");
        assert!(!text.contains("first-password"), "{text}");
    }

    // The old password back: the background reconnect succeeds.
    for i in 0..3 {
        let mut conn = raw(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "resetpass", ">first-password"][..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let start = std::time::Instant::now();
    loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "not back within 10 s: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key of another type on a minority of nodes is someone else's data: the
/// lock is granted by the other three, and neither the acquire's clean-up
/// nor extend nor release touches the foreign keys.
#[tokio::test]
async fn wrong_type_key_on_a_minority_is_left_alone() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("wrongtype-minority");
    let key = lock_key(&resource);
    for conn in &mut conns[..2] {
        let _: () = conn.rpush(&key, "someone else's").await.unwrap();
    }
    let mut lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .expect("three free nodes");
    lock.extend(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let mut want = vec![std::collections::BTreeMap::new(); 5];
    for m in &mut want[..2] {
        m.insert(key.clone(), "<list>".to_owned());
    }
    eventually_snapshot(&mut conns, &resource, &want, Duration::from_secs(2)).await;
    for conn in &mut conns {
        let _: () = conn.del(&key).await.unwrap();
    }
}

/// Found by `any_input_on_real_nodes_is_a_typed_error_or_a_correct_lock`:
/// the builder used to accept any node timeout of at least 1 ms, and the
/// release round computed `Instant::now() + node_timeout` unchecked, so
/// `release()` (and the clean-up of any refused round) panicked with
/// "overflow when adding duration to instant" for `Duration::MAX`. Fixed in
/// src by bounding the timeout to 2^40 ms; this keeps both ends covered.
#[tokio::test]
async fn huge_node_timeout_never_panics() {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let build = |timeout| {
        Redlock::builder()
            .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
            .node_timeout(timeout)
            .build()
    };
    assert_eq!(
        build(Duration::MAX).await.unwrap_err(),
        ConfigError::InvalidNodeTimeout
    );
    let redlock = build(Duration::from_millis(MAX_TTL_MS))
        .await
        .expect("the largest timeout accepted");
    let lock = redlock
        .try_lock("r", Duration::from_secs(5))
        .await
        .expect("free");
    // A refused round cleans up through the same code.
    assert!(matches!(
        redlock.try_lock("r", Duration::from_secs(5)).await,
        Err(LockError::Taken { .. })
    ));
    lock.release().await.expect("release");
}

/// Regression, found by `any_input_on_memory_nodes_is_a_typed_error_or_a_lock`:
/// `-0.0` is a finite number in `[0, 1)` (it equals `0.0`), but its `{:e}`
/// form "-0e0" once failed to parse as digits and the builder refused it.
#[tokio::test]
async fn negative_zero_drift_factor_is_accepted() {
    let node = MemoryNode::new(0);
    let built = Redlock::builder()
        .custom_nodes([node as Arc<dyn Node>])
        .drift_factor(-0.0)
        .build()
        .await;
    assert!(built.is_ok(), "{built:?}");
}

/// Returns once node 1 has a waiter in the line `key`.
async fn in_line(key: &str, least: u64) {
    let mut admin = raw(0).await;
    let start = std::time::Instant::now();
    loop {
        let waiting: u64 = redis::cmd("ZCARD")
            .arg(key)
            .query_async(&mut admin)
            .await
            .unwrap();
        if waiting >= least {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no waiter in {key}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The least-privilege ACL user that `docs/operations.md` recommends can use
/// every kind of lock, and nothing else: only redquorum's keys and channels,
/// only the commands its scripts and connections need.
#[tokio::test]
async fn least_privilege_acl_user_can_lock() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser::create(
        "rq-least",
        &[
            "on",
            ">s3cret",
            "resetkeys",
            "~{*}:lock*",
            "~{*}:fence",
            "~{*}:writer",
            "~{*}:readers",
            "~{*}:intent",
            "~{*}:rw:*",
            "~{*}:permit*",
            "~redquorum:dataset",
            "resetchannels",
            "&{*}:lock",
            "&{*}:writer",
            "&{*}:permit:*",
            "-@all",
            "+ping",
            "+info",
            "+config|get",
            "+fcall",
            "+function|load",
            "+eval",
            "+subscribe",
            "+unsubscribe",
            "+set",
            "+get",
            "+del",
            "+exists",
            "+type",
            "+pttl",
            "+pexpire",
            "+incr",
            "+hset",
            "+hsetnx",
            "+hdel",
            "+hexists",
            "+hincrby",
            "+hgetall",
            "+publish",
            "+spublish",
            "+ssubscribe",
            "+sunsubscribe",
            "+time",
            "+pexpireat",
            "+zadd",
            "+zrem",
            "+zremrangebyscore",
            "+zrange",
            "+zscore",
            "+zcard",
            "+zincrby",
            "+zrangebyscore",
        ],
    )
    .await;
    let name = user.name();
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{name}:s3cret@"), 1))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the user may connect");
    let r = unique("acl");
    let ttl = Duration::from_secs(5);
    let mut lock = redlock.try_lock(&r, ttl).await.expect("plain");
    lock.extend(ttl).await.expect("extend");
    lock.release().await.expect("release");
    let lock = redlock.lock_fenced(&r, ttl).await.expect("fenced");
    assert!(lock.fence().is_some());
    lock.release().await.expect("release fenced");
    let lock = redlock
        .lock_reentrant(&r, ttl, "owner")
        .await
        .expect("reentrant");
    // Inspection reads every kind of key with the same rights.
    let seen = redlock.inspect(&r).await.expect("inspect");
    assert!(
        seen.nodes().iter().all(|n| n.read.is_ok()),
        "{:?}",
        seen.nodes()
    );
    lock.release().await.expect("release reentrant");
    let (a, b) = (format!("{r}:a"), format!("{r}:b"));
    let lock = redlock.lock_many(&[&a, &b], ttl).await.expect("many");
    lock.release().await.expect("release many");
    // Read/write locks, through every script path: a reader, a writer
    // refused by it (marking its intent), the writer once it is gone.
    let mut reader = redlock.read_lock(&r, ttl).await.expect("read");
    reader.extend(ttl).await.expect("extend read");
    let seen = redlock.inspect_rw(&r).await.expect("inspect_rw");
    assert!(
        seen.nodes().iter().all(|n| n.read.is_ok()),
        "{:?}",
        seen.nodes()
    );
    assert!(matches!(
        redlock.try_write_lock(&r, ttl).await,
        Err(redquorum::LockError::Taken { .. })
    ));
    reader.release().await.expect("release read");
    let mut writer = redlock.write_lock(&r, ttl).await.expect("write");
    writer.extend(ttl).await.expect("extend write");
    writer.release().await.expect("release write");
    // A waiter woken by a release (SUBSCRIBE / PUBLISH on the lock channel).
    let held = redlock.try_lock(&r, ttl).await.expect("plain again");
    let waiter = {
        let redlock = redlock.clone();
        let r = r.clone();
        tokio::spawn(async move {
            redlock
                .lock_with(
                    &r,
                    ttl,
                    &redquorum::LockOptions::new().wait(Duration::from_secs(10)),
                )
                .await
        })
    };
    // The waiter's SUBSCRIBE went through: node 1 counts a subscriber.
    let mut admin = raw(0).await;
    let start = std::time::Instant::now();
    loop {
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(lock_key(&r))
            .query_async(&mut admin)
            .await
            .unwrap();
        if subscribers > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no subscriber");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    waiter
        .await
        .unwrap()
        .expect("woken")
        .release()
        .await
        .unwrap();
    // Semaphores: a permit, its extension, a waiter in line woken by its
    // release (the permit kept for it), the count checked.
    let semaphore = redlock.semaphore(&r, 1).expect("semaphore");
    let mut permit = semaphore.try_acquire(ttl).await.expect("permit");
    permit.extend(ttl).await.expect("extend permit");
    let waiting = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let wait = redquorum::LockOptions::new().wait(Duration::from_secs(10));
            semaphore.acquire_with(ttl, &wait).await
        })
    };
    in_line(&format!("{{{r}}}:permits:line"), 1).await;
    let t = std::time::Instant::now();
    permit.release().await.expect("release permit");
    let permit = waiting.await.unwrap().expect("permit in line");
    assert!(t.elapsed() < ttl, "the waiter did not wait for an expiry");
    assert!(matches!(
        redlock.semaphore(&r, 2).unwrap().try_acquire(ttl).await,
        Err(redquorum::LockError::PermitCount { held_under: 1, .. })
    ));
    permit.release().await.expect("release permit");
    // A writer in line behind a writer, and a reader behind it.
    let held = redlock.try_write_lock(&r, ttl).await.expect("writer");
    let wait = redquorum::LockOptions::new().wait(Duration::from_secs(10));
    let (w, rd) = (redlock.clone(), redlock.clone());
    let (r1, r2, wait1, wait2) = (r.clone(), r.clone(), wait.clone(), wait.clone());
    let writer = tokio::spawn(async move { w.write_lock_with(&r1, ttl, &wait1).await });
    let reader = tokio::spawn(async move { rd.read_lock_with(&r2, ttl, &wait2).await });
    // Both in line (the writer alone in it, released, would go before a
    // reader not in line yet, which would then wait for it).
    in_line(&format!("{{{r}}}:rw:line"), 2).await;
    let t = std::time::Instant::now();
    held.release().await.expect("release writer");
    // Whichever is first in line goes first, and lets the other go when it
    // is done.
    tokio::join!(
        async {
            let reader = reader.await.unwrap().expect("reader in line");
            reader.release().await.unwrap();
        },
        async {
            let writer = writer.await.unwrap().expect("writer in line");
            writer.release().await.unwrap();
        }
    );
    assert!(t.elapsed() < ttl, "no one waited for a lock to expire");
    // Nothing was denied along the way…
    for i in 0..5 {
        let mut conn = raw(i).await;
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut conn)
            .await
            .unwrap();
        let denied = format!("{log:?}");
        assert!(!denied.contains(name), "node {}: {denied}", i + 1);
    }
    // …and nothing beyond is allowed: other keys are off limits.
    let client = redis::Client::open(urls[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let denied: redis::RedisResult<()> = conn.set("not-a-lock-key", "x").await;
    assert!(denied.is_err(), "the user may write other keys");
}

/// Scripts go as functions (`FCALL`) once their library is loaded. A
/// `FUNCTION FLUSH` makes that node's next script call fail (never retried:
/// a retry could overtake later calls); the connection then sends `EVAL`, in
/// order, and the quorum carries every round meanwhile.
#[tokio::test]
async fn flushed_functions_cost_one_failed_call_then_load_again() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("noscript");
    redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut node1 = raw(0).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut node1)
        .await
        .unwrap();
    assert!(
        stats.contains("cmdstat_fcall:"),
        "no FCALL reached node 1:\n{stats}"
    );
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut node1)
        .await
        .unwrap();
    // Release is a script: node 1 refuses it, four nodes carry it.
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.expect("a quorum released");
    // Node 1's copy of the key waits for its TTL; a later cycle on another
    // resource goes through on node 1 again once its connection is renewed.
    let start = std::time::Instant::now();
    loop {
        let other = unique("noscript-after");
        let lock = redlock
            .try_lock(&other, Duration::from_secs(5))
            .await
            .unwrap();
        lock.release().await.unwrap();
        let left: bool = node1.exists(lock_key(&other)).await.unwrap();
        if !left {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "node 1 never released again after FUNCTION FLUSH"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _: () = node1.del(lock_key(&resource)).await.unwrap();
}

/// A user who may run scripts but not `FUNCTION LOAD`: its connections send
/// `EVAL` of the source, and every lock kind works.
#[tokio::test]
async fn without_script_load_rights_scripts_go_as_eval() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser::create(
        "rq-noload",
        &["on", ">pw", "~*", "&*", "+@all", "-function|load"],
    )
    .await;
    let redlock = Redlock::builder()
        .nodes(user.urls("pw"))
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let resource = unique("noload");
    let evals = || async {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw(0).await)
            .await
            .unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = evals().await;
    let mut lock = redlock
        .lock_fenced(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.extend(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let lock = redlock
        .lock_reentrant(&resource, Duration::from_secs(5), "owner")
        .await
        .unwrap();
    lock.release().await.unwrap();
    settled(&redlock).await; // the release returns at its quorum
    for i in 0..5 {
        let left: bool = raw(i).await.exists(lock_key(&resource)).await.unwrap();
        assert!(!left, "node {} kept the key", i + 1);
    }
    assert!(evals().await > before, "the fallback sent no EVAL");
    acl_all(&["DELUSER", user.name()]).await;
}
