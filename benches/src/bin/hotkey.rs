//! A hot key: N waiters on one resource, each waiting for the lock
//! (`lock_with(.., wait)`), holding it 1 ms and releasing, for S seconds,
//! in one process and spread over several, with the fair line and without
//! (`fair_waiting(false)`); beside one lone client's lock+release rate in
//! the same run.
//!
//! ```text
//! REDQUORUM_NODES=$(scripts/nodes urls) \
//!   cargo run --profile bench -p redquorum-bench --bin hotkey
//! ```
//!
//! For each case it prints grants/s, the per-waiter spread (min, median,
//! max, Jain's index, waiters granted nothing), the node calls per grant
//! (every script call the nodes ran, from `INFO commandstats`, divided by
//! the grants) and the lock keys left after. `REDQUORUM_BENCH_SECS` sets the
//! seconds per case (default 10), `REDQUORUM_BENCH_WAITERS` the counts
//! (default `10,100,1000`), `REDQUORUM_BENCH_PROCS` the processes of the
//! spread cases (default 10).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::{LockOptions, Redlock};
use redquorum_bench::listening::connections;
use redquorum_test_support::script_calls;

/// Each hold.
const HOLD: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(2);
/// A waiter's patience for one grant.
const WAIT: Duration = Duration::from_secs(10);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn nodes() -> Vec<String> {
    env_or("REDQUORUM_NODES", "")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn client(urls: &[String], fair: bool) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .key_prefix("bench:hotkey:")
        .restart_quarantine(false)
        .fair_waiting(fair)
        .build()
        .await
        .expect("connect")
}

/// `waiters` tasks on one client, on `resource`, until `end`: each
/// waiter's grants.
async fn waiters(redlock: &Redlock, resource: &str, waiters: usize, end: Instant) -> Vec<u64> {
    let busy = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (redlock, resource, busy) = (redlock.clone(), resource.to_owned(), busy.clone());
            tokio::spawn(async move {
                let options = LockOptions::new().wait(WAIT);
                let mut grants = 0;
                while Instant::now() < end {
                    let left = end.saturating_duration_since(Instant::now());
                    let lock =
                        tokio::time::timeout(left, redlock.lock_with(&resource, TTL, &options));
                    let Ok(Ok(lock)) = lock.await else { continue };
                    assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::time::sleep(HOLD).await;
                    busy.store(false, Ordering::SeqCst);
                    let _ = lock.release().await;
                    grants += 1;
                }
                grants
            })
        })
        .collect();
    let mut out = Vec::with_capacity(waiters);
    for t in tasks {
        out.push(t.await.expect("a waiter"));
    }
    out
}

/// Lock keys of the benchmark left on the nodes.
async fn leftovers(conns: &mut [MultiplexedConnection]) -> usize {
    let mut left = 0;
    for conn in conns {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("bench:hotkey:*:lock")
            .query_async(conn)
            .await
            .expect("KEYS");
        left += keys.len();
    }
    left
}

/// Jain's fairness index of `x`: 1 when all are equal.
fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|v| *v as f64).sum();
    let squares: f64 = x.iter().map(|v| (*v as f64).powi(2)).sum();
    if squares == 0.0 {
        0.0
    } else {
        sum * sum / (x.len() as f64 * squares)
    }
}

/// One child process's part: `waiters` waiters, their grants on stdout.
async fn child(resource: &str, n: usize, fair: bool, secs: f64) {
    let urls = nodes();
    let redlock = client(&urls, fair).await;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let grants = waiters(&redlock, resource, n, end).await;
    let line: Vec<String> = grants.iter().map(ToString::to_string).collect();
    println!("{}", line.join(","));
    redlock.shutdown().await;
}

/// One case, on the nodes `urls` (read through `conns`): its figures on
/// one line.
async fn case(
    urls: &[String],
    conns: &mut [MultiplexedConnection],
    n: usize,
    (procs, fair): (usize, bool),
    secs: u64,
    lone: f64,
) {
    let resource = format!("r{n}-{procs}-{fair}-{}", std::process::id());
    let before = script_calls(conns).await;
    let started = Instant::now();
    let grants: Vec<u64> = if procs == 1 {
        let redlock = client(urls, fair).await;
        let end = Instant::now() + Duration::from_secs(secs);
        let out = waiters(&redlock, &resource, n, end).await;
        redlock.shutdown().await;
        out
    } else {
        let exe = std::env::current_exe().expect("exe");
        let children: Vec<_> = (0..procs)
            .map(|p| {
                let share = n / procs + usize::from(p < n % procs);
                tokio::process::Command::new(&exe)
                    .args(["--child", &resource, &share.to_string(), &fair.to_string()])
                    .arg(secs.to_string())
                    .stdout(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
        let mut all = Vec::new();
        for c in children {
            let out = c.wait_with_output().await.expect("a child");
            let text = String::from_utf8_lossy(&out.stdout);
            all.extend(
                text.trim()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<u64>().expect("a count")),
            );
        }
        all
    };
    let elapsed = started.elapsed().as_secs_f64();
    let calls = script_calls(conns).await - before;
    let total: u64 = grants.iter().sum();
    let mut sorted = grants.clone();
    sorted.sort_unstable();
    let rate = total as f64 / elapsed;
    println!(
        "{:>5} waiters {:>2} proc {:<6} {:>8.1} grants/s ({:.2}x lone)  min {:>4}  median {:>4}  \
         max {:>5}  jain {:.3}  none {:>4}  node calls/grant {:>7.1}  left {}",
        n,
        procs,
        if fair { "fair" } else { "unfair" },
        rate,
        rate / lone,
        sorted.first().copied().unwrap_or(0),
        sorted.get(sorted.len() / 2).copied().unwrap_or(0),
        sorted.last().copied().unwrap_or(0),
        jain(&grants),
        grants.iter().filter(|g| **g == 0).count(),
        calls as f64 / total.max(1) as f64,
        leftovers(conns).await,
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let n = args[3].parse().expect("waiters");
        let fair = args[4] == "true";
        let secs = args[5].parse().expect("seconds");
        child(&args[2], n, fair, secs).await;
        return;
    }
    let urls = nodes();
    assert!(!urls.is_empty(), "REDQUORUM_NODES: the nodes' URLs");
    let mut conns = connections(&urls).await;
    assert_eq!(conns.len(), urls.len(), "every node must answer");
    let secs: u64 = env_or("REDQUORUM_BENCH_SECS", "10")
        .parse()
        .expect("seconds");
    let procs: usize = env_or("REDQUORUM_BENCH_PROCS", "10")
        .parse()
        .expect("procs");
    let counts: Vec<usize> = env_or("REDQUORUM_BENCH_WAITERS", "10,100,1000")
        .split(',')
        .map(|c| c.parse().expect("a count"))
        .collect();
    // One lone client's lock+release rate, in the same run.
    let lone_client = client(&urls, true).await;
    let end = Instant::now() + Duration::from_secs(secs.min(5));
    let (mut cycles, started) = (0u64, Instant::now());
    while Instant::now() < end {
        let lock = lone_client
            .try_lock(&format!("lone-{cycles}"), TTL)
            .await
            .expect("lock");
        lock.release().await.expect("release");
        cycles += 1;
    }
    let lone = cycles as f64 / started.elapsed().as_secs_f64();
    lone_client.shutdown().await;
    println!("lone client: {lone:.1} lock+release/s; {secs} s per case, hold {HOLD:?}");
    for n in counts {
        for spread in [1, procs] {
            for fair in [true, false] {
                case(&urls, &mut conns, n, (spread.min(n), fair), secs, lone).await;
            }
        }
    }
}
