//! Several workers contend for one resource on five Redis masters while one
//! node is frozen mid-run, then a majority is frozen; prints what happened.
//!
//! ```text
//! scripts/demo          # brings up the five nodes, runs this, tears down
//! ```
//!
//! Or by hand: `scripts/nodes up`, then
//! `REDQUORUM_NODES=$(scripts/nodes urls) cargo run --release --example contention`.
//! Nodes are frozen and thawed with `scripts/nodes freeze|thaw N`
//! (SIGSTOP of the server). Exits non-zero if two holders ever overlap.
//!
//! The client's own log (a `WARN` when a node degrades, an `INFO` when it
//! recovers) goes to stderr with the time since start, and the metrics it
//! recorded are printed at the end, from a scrape of its own Prometheus
//! endpoint (`MetricsEndpoint`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redquorum::{LockError, Redlock, Retry};

const WORKERS: usize = 6;
/// Per phase: first a lone probe measures lock+release latency, then the
/// workers contend.
const PROBE: Duration = Duration::from_secs(2);
const CONTEND: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(2);
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Both before the client is built: its instruments bind to the recorder
    // installed then.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // The metrics served to Prometheus as a service would serve them
    // (feature `prometheus`), on a port the system picks.
    let endpoint = redquorum::telemetry::MetricsEndpoint::serve("127.0.0.1:0").await?;
    let started = Instant::now();
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::new(3, Duration::from_millis(10)))
        .build()
        .await?;
    println!(
        "redquorum contention demo: {} nodes, quorum {}, {WORKERS} workers, ttl {TTL:?}, \
         node timeout {NODE_TIMEOUT:?}; per phase {PROBE:?} of lone lock+release, then {CONTEND:?} of contention",
        urls.len(),
        redlock.nodes().quorum()
    );

    println!("phase 1: all nodes healthy");
    let healthy = phase(&redlock, "healthy").await;
    println!(
        "phase 2: node 3 frozen mid-run (at {:.3}s; watch stderr for the client's warning)",
        started.elapsed().as_secs_f64()
    );
    let frozen = {
        let _frozen = Freeze::new(&[3]).await;
        phase(&redlock, "frozen").await
    };
    println!("phase 3: nodes 1, 2 and 3 frozen (no majority)");
    let mut unavailable = {
        let _frozen = Freeze::new(&[1, 2, 3]).await;
        majority_frozen(&redlock).await?
    };

    println!();
    println!(
        "{:<16} {:>7} {:>9} {:>14} {:>14} {:>8}",
        "phase", "grants", "overlaps", "lock+rel p50", "lock+rel p99", "cycles"
    );
    for (name, s) in [("healthy", &healthy), ("1 of 5 frozen", &frozen)] {
        let mut lat = s.latencies.clone();
        println!(
            "{name:<16} {:>7} {:>9} {:>14} {:>14} {:>8}",
            s.grants,
            s.overlaps,
            fmt(percentile(&mut lat, 50)),
            fmt(percentile(&mut lat, 99)),
            s.latencies.len()
        );
    }
    let ratio = percentile(&mut frozen.latencies.clone(), 50).as_secs_f64()
        / percentile(&mut healthy.latencies.clone(), 50).as_secs_f64();
    println!("1-frozen / healthy lock+release p50: {ratio:.2}x (goal: at most 1.5x)");
    println!(
        "3 of 5 frozen: try_lock -> Unavailable in p50 {}, max {} over {} tries \
         (node timeout {}; goal: within 2x = {})",
        fmt(percentile(&mut unavailable, 50)),
        fmt(percentile(&mut unavailable, 100)),
        unavailable.len(),
        fmt(NODE_TIMEOUT),
        fmt(NODE_TIMEOUT * 2),
    );
    let overlaps = healthy.overlaps + frozen.overlaps;
    println!("overlapping holders observed: {overlaps}");
    println!();
    print_metrics(&scrape(endpoint.local_addr()).await?);
    if overlaps > 0 {
        return Err("mutual exclusion violated".into());
    }
    Ok(())
}

#[derive(Default)]
struct Stats {
    grants: u64,
    overlaps: u64,
    /// Lock+release cycles of a lone client.
    latencies: Vec<Duration>,
}

