//! redquorum-serve against the library it runs, on the same nodes in the
//! same run: 1 000 tasks at once, each making try-lock/unlock pairs over
//! distinct resources — over Dapr's HTTP API (one kept-alive connection
//! per task) and through the library directly. Prints each side's pairs
//! per second, a pair's p50 and p99, their ratio, the HTTP stack's own
//! rate (requests answered before any node call), and the memory a held
//! lock costs the service and a node.
//!
//! ```text
//! scripts/nodes up        # five nodes on 7001-7005, up for 60 s
//! cargo run --profile bench -p redquorum-bench --bin serve
//! ```
//!
//! `REDQUORUM_NODES` picks other nodes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::{Redlock, Retry};
use redquorum_serve::{Config, Limits, Running, TryLock, Unlock, UnlockStatus};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const TASKS: usize = 1000;
const PAIRS_PER_TASK: usize = 10;
const HELD: usize = 20_000;

fn nodes() -> Vec<String> {
    match std::env::var("REDQUORUM_NODES") {
        Ok(urls) => urls.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|n| format!("redis://127.0.0.1:{}", 7000 + n))
            .collect(),
    }
}

async fn redlock() -> Redlock {
    Redlock::builder()
        .nodes(nodes())
        .retry(Retry::none())
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("nodes (scripts/nodes up)")
}

/// A kept-alive HTTP/1.1 connection.
struct Conn {
    stream: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).unwrap();
        Conn {
            stream: BufReader::new(stream),
            addr,
        }
    }

    /// POSTs `body` to `path`; the answer's body.
    async fn post(&mut self, path: &str, body: &str) -> String {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut answer = vec![0; length];
        self.stream.read_exact(&mut answer).await.unwrap();
        String::from_utf8(answer).unwrap()
    }
}

