//! The three Redis Clusters of `scripts/cluster-nodes` (each three masters,
//! on 127.0.0.1:7301-7303, 7311-7313, 7321-7323): their seeds, their
//! masters, and what the cluster says of keys and slots.

use std::process::Command;
use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;
use redquorum::{Redlock, Retry};

pub fn urls() -> Vec<String> {
    let urls = std::env::var("REDQUORUM_CLUSTER_NODES").expect(
        "REDQUORUM_CLUSTER_NODES is not set: these tests need three Redis Clusters; run \
         scripts/test (or scripts/cluster-nodes up and export \
         REDQUORUM_CLUSTER_NODES=$(scripts/cluster-nodes urls) \
         REDQUORUM_SCRIPTS_CLUSTER=$PWD/scripts/cluster-nodes)",
    );
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    assert_eq!(
        urls.len(),
        3,
        "REDQUORUM_CLUSTER_NODES must list three clusters"
    );
    urls
}

/// One test at a time: two of them freeze or reshape a cluster.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn members() -> Redlock {
    Redlock::builder()
        .nodes(urls())
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .require_quorum(true)
        .build()
        .await
        .expect("the three clusters")
}

/// `scripts/cluster-nodes ARGS…`.
pub fn script(args: &[&str]) -> String {
    let path = std::env::var("REDQUORUM_SCRIPTS_CLUSTER").expect("REDQUORUM_SCRIPTS_CLUSTER");
    let out = Command::new(path)
        .args(args)
        .output()
        .expect("scripts/cluster-nodes");
    assert!(out.status.success(), "cluster-nodes {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn port(cluster: u16, master: u16) -> u16 {
    7300 + 10 * (cluster - 1) + master
}

pub async fn connect(port: u16) -> MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// On how many masters of `cluster` `key` exists (a master that does not
/// serve its slot answers `MOVED`: not there).
pub async fn copies(cluster: u16, key: &str) -> usize {
    let mut n = 0;
    for master in 1..=3 {
        let mut conn = connect(port(cluster, master)).await;
        let exists: redis::RedisResult<i64> =
            redis::cmd("EXISTS").arg(key).query_async(&mut conn).await;
        n += usize::from(exists == Ok(1));
    }
    n
}

/// Waits, bounded (10 s), until `condition` holds.
pub async fn eventually<F, Fut>(what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    redquorum_test_support::checks::eventually(what, Duration::from_secs(10), condition).await;
}

/// Waits until `lease` has been extended twice more.
pub async fn extended_twice(lease: &redquorum::Lease) {
    for _ in 0..2 {
        let before = lease.deadline();
        eventually("the lease is extended", || async {
            lease.deadline() > before
        })
        .await;
    }
}

/// On how many members `key` exists.
pub async fn members_holding(key: &str) -> usize {
    let mut n = 0;
    for cluster in 1..=3 {
        n += usize::from(copies(cluster, key).await == 1);
    }
    n
}

pub async fn query(port: u16, args: &[&str]) -> Value {
    let mut conn = connect(port).await;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?} on {port}: {e}"))
}

pub fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not text: {other:?}"),
    }
}

/// The slot of `key`, as the cluster computes it.
pub async fn keyslot(key: &str) -> u16 {
    match query(port(2, 1), &["CLUSTER", "KEYSLOT", key]).await {
        Value::Int(slot) => slot as u16,
        other => panic!("{other:?}"),
    }
}

/// Which master of `cluster` serves `slot`.
pub async fn owner(cluster: u16, slot: u16) -> u16 {
    owner_asking(cluster, 1, slot)
        .await
        .unwrap_or_else(|| panic!("no master serves slot {slot}"))
}

/// Which master of `cluster` serves `slot`, asking master `asked` (another
/// may be frozen).
pub async fn owner_asking(cluster: u16, asked: u16, slot: u16) -> Option<u16> {
    let Value::Array(ranges) = query(port(cluster, asked), &["CLUSTER", "SLOTS"]).await else {
        panic!("CLUSTER SLOTS");
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            panic!()
        };
        let (Value::Int(start), Value::Int(end), Value::Array(master)) =
            (&fields[0], &fields[1], &fields[2])
        else {
            panic!("{fields:?}")
        };
        if (*start..=*end).contains(&i64::from(slot)) {
            let Value::Int(p) = master[1] else { panic!() };
            return (1..=3).find(|m| i64::from(port(cluster, *m)) == p);
        }
    }
    None
}

/// On how many members the master that serves `channel`'s slot counts a
/// shard subscriber to it (`PUBSUB SHARDNUMSUB`).
pub async fn members_listening(channel: &str) -> usize {
    let slot = keyslot(channel).await;
    let mut members = 0;
    for cluster in 1..=3 {
        let at = port(cluster, owner(cluster, slot).await);
        if let Value::Array(reply) = query(at, &["PUBSUB", "SHARDNUMSUB", channel]).await
            && matches!(reply.get(1), Some(Value::Int(n)) if *n > 0)
        {
            members += 1;
        }
    }
    members
}
