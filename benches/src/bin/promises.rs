//! The figures behind docs/design.md §2 (every reachable node gets every
//! grant) and §11 (what one faulty node costs), on the five real nodes:
//!
//! 1. spread: 16 tasks take 400 locks while two threads keep both cores
//!    busy; how many grants and extensions missed a healthy node (all five
//!    checked within 100 ms of the call);
//! 2. a frozen node: 64 tasks doing `try_lock` + `release` with a 60 s TTL,
//!    healthy, then with node 3 frozen for 30 s: client RSS growth at 10 s and
//!    30 s, and the lock rate against the healthy rate of the same run;
//! 3. wake-ups under churn: a waiter behind a held resource while 16 tasks of
//!    the same client keep registering short waits: when its subscription is
//!    live, and how long after the release it gets the lock.
//!
//! ```text
//! REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=scripts/nodes \
//!   cargo run --profile bench -p redquorum-bench --bin promises
//! ```
//!
//! `REDQUORUM_BENCH_SECS` sets the healthy phase (default 10);
//! `REDQUORUM_SCRIPTS_NODES` defaults to this repository's `scripts/nodes`.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Lock, Redlock, Retry};
// The suite's load generator, as tests/redis_delivery.rs uses it.
use redquorum_bench::load::Burners;

const TTL: Duration = Duration::from_secs(60);

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

fn nodes_script(args: &[&str]) {
    let script = std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| redquorum_bench::repo("scripts/nodes"));
    let status = Command::new(&script)
        .args(args)
        .output()
        .expect("scripts/nodes");
    assert!(status.status.success(), "{script} {args:?} failed");
}

async fn client(urls: &[String], node_timeout: Duration) -> Redlock {
    Redlock::builder()
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(node_timeout)
        .retry(Retry::none())
        .build()
        .await
        .expect("connect")
}

fn unique(prefix: &str) -> String {
    format!("bench:{prefix}:{:016x}", rand::random::<u64>())
}

