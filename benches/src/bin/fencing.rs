//! The cost of fencing: fenced lock+release against plain lock+release,
//! interleaved on the same nodes in one run.
//!
//! ```text
//! REDQUORUM_NODES=$(scripts/nodes urls) \
//!   cargo run --profile bench -p redquorum-bench --bin fencing
//! ```
//!
//! `REDQUORUM_BENCH_CYCLES` sets the cycles per kind (default 500).

use std::time::{Duration, Instant};

use redquorum::Redlock;

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * p / 100]
}

fn main() {
    let nodes = std::env::var("REDQUORUM_NODES")
        .expect("REDQUORUM_NODES must list the five nodes (scripts/nodes urls)");
    let cycles: usize = std::env::var("REDQUORUM_BENCH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let redlock = Redlock::builder()
            .restart_quarantine(false)
            .nodes(nodes.split(','))
            .build()
            .await
            .expect("connect");
        let ttl = Duration::from_secs(10);
        let (mut plain, mut fenced) = (Vec::new(), Vec::new());
        for i in 0..cycles + 20 {
            let start = Instant::now();
            let lock = redlock
                .lock("bench:fencing:plain", ttl)
                .await
                .expect("plain");
            lock.release().await.expect("release");
            let plain_cycle = start.elapsed();
            let start = Instant::now();
            let lock = redlock
                .lock_with(
                    "bench:fencing:fenced",
                    ttl,
                    &redquorum::LockOptions::new().fenced(),
                )
                .await
                .expect("fenced");
            lock.release().await.expect("release");
            let fenced_cycle = start.elapsed();
            if i >= 20 {
                // the first 20 warm up connections and script caches
                plain.push(plain_cycle);
                fenced.push(fenced_cycle);
            }
        }
        let (p50, f50) = (percentile(&mut plain, 50), percentile(&mut fenced, 50));
        let (p99, f99) = (percentile(&mut plain, 99), percentile(&mut fenced, 99));
        println!(
            "lock+release over {cycles} interleaved cycles each, {} nodes",
            redlock.nodes().len()
        );
        println!(
            "  plain   p50 {:>8.0} us   p99 {:>8.0} us",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
        println!(
            "  fenced  p50 {:>8.0} us   p99 {:>8.0} us",
            f50.as_secs_f64() * 1e6,
            f99.as_secs_f64() * 1e6
        );
        println!(
            "  fenced / plain p50: {:.2}x (two rounds instead of one; goal under 2.2x)",
            f50.as_secs_f64() / p50.as_secs_f64()
        );
    });
}