/// A lone client measures lock+release latency for `PROBE`, then `WORKERS`
/// tasks contend for one resource for `CONTEND`.
async fn phase(redlock: &Redlock, name: &str) -> Stats {
    let probe = format!("demo:probe:{name}:{}", std::process::id());
    let mut latencies = Vec::new();
    let end = Instant::now() + PROBE;
    while Instant::now() < end {
        let start = Instant::now();
        let lock = redlock.lock(&probe, TTL).await.expect("probe lock");
        lock.release().await.expect("probe release");
        latencies.push(start.elapsed());
    }

    let resource: Arc<str> = format!("demo:contended:{name}:{}", std::process::id()).into();
    let busy = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + CONTEND;

    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (redlock, resource) = (redlock.clone(), resource.clone());
        let (busy, grants, overlaps) = (busy.clone(), grants.clone(), overlaps.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let lock = match redlock
                    .lock_with(
                        &resource,
                        TTL,
                        &redquorum::LockOptions::new().wait(Duration::from_secs(1)),
                    )
                    .await
                {
                    Ok(lock) => lock,
                    Err(LockError::Timeout { .. }) => continue,
                    Err(e) => panic!("worker: {e}"),
                };
                if busy.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await; // the critical section
                if !lock.is_valid() {
                    // Held past validity: exclusion no longer guaranteed.
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                busy.store(false, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                let _ = lock.release().await;
            }
        }));
    }

    for w in workers {
        w.await.expect("worker panicked");
    }
    let stats = Stats {
        grants: grants.load(Ordering::SeqCst),
        overlaps: overlaps.load(Ordering::SeqCst),
        latencies,
    };
    println!(
        "  {} lone lock+release cycles, then {} grants to {WORKERS} contending workers",
        stats.latencies.len(),
        stats.grants
    );
    stats
}

/// With no majority, every try must fail fast with `Unavailable`.
async fn majority_frozen(redlock: &Redlock) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let mut times = Vec::new();
    for i in 0..20 {
        let start = Instant::now();
        match redlock.try_lock(&format!("demo:majority:{i}"), TTL).await {
            Err(LockError::Unavailable { .. }) => times.push(start.elapsed()),
            Ok(_) => return Err("granted without a majority".into()),
            Err(e) => return Err(format!("expected Unavailable, got {e}").into()),
        }
    }
    Ok(times)
}

/// Nodes frozen until dropped.
struct Freeze(Vec<usize>);

impl Freeze {
    async fn new(nodes: &[usize]) -> Self {
        for n in nodes {
            nodes_script("freeze", *n).await;
        }
        Freeze(nodes.to_vec())
    }
}

impl Drop for Freeze {
    fn drop(&mut self) {
        for n in &self.0 {
            let status = std::process::Command::new(script_path())
                .args(["thaw", &n.to_string()])
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                eprintln!("could not thaw node {n}: {status:?}");
            }
        }
    }
}

fn script_path() -> String {
    std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/nodes").to_owned())
}

async fn nodes_script(action: &str, node: usize) {
    let status = tokio::process::Command::new(script_path())
        .args([action, &node.to_string()])
        .status()
        .await
        .expect("run scripts/nodes");
    assert!(status.success(), "scripts/nodes {action} {node} failed");
}

/// One scrape of the endpoint, as Prometheus would make it: its status line
/// printed, its body returned.
async fn scrape(addr: std::net::SocketAddr) -> Result<String, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default();
    println!("metrics: GET http://{addr}/metrics: {status}");
    Ok(body.to_owned())
}

/// The scrape's per-node call outcomes as a table, then the operation
/// counters as they are.
fn print_metrics(scrape: &str) {
    use redquorum::telemetry::OUTCOMES;
    let label = |series: &str, key: &str| -> Option<String> {
        let start = series.find(&format!("{key}=\""))? + key.len() + 2;
        let len = series[start..].find('"')?;
        Some(series[start..start + len].to_owned())
    };
    let mut nodes: std::collections::BTreeMap<String, [u64; 7]> = Default::default();
    let mut others = Vec::new();
    for line in scrape.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Some(rest) = series.strip_prefix("redquorum_node_requests_total") {
            let (Some(node), Some(outcome)) = (label(rest, "node"), label(rest, "outcome")) else {
                continue;
            };
            if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
                nodes.entry(node).or_default()[i] = value.parse::<f64>().unwrap_or(0.0) as u64;
            }
        } else if series.starts_with("redquorum_")
            && !series.starts_with("redquorum_node_")
            && !series.contains("quantile")
        {
            others.push(line);
        }
    }
    println!("metrics: redquorum_node_requests_total by node and outcome");
    print!("  {:<24}", "node");
    for o in OUTCOMES {
        print!(" {o:>11}");
    }
    println!();
    for (node, counts) in &nodes {
        print!("  {node:<24}");
        for c in counts {
            print!(" {c:>11}");
        }
        println!();
    }
    println!("metrics: operations");
    for line in others {
        println!("  {line}");
    }
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    samples[(samples.len() - 1) * p / 100]
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.0} us", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}