/// Whether every node shows `lock` (extended: with a PTTL above 10 s)
/// within 100 ms.
async fn on_all(conns: &[redis::aio::MultiplexedConnection], lock: &Lock, extended: bool) -> bool {
    let key = format!("{{{}}}:lock", lock.resource());
    let start = Instant::now();
    for conn in conns {
        let mut conn = conn.clone();
        loop {
            let token: Option<String> = conn.get(&key).await.unwrap_or(None);
            let pttl: i64 = conn.pttl(&key).await.unwrap_or(-2);
            if token.as_deref() == Some(lock.token()) && (!extended || pttl > 10_000) {
                break;
            }
            if start.elapsed() > Duration::from_millis(100) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    true
}

async fn spread(urls: &[String]) {
    let redlock = client(urls, Duration::from_secs(1)).await;
    let mut conns = Vec::new();
    for url in urls {
        let c = redis::Client::open(url.as_str()).unwrap();
        conns.push(c.get_multiplexed_async_connection().await.unwrap());
    }
    let conns = Arc::new(conns);
    let (missed_grants, missed_extends) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let _load = Burners::start(2, Duration::from_secs(120));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (redlock, conns) = (redlock.clone(), conns.clone());
            let (mg, me) = (missed_grants.clone(), missed_extends.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    let mut lock = redlock
                        .try_lock(&unique("spread"), Duration::from_secs(10))
                        .await
                        .expect("lock");
                    mg.fetch_add(
                        u64::from(!on_all(&conns, &lock, false).await),
                        Ordering::Relaxed,
                    );
                    lock.extend(TTL).await.expect("extend");
                    me.fetch_add(
                        u64::from(!on_all(&conns, &lock, true).await),
                        Ordering::Relaxed,
                    );
                    lock.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "spread (16 tasks, 400 grants, both cores busy): {} grants and {} extensions not on all 5 healthy nodes within 100 ms",
        missed_grants.load(Ordering::Relaxed),
        missed_extends.load(Ordering::Relaxed)
    );
}

/// 64 tasks of try_lock + release until `stop`; counts cycles.
fn cycling(
    redlock: &Redlock,
    stop: &Arc<AtomicBool>,
    cycles: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..64)
        .map(|t| {
            let (redlock, stop, cycles) = (redlock.clone(), stop.clone(), cycles.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if let Ok(lock) = redlock
                        .try_lock(&format!("bench:frozen:{t}:{i}"), TTL)
                        .await
                    {
                        let _ = lock.release().await;
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

async fn frozen(urls: &[String], healthy_secs: u64) {
    let redlock = client(urls, Duration::from_millis(50)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let tasks = cycling(&redlock, &stop, &cycles);
    tokio::time::sleep(Duration::from_secs(2)).await; // warm up
    let (c0, t0) = (cycles.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs(healthy_secs)).await;
    let healthy = (cycles.load(Ordering::Relaxed) - c0) as f64 / t0.elapsed().as_secs_f64();
    let rss0 = rss_mib();
    nodes_script(&["freeze", "3"]);
    let (c1, t1) = (cycles.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rss10 = rss_mib();
    let in_flight10: Vec<usize> = redlock
        .nodes()
        .iter()
        .map(|n| (n.name(), n.in_flight()))
        .map(|(_, n)| n)
        .collect();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss30 = rss_mib();
    let rate = (cycles.load(Ordering::Relaxed) - c1) as f64 / t1.elapsed().as_secs_f64();
    nodes_script(&["thaw", "3"]);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    println!(
        "frozen node (64 tasks, TTL 60 s): healthy {healthy:.0} cycles/s, RSS {rss0:.1} MiB; node 3 frozen: {rate:.0} cycles/s ({:.2}x healthy), RSS {:+.1} MiB at 10 s, {:+.1} MiB at 30 s; calls in flight per node at 10 s {in_flight10:?}",
        rate / healthy,
        rss10 - rss0,
        rss30 - rss0,
    );
}

async fn churn(urls: &[String]) {
    let holder = client(urls, Duration::from_secs(1)).await;
    let shared = Redlock::builder()
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::new(3, Duration::from_secs(5)))
        .build()
        .await
        .unwrap();
    let held: Vec<String> = (0..16).map(|_| unique("churn")).collect();
    let mut holds = Vec::new();
    for r in &held {
        holds.push(holder.try_lock(r, TTL).await.unwrap());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let waits = Arc::new(AtomicU64::new(0));
    let churners: Vec<_> = held
        .iter()
        .map(|r| {
            let (c, r, stop, waits) = (shared.clone(), r.clone(), stop.clone(), waits.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let _ = c
                        .lock_with(
                            &r,
                            Duration::from_secs(5),
                            &redquorum::LockOptions::new().wait(Duration::from_millis(2)),
                        )
                        .await;
                    waits.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut latencies = Vec::new();
    let (w0, t0, rss0) = (waits.load(Ordering::Relaxed), Instant::now(), rss_mib());
    for _ in 0..10 {
        let resource = unique("wake");
        let lock = holder.try_lock(&resource, TTL).await.unwrap();
        let (c, r) = (shared.clone(), resource.clone());
        let waiting = tokio::spawn(async move {
            let lock = c
                .lock_with(
                    &r,
                    Duration::from_secs(5),
                    &redquorum::LockOptions::new().wait(Duration::from_secs(30)),
                )
                .await
                .unwrap();
            let got = Instant::now();
            drop(lock);
            got
        });
        // Give the waiter its first refusal and subscription (the test
        // suite waits on PUBSUB NUMSUB instead; a bench takes the figure).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        lock.release().await.unwrap();
        latencies.push(waiting.await.unwrap().saturating_duration_since(released));
    }
    let rate = (waits.load(Ordering::Relaxed) - w0) as f64 / t0.elapsed().as_secs_f64();
    let (total, rss1) = (waits.load(Ordering::Relaxed) - w0, rss_mib());
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        let _ = c.await;
    }
    for h in holds {
        let _ = h.release().await;
    }
    latencies.sort();
    println!(
        "wake-ups under churn ({rate:.0} registering waits/s from the same client, {total} in all, RSS {:+.1} MiB): woken after the release p50 {:.1} ms, max {:.1} ms (10 hand-offs)",
        rss1 - rss0,
        latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3,
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
        .unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        spread(&urls).await;
        churn(&urls).await;
        frozen(&urls, secs).await;
    });
}
