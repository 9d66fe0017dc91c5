//! Misbehaving nodes give typed errors, never a panic: out of memory
//! (`maxmemory 1`, `noeviction`), a read-only replica, credentials revoked
//! while the client runs, a key of another type, least-privilege ACL users,
//! extreme settings. Each node change is undone by a guard, even when the
//! test fails, and the node-changing tests take turns through one mutex.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]
mod permissions;
#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::node::Node;
use redquorum::quorum::MAX_TTL_MS;
use redquorum::{Answer, ConfigError, LockError, NodeError, Redlock};
use redquorum_test_support::checks::{eventually, eventually_ok};
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
    let lock = eventually_ok("writable again", Duration::from_secs(10), || {
        redlock.try_lock(&resource, Duration::from_secs(5))
    })
    .await;
    lock.release().await.unwrap();
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
    let votes = eventually_ok(
        "an authentication error from nodes 1-3",
        Duration::from_secs(10),
        async || match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let refused = votes
                    .iter()
                    .take(3)
                    .filter(|(_, a)| auth_refused(a))
                    .count();
                if refused == 3 {
                    Ok(votes)
                } else {
                    Err(votes.to_string())
                }
            }
            other => panic!("expected Unavailable, got {other:?}"),
        },
    )
    .await;
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
    let lock = eventually_ok(
        "back with the old password",
        Duration::from_secs(10),
        || redlock.try_lock(&resource, Duration::from_secs(5)),
    )
    .await;
    lock.release().await.unwrap();
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
