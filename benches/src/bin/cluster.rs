//! Lone lock+release on three Redis Cluster members (three masters each)
//! against three plain masters, all local `redis-server` processes, in one
//! run: the cost of a member being a cluster (slot lookup, one more map
//! read; the same one message per call).
//!
//! ```text
//! scripts/cluster-nodes up && REDQUORUM_TLS_PLAIN=1 scripts/tls-nodes up
//! cargo run --profile bench -p redquorum-bench --bin cluster
//! ```
//!
//! The plain masters are the TLS test nodes' plain ports 7111–7113.

use std::time::Duration;

use redquorum::{Redlock, Retry};
use redquorum_bench::lone::{CYCLES, lone, p};

async fn build(urls: Vec<String>, what: &str) -> Redlock {
    Redlock::builder()
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .require_quorum(true)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let cluster = build(
            [7301, 7311, 7321]
                .map(|port| format!("redis+cluster://127.0.0.1:{port}"))
                .to_vec(),
            "scripts/cluster-nodes up",
        )
        .await;
        let plain = build(
            (1..=3).map(|n| format!("redis://127.0.0.1:{}", 7110 + n)).collect(),
            "REDQUORUM_TLS_PLAIN=1 scripts/tls-nodes up",
        )
        .await;
        // Interleaved halves, so that machine load hits both alike.
        let (mut k, mut c) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            k.extend(lone(&cluster, "cluster:cluster").await);
            c.extend(lone(&plain, "cluster:plain").await);
        }
        let (k50, c50) = (p(&mut k, 50), p(&mut c, 50));
        println!(
            "lone lock+release, three members, {} cycles each: cluster members p50 {k50:.0} µs p99 {:.0} µs; plain masters p50 {c50:.0} µs p99 {:.0} µs; cluster/plain p50 {:.2}x",
            2 * CYCLES,
            p(&mut k, 99),
            p(&mut c, 99),
            k50 / c50
        );
    });
}