/// Pairs per second and every pair's time (µs), for `TASKS` tasks.
async fn over_http(addr: SocketAddr, round: usize) -> (f64, Vec<f64>) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                let mut times = Vec::with_capacity(PAIRS_PER_TASK);
                for i in 0..PAIRS_PER_TASK {
                    let resource = format!("bench:serve:http:{round}:{t}:{i}");
                    let t0 = Instant::now();
                    let lock = format!(
                        r#"{{"resourceId":"{resource}","lockOwner":"o{t}","expiryInSeconds":30}}"#
                    );
                    let got = conn.post("/v1.0-alpha1/lock/lockstore", &lock).await;
                    assert_eq!(got, r#"{"success":true}"#, "{resource}");
                    let unlock = format!(r#"{{"resourceId":"{resource}","lockOwner":"o{t}"}}"#);
                    let got = conn.post("/v1.0-alpha1/unlock/lockstore", &unlock).await;
                    assert_eq!(got, r#"{"status":0}"#, "{resource}");
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for task in tasks {
        times.extend(task.await.unwrap());
    }
    (
        (TASKS * PAIRS_PER_TASK) as f64 / start.elapsed().as_secs_f64(),
        times,
    )
}

/// Requests per second that the service answers without a node call.
async fn http_alone(addr: SocketAddr) -> f64 {
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                for _ in 0..2 * PAIRS_PER_TASK {
                    let got = conn.post("/v1.0-alpha1/lock/none", "{}").await;
                    assert!(got.contains("ERR_MALFORMED_REQUEST"), "{got}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    (2 * TASKS * PAIRS_PER_TASK) as f64 / start.elapsed().as_secs_f64()
}

async fn through_library(redlock: &Redlock, round: usize) -> (f64, Vec<f64>) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(PAIRS_PER_TASK);
                for i in 0..PAIRS_PER_TASK {
                    let resource = format!("bench:serve:lib:{round}:{t}:{i}");
                    let t0 = Instant::now();
                    let lock = redlock
                        .try_lock(&resource, Duration::from_secs(30))
                        .await
                        .unwrap();
                    lock.release().await.unwrap();
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for task in tasks {
        times.extend(task.await.unwrap());
    }
    (
        (TASKS * PAIRS_PER_TASK) as f64 / start.elapsed().as_secs_f64(),
        times,
    )
}

fn p(times: &mut [f64], q: usize) -> f64 {
    times.sort_by(f64::total_cmp);
    times[(times.len() * q / 100).min(times.len() - 1)]
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Node 1's `used_memory`, in bytes.
async fn node_memory() -> u64 {
    let client = redis::Client::open(nodes()[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// The memory `HELD` locks held through the service cost it and node 1.
async fn memory_per_lock(locks: &Arc<redquorum_serve::LockService>) -> (f64, f64) {
    let request = |n: usize| TryLock {
        store_name: "lockstore".into(),
        resource_id: format!("bench:serve:held:{n}"),
        lock_owner: format!("owner-{}", n % 10),
        expiry_in_seconds: 60,
    };
    let (rss0, node0) = (rss(), node_memory().await);
    for chunk in (0..HELD).collect::<Vec<_>>().chunks(500) {
        let grants = chunk.iter().map(|n| {
            let locks = Arc::clone(locks);
            let req = request(*n);
            async move { locks.try_lock(&req).await }
        });
        for granted in futures::future::join_all(grants).await {
            assert_eq!(granted, Ok(true));
        }
    }
    let (rss1, node1) = (rss(), node_memory().await);
    for chunk in (0..HELD).collect::<Vec<_>>().chunks(500) {
        let unlocks = chunk.iter().map(|n| {
            let locks = Arc::clone(locks);
            let req = request(*n);
            let req = Unlock {
                store_name: req.store_name,
                resource_id: req.resource_id,
                lock_owner: req.lock_owner,
            };
            async move { locks.unlock(&req).await }
        });
        for status in futures::future::join_all(unlocks).await {
            assert_eq!(status, Ok(UnlockStatus::Success));
        }
    }
    (
        rss1.saturating_sub(rss0) as f64 / HELD as f64,
        node1.saturating_sub(node0) as f64 / HELD as f64,
    )
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = Config {
            http: "127.0.0.1:0".parse().unwrap(),
            grpc: "127.0.0.1:0".parse().unwrap(),
            limits: Limits {
                max_rate: u32::MAX,
                max_in_flight: 2 * TASKS,
                max_held: 2 * HELD,
                max_held_per_owner: 2 * HELD,
                ..Limits::default()
            },
            ..Config::default()
        };
        let running = Running::start(redlock().await, config).await.expect("serve");
        let library = redlock().await;
        // The HTTP stack alone: a request answered before any node call
        // (an unknown store), on the same connections.
        let null_rate = http_alone(running.http_addr()).await;
        // Interleaved halves, so that the machine's load hits both alike.
        let (mut h, mut l) = ((0.0, Vec::new()), (0.0, Vec::new()));
        for round in 0..2 {
            let (rate, times) = over_http(running.http_addr(), round).await;
            h.0 += rate / 2.0;
            h.1.extend(times);
            let (rate, times) = through_library(&library, round).await;
            l.0 += rate / 2.0;
            l.1.extend(times);
        }
        println!(
            "{TASKS} tasks x {PAIRS_PER_TASK} pairs, twice: over HTTP {:.0} pairs/s (p50 {:.1} ms, p99 {:.1} ms); library {:.0} pairs/s (p50 {:.1} ms, p99 {:.1} ms); HTTP/library {:.2}x",
            h.0,
            p(&mut h.1, 50) / 1e3,
            p(&mut h.1, 99) / 1e3,
            l.0,
            p(&mut l.1, 50) / 1e3,
            p(&mut l.1, 99) / 1e3,
            h.0 / l.0
        );
        println!(
            "HTTP alone (refused before any node call): {null_rate:.0} requests/s, so at most {:.0} pairs/s with no lock work",
            null_rate / 2.0
        );
        let (service, node) = memory_per_lock(running.locks()).await;
        println!(
            "{HELD} locks held through the service: {service:.0} bytes each in the service, {node:.0} bytes each on a node"
        );
        running.shutdown().await;
        library.shutdown().await;
    });
}
