//! Lone lock+release over TLS against plain TCP, on the same five servers in
//! one run: `scripts/tls-nodes up` with `REDQUORUM_TLS_PLAIN=1` opens a
//! plain-text port beside each TLS port (7111–7115; the suite's nodes are
//! TLS-only).
//!
//! ```text
//! REDQUORUM_TLS_PLAIN=1 scripts/tls-nodes up
//! cargo run --profile bench -p redquorum-bench --bin tls
//! ```
//!
//! `REDQUORUM_TLS_DIR` defaults to this repository's `target/tls-nodes`.

use std::time::Duration;

use redquorum::{Redlock, Retry};
use redquorum_bench::lone::{CYCLES, lone, p};

fn main() {
    let dir = std::env::var("REDQUORUM_TLS_DIR")
        .unwrap_or_else(|_| redquorum_bench::repo("target/tls-nodes"));
    let read = |name: &str| {
        std::fs::read(format!("{dir}/{name}")).expect("certificates (scripts/tls-nodes up)")
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let tls = Redlock::builder().restart_quarantine(false)
            .nodes((1..=5).map(|n| format!("rediss://127.0.0.1:{}", 7100 + n)))
            .tls_ca(read("ca.crt"))
            .tls_client_cert(read("client.crt"), read("client.key"))
            .node_timeout(Duration::from_secs(1))
            .retry(Retry::none())
            .require_quorum(true)
            .build()
            .await
            .expect("TLS nodes");
        let plain = Redlock::builder().restart_quarantine(false)
            .nodes((1..=5).map(|n| format!("redis://127.0.0.1:{}", 7110 + n)))
            .node_timeout(Duration::from_secs(1))
            .retry(Retry::none())
            .require_quorum(true)
            .build()
            .await
            .expect("plain ports (REDQUORUM_TLS_PLAIN=1 scripts/tls-nodes up)");
        // Interleaved halves, so that machine load hits both alike.
        let (mut t, mut c) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            t.extend(lone(&tls, "tls:tls").await);
            c.extend(lone(&plain, "tls:tcp").await);
        }
        let (t50, c50) = (p(&mut t, 50), p(&mut c, 50));
        println!(
            "lone lock+release, same five servers, {} cycles each: TLS p50 {t50:.0} µs p99 {:.0} µs; TCP p50 {c50:.0} µs p99 {:.0} µs; TLS/TCP p50 {:.2}x",
            2 * CYCLES,
            p(&mut t, 99),
            p(&mut c, 99),
            t50 / c50
        );
    });
}
