//! Contended hand-off: six clients take turns on one resource with ~1 ms
//! critical sections (and 5 ms of work outside the lock between turns), with
//! release notifications on and off.
//!
//! ```text
//! REDQUORUM_NODES=$(scripts/nodes urls) \
//!   cargo run --profile bench -p redquorum-bench --bin handoff
//! ```
//!
//! `REDQUORUM_BENCH_SECS` sets the seconds per mode (default 5).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redquorum::{Redlock, Retry};

const CLIENTS: usize = 6;

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * p / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(urls: &[String], notify: bool, secs: u64) {
    let resource = format!("bench:handoff:{notify}:{}", std::process::id());
    let busy = Arc::new(AtomicBool::new(false));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        // One client each, as separate processes would have.
        let redlock = Redlock::builder()
            .restart_quarantine(false)
            .nodes(urls)
            .notify_waiters(notify)
            .retry(Retry::default()) // the peers' 200 ms polling ceiling
            .build()
            .await
            .expect("connect");
        let (resource, busy) = (resource.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            while Instant::now() < end {
                let asked = Instant::now();
                let Ok(lock) = redlock
                    .lock_with(
                        &resource,
                        Duration::from_secs(2),
                        &redquorum::LockOptions::new().wait(Duration::from_secs(10)),
                    )
                    .await
                else {
                    continue;
                };
                waits.push(asked.elapsed());
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(1)).await; // critical section
                busy.store(false, Ordering::SeqCst);
                lock.release().await.expect("release");
                // Work outside the lock, so the others get their turn: the
                // rate measures hand-offs, not one client re-locking.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            waits
        }));
    }
    let started = Instant::now();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.expect("client"));
    }
    let elapsed = started.elapsed();
    let grants = waits.len();
    let longest = waits.iter().max().copied().unwrap_or_default();
    println!(
        "notifications {:<3}  {:>6.1} grants/s  ({grants} grants in {:.1} s)  wait p50 {:>7.1} ms  p99 {:>7.1} ms  longest {:>7.1} ms",
        if notify { "on" } else { "off" },
        grants as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        ms(percentile(&mut waits, 50)),
        ms(percentile(&mut waits, 99)),
        ms(longest),
    );
}

fn main() {
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .expect("REDQUORUM_NODES must list the five nodes (scripts/nodes urls)")
        .split(',')
        .map(str::to_owned)
        .collect();
    let secs = std::env::var("REDQUORUM_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!("{CLIENTS} clients contending for one resource, ~1 ms critical sections, retry ceiling 200 ms");
        run(&urls, true, secs).await;
        run(&urls, false, secs).await;
    });
}
