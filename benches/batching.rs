//! Batching's effect, directly: redquorum with batching on and off in one
//! run, interleaved (on, off, off, on per task count, so that drift in the
//! machine's load favours neither), lock+release cycles on distinct keys at
//! 1, 16, 64 and 256 tasks, with the client's and the servers' CPU per cycle.
//!
//! ```text
//! REDQUORUM_NODES_MODE=local REDQUORUM_BASE_PORT=7400 REDQUORUM_STATE_DIR=/tmp/rq-bench \
//!   REDQUORUM_NODES_PERSIST=none scripts/nodes up        # or aof (the default)
//! export REDQUORUM_NODES=$(REDQUORUM_BASE_PORT=7400 scripts/nodes urls) REDQUORUM_STATE_DIR=/tmp/rq-bench
//! cargo bench --bench batching
//! ```
//!
//! Server CPU is read from `/proc` for local nodes (pid files under
//! `REDQUORUM_STATE_DIR`) or for the pids in `REDQUORUM_SERVER_PIDS`
//! (comma-separated, e.g. Docker nodes' host pids); otherwise "-".
//! `REDQUORUM_BENCH_SECS` sets the seconds per half-phase (default 1).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redquorum::Redlock;

#[path = "support/cpu.rs"]
mod cpu;
use cpu::{process_cpu, servers_cpu};

const TASKS: [usize; 4] = [1, 16, 64, 256];

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("batching: skipped (not run by `cargo bench`)");
        return;
    }
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .expect("REDQUORUM_NODES: five node URLs")
        .split(',')
        .map(str::to_owned)
        .collect();
    let secs: f64 = std::env::var("REDQUORUM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let half = Duration::from_secs_f64(secs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let on = client(&urls, true).await;
        let off = client(&urls, false).await;
        println!("| tasks | batching | cycles/s | client CPU/cycle | servers CPU/cycle |");
        println!("| ---: | --- | ---: | ---: | ---: |");
        for tasks in TASKS {
            let mut totals = [Totals::default(), Totals::default()];
            for (i, batched) in [true, false, false, true].into_iter().enumerate() {
                let redlock = if batched { &on } else { &off };
                let t = phase(redlock, tasks, half, &format!("{tasks}-{i}")).await;
                totals[usize::from(!batched)].add(t);
            }
            for (t, label) in totals.iter().zip(["on", "off"]) {
                println!(
                    "| {tasks} | {label} | {:.0} | {} | {} |",
                    t.cycles as f64 / t.wall.as_secs_f64(),
                    per_cycle(Some(t.client), t.cycles),
                    per_cycle(t.servers, t.cycles),
                );
            }
            println!(
                "| {tasks} | on / off | {:.2}x | | |",
                (totals[0].cycles as f64 / totals[0].wall.as_secs_f64())
                    / (totals[1].cycles as f64 / totals[1].wall.as_secs_f64())
            );
        }
    });
}

async fn client(urls: &[String], batching: bool) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .batching(batching)
        .notify_waiters(false)
        .build()
        .await
        .expect("connect")
}

#[derive(Default, Clone, Copy)]
struct Totals {
    cycles: u64,
    wall: Duration,
    client: Duration,
    servers: Option<Duration>,
}

impl Totals {
    fn add(&mut self, t: Totals) {
        self.cycles += t.cycles;
        self.wall += t.wall;
        self.client += t.client;
        self.servers = match (self.servers, t.servers) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) if self.cycles == t.cycles => b,
            _ => None,
        };
    }
}

/// `tasks` tasks doing lock+release on keys of their own for `time`.
async fn phase(redlock: &Redlock, tasks: usize, time: Duration, tag: &str) -> Totals {
    let cycles = Arc::new(AtomicU64::new(0));
    let (client0, servers0) = (process_cpu(), servers_cpu());
    let start = Instant::now();
    let end = start + time;
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let (redlock, cycles) = (redlock.clone(), Arc::clone(&cycles));
            let key = format!("bench:batching:{tag}:{t}");
            tokio::spawn(async move {
                while Instant::now() < end {
                    if let Ok(lock) = redlock.try_lock(&key, Duration::from_secs(10)).await {
                        let _ = lock.release().await;
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    let wall = start.elapsed();
    Totals {
        cycles: cycles.load(Ordering::Relaxed),
        wall,
        client: process_cpu().saturating_sub(client0),
        servers: servers_cpu()
            .zip(servers0)
            .map(|(b, a)| b.saturating_sub(a)),
    }
}

fn per_cycle(cpu: Option<Duration>, cycles: u64) -> String {
    match cpu {
        Some(cpu) if cycles > 0 => format!("{:.1} µs", cpu.as_secs_f64() * 1e6 / cycles as f64),
        _ => "-".into(),
    }
}
