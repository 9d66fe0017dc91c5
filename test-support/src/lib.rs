//! What the tests of the library and the CLI, and the benchmarks, share:
//! the five real nodes (from `REDQUORUM_NODES`, set by `scripts/test`),
//! fresh resource names, clients over the nodes, direct connections to them
//! ([`raw`]), a TCP [`proxy`] in front of a node, a [`load`]ed host, a
//! program run as a [`process`], and the [`checks`] the tests share (a
//! bounded wait, a detector of two holders at once).
//!
//! Without `REDQUORUM_NODES` the helpers that need nodes fail loudly: a lock
//! test that passes without Redis proves nothing.

pub mod checks;
pub mod load;
pub mod process;
pub mod proxy;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redquorum::Redlock;

/// The node URLs, in order (node 1 first).
pub fn node_urls() -> Vec<String> {
    let nodes = std::env::var("REDQUORUM_NODES").expect(
        "REDQUORUM_NODES is not set: these tests need five Redis nodes; run scripts/test \
         (or scripts/nodes up and export REDQUORUM_NODES=$(scripts/nodes urls))",
    );
    let urls: Vec<String> = nodes.split(',').map(|s| s.trim().to_owned()).collect();
    assert_eq!(urls.len(), 5, "REDQUORUM_NODES must list five nodes");
    urls
}

/// A test proxy in front of each node of [`node_urls`], in order: to cut,
/// slow, reset or rewrite one node's links without touching the shared
/// nodes.
pub async fn node_proxies() -> Vec<proxy::Proxy> {
    let mut proxies = Vec::new();
    for url in node_urls() {
        proxies.push(proxy::Proxy::start(url.trim_start_matches("redis://")).await);
    }
    proxies
}

/// A resource name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!("test:{prefix}:{:016x}", rand::random::<u64>())
}

/// A builder over the five nodes with a patient node timeout (1 s; see
/// [`redlock`]), for tests that change another setting. It trusts durable
/// restarts (`Builder::trust_durable_restarts`): the test nodes run
/// `appendonly yes` with `appendfsync always` on volumes that outlive each
/// restart, so a node killed and started again with its data counts at
/// once, as in a durable deployment, and tests not about restarts are not
/// held up by the quarantine another test's restart began. The tests of the
/// default (every restart quarantined) build their own clients.
pub fn patient() -> redquorum::Builder {
    Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_secs(1))
        .trust_durable_restarts(true)
}

/// A client over the five nodes with default settings but a patient node
/// timeout (1 s, capped by each lock's validity as always): tests that are
/// not about timing must not fail because a loaded CI machine answered in
/// 60 ms. Tests about timeouts build their own client.
pub async fn redlock() -> Redlock {
    patient().build().await.expect("connect")
}

/// A direct connection to node `i` (0-based), bypassing redquorum. Its
/// calls wait up to 5 s for an answer: redis-rs' default of 500 ms failed a
/// `KEYS` on a loaded machine (a CI rehearsal, `redis_nodes`).
pub async fn raw(i: usize) -> MultiplexedConnection {
    let client = redis::Client::open(node_urls()[i].as_str()).expect("url");
    let mut conn = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await
    .expect("raw connection timed out")
    .expect("raw connection");
    conn.set_response_timeout(Duration::from_secs(5));
    conn
}

/// Direct connections to all five nodes.
pub async fn raw_all() -> Vec<MultiplexedConnection> {
    let mut conns = Vec::new();
    for i in 0..5 {
        conns.push(raw(i).await);
    }
    conns
}

/// Waits (at most 10 s) until someone waits in line for the lock on
/// `resource` on node 1 (its key layout's default prefix): a candidate or
/// waiter is queued there, so a release wakes it.
pub async fn until_in_line(resource: &str) {
    let line = format!("{{{resource}}}:lock:line");
    let mut conn = raw(0).await;
    let start = std::time::Instant::now();
    while redis::AsyncCommands::zcard::<_, usize>(&mut conn, &line)
        .await
        .unwrap()
        == 0
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nobody got in line for {resource}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Declares node `node`'s (1-based) dataset continuous since long ago, for
/// clients that trust durable restarts: its dataset mark then names its
/// current process, stamped now, continuous since the epoch. Only for a
/// test's clean-up, once it restored a node it had wiped and its own locks
/// are gone: the next tests then meet a node that counts at once, as they
/// would meet a node up for longer than the longest TTL.
pub fn adopt(node: usize) {
    let url = &node_urls()[node - 1];
    let mut conn = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("node {node}: {e}"));
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut conn)
        .expect("INFO");
    let run_id = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .expect("run_id")
        .trim()
        .to_owned();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).expect("TIME");
    let now_ms = secs * 1000 + micros / 1000;
    let _: () = redis::cmd("HSET")
        .arg("redquorum:dataset:2")
        .arg("run")
        .arg(&run_id)
        .arg("at")
        .arg(now_ms)
        .arg("since")
        .arg(0)
        .query(&mut conn)
        .expect("HSET");
}

/// The script calls (`FCALL`, `EVAL`, `EVALSHA`) the nodes behind `conns`
/// have run, from `INFO commandstats`: what a round costs the nodes.
pub async fn script_calls(conns: &mut [MultiplexedConnection]) -> u64 {
    let mut total = 0;
    for conn in conns {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .expect("INFO commandstats");
        total += info
            .lines()
            .filter(|l| {
                ["cmdstat_fcall:", "cmdstat_eval:", "cmdstat_evalsha:"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .filter_map(|l| l.split(['=', ',']).nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// Closes every client connection of node `conn` but `conn` itself
/// (`CLIENT KILL TYPE normal SKIPME yes`), as a node that dropped them
/// would; how many it closed.
pub async fn kill_clients(conn: &mut MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(conn)
        .await
        .expect("CLIENT KILL")
}

/// Sets `key` to `value` with a time to live of `px_ms` on every node, as
/// another client would (a peer holding with a long TTL, say).
pub async fn set_px_everywhere(key: &str, value: &str, px_ms: u64) {
    for mut conn in raw_all().await {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(px_ms)
            .query_async(&mut conn)
            .await
            .expect("SET PX");
    }
}
