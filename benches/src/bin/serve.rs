//! redquorum-serve against the library it runs, on the same nodes in the
//! same run: 1 000 tasks at once, each making try-lock/unlock pairs over
//! distinct resources — over Dapr's HTTP API (one kept-alive connection
//! per task), over its gRPC API (one HTTP/2 connection), through the
//! service's calls with no protocol, and through the library directly.
//! Prints each way's pairs per second, a pair's p50 and p99, its ratio to
//! the library's, and the CPU a pair costs this process (the HTTP clients'
//! share apart) and the nodes; then the HTTP stack's own rate (requests
//! answered before any node call), a bare hyper server's (the ceiling of
//! any HTTP/1 service here), and the memory a held lock costs the service
//! and a node.
//!
//! ```text
//! scripts/nodes up        # five nodes on 7001-7005, up for 60 s
//! cargo run --profile bench -p redquorum-bench --bin serve
//! ```
//!
//! `REDQUORUM_NODES` picks other nodes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redquorum::{Redlock, Retry};
use redquorum_serve::{Config, Limits, Running, TryLock, Unlock, UnlockStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TASKS: usize = 1000;
const PAIRS_PER_TASK: usize = 10;
const HELD: usize = 20_000;

/// This run's name, in every resource's: a run's locks (held for 30 s) do
/// not meet the next run's.
fn run() -> &'static str {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("{:x}", since.as_micros())
    })
}

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

/// A kept-alive HTTP/1.1 connection, with a client as lean as a load
/// tool's (one buffer each way, reused; one write and, as a rule, one read
/// a request): its CPU is this process's, shared with the service's.
struct Conn {
    stream: TcpStream,
    request: Vec<u8>,
    answer: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            request: Vec::with_capacity(256),
            answer: Vec::with_capacity(512),
        }
    }

    /// POSTs `body` to `path`; the answer's body.
    async fn post(&mut self, path: &str, body: &str) -> String {
        use std::io::Write;
        self.request.clear();
        write!(
            self.request,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        self.stream.write_all(&self.request).await.unwrap();
        self.answer.clear();
        loop {
            if let Some(end) = find(&self.answer, b"\r\n\r\n") {
                let head = &self.answer[..end];
                let length = content_length(head);
                let total = end + 4 + length;
                while self.answer.len() < total {
                    self.read_more().await;
                }
                let body = String::from_utf8(self.answer[end + 4..total].to_vec()).unwrap();
                self.answer.drain(..total);
                return body;
            }
            self.read_more().await;
        }
    }

    async fn read_more(&mut self) {
        let n = self.stream.read_buf(&mut self.answer).await.unwrap();
        assert!(n > 0, "the service closed the connection");
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The `content-length` of an answer's head (0 without one).
fn content_length(head: &[u8]) -> usize {
    head.split(|b| *b == b'\n')
        .find_map(|line| {
            let (name, value) = line.split_at(line.iter().position(|b| *b == b':')?);
            name.eq_ignore_ascii_case(b"content-length")
                .then(|| std::str::from_utf8(&value[1..]).ok()?.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// Runs `TASKS` HTTP clients, `client(t, connection)` for each, on a
/// thread of their own: one current-thread runtime polling every
/// connection, as a load tool in another process would (wrk: one epoll
/// loop), rather than a task each among the service's. The connections
/// are opened first and kept alive, as a client's pool is: the time
/// counted (returned, with the outputs in order) is the requests' alone.
/// A thousand connects at once overflow the listen queue, and a dropped
/// SYN is sent again only after a second: counted, that stall was most
/// of a run's time, and runs differed threefold.
async fn http_clients<F, Fut, T>(addr: SocketAddr, client: F) -> (Duration, Vec<T>)
where
    F: Fn(usize, Conn) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let (done, outputs) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let run = async {
            let conns = futures::future::join_all((0..TASKS).map(|_| Conn::open(addr))).await;
            let start = Instant::now();
            let outputs =
                futures::future::join_all(conns.into_iter().enumerate().map(|(t, c)| client(t, c)))
                    .await;
            (start.elapsed(), outputs)
        };
        let out = runtime.block_on(run);
        CLIENTS_CPU_TICKS.fetch_add(cpu_ticks("/proc/thread-self/stat"), Ordering::Relaxed);
        let _ = done.send(out);
    });
    outputs.await.expect("the clients' thread ends")
}

/// Pairs per second and every pair's time (µs), for `TASKS` tasks.
async fn over_http(addr: SocketAddr, round: usize) -> (f64, Vec<f64>) {
    let (took, times) = http_clients(addr, move |t, mut conn| async move {
        let mut times = Vec::with_capacity(PAIRS_PER_TASK);
        for i in 0..PAIRS_PER_TASK {
            let resource = format!("bench:serve:{}:http:{round}:{t}:{i}", run());
            let t0 = Instant::now();
            let lock =
                format!(r#"{{"resourceId":"{resource}","lockOwner":"o{t}","expiryInSeconds":30}}"#);
            let got = conn.post("/v1.0-alpha1/lock/lockstore", &lock).await;
            assert_eq!(got, r#"{"success":true}"#, "{resource}");
            let unlock = format!(r#"{{"resourceId":"{resource}","lockOwner":"o{t}"}}"#);
            let got = conn.post("/v1.0-alpha1/unlock/lockstore", &unlock).await;
            assert_eq!(got, r#"{"status":0}"#, "{resource}");
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        times
    })
    .await;
    (
        (TASKS * PAIRS_PER_TASK) as f64 / took.as_secs_f64(),
        times.concat(),
    )
}

/// Runs `TASKS` tasks of `PAIRS_PER_TASK` pairs each, `pair(t, resource)`
/// making one try-lock/unlock pair of task `t` on a resource of its own
/// (named for `kind`, `round` and this run): pairs per second and every
/// pair's time (µs).
async fn in_tasks<F, Fut>(kind: &'static str, round: usize, pair: F) -> (f64, Vec<f64>)
where
    F: Fn(usize, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let pair = Arc::new(pair);
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let pair = Arc::clone(&pair);
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(PAIRS_PER_TASK);
                for i in 0..PAIRS_PER_TASK {
                    let resource = format!("bench:serve:{}:{kind}:{round}:{t}:{i}", run());
                    let t0 = Instant::now();
                    pair(t, resource).await;
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

/// The same pairs over Dapr's gRPC API, every task on one HTTP/2
/// connection (as an SDK's client).
async fn over_grpc(addr: SocketAddr, round: usize) -> (f64, Vec<f64>) {
    use redquorum_serve::grpc::pb::{self, dapr_client::DaprClient};
    let client = DaprClient::connect(format!("http://{addr}"))
        .await
        .expect("gRPC connects");
    in_tasks("grpc", round, move |t, resource| {
        let mut client = client.clone();
        async move {
            let got = client
                .try_lock_alpha1(pb::TryLockRequest {
                    store_name: "lockstore".into(),
                    resource_id: resource.clone(),
                    lock_owner: format!("o{t}"),
                    expiry_in_seconds: 30,
                })
                .await
                .unwrap();
            assert!(got.into_inner().success, "{resource}");
            let got = client
                .unlock_alpha1(pb::UnlockRequest {
                    store_name: "lockstore".into(),
                    resource_id: resource.clone(),
                    lock_owner: format!("o{t}"),
                })
                .await
                .unwrap();
            assert_eq!(got.into_inner().status, 0, "{resource}");
        }
    })
    .await
}

/// Requests per second that the service answers without a node call.
async fn http_alone(addr: SocketAddr) -> f64 {
    let (took, _) = http_clients(addr, move |_, mut conn| async move {
        for _ in 0..2 * PAIRS_PER_TASK {
            let got = conn.post("/v1.0-alpha1/lock/none", "{}").await;
            assert!(got.contains("ERR_MALFORMED_REQUEST"), "{got}");
        }
    })
    .await;
    (2 * TASKS * PAIRS_PER_TASK) as f64 / took.as_secs_f64()
}

/// A bare HTTP/1 server (hyper, no router, no JSON, no lock) answering
/// every request `{"success":true}`: the most any HTTP service can answer
/// on this machine with these connections. Its address, and its accept
/// loop, to abort once measured (each connection's task ends with its
/// client's connection).
async fn bare_http() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(hyper::body::Bytes::from_static(
                            br#"{"success":true}"#,
                        )),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, accepting)
}

/// Requests per second that the bare server answers.
async fn bare_rate(addr: SocketAddr) -> f64 {
    let (took, _) = http_clients(addr, move |_, mut conn| async move {
        for _ in 0..2 * PAIRS_PER_TASK {
            let got = conn.post("/", "{}").await;
            assert_eq!(got, r#"{"success":true}"#);
        }
    })
    .await;
    (2 * TASKS * PAIRS_PER_TASK) as f64 / took.as_secs_f64()
}

/// The same pairs through the library.
async fn through_library(redlock: &Redlock, round: usize) -> (f64, Vec<f64>) {
    let redlock = redlock.clone();
    in_tasks("lib", round, move |_, resource| {
        let redlock = redlock.clone();
        async move {
            let lock = redlock
                .try_lock(&resource, Duration::from_secs(30))
                .await
                .unwrap();
            lock.release().await.unwrap();
        }
    })
    .await
}

/// The same pairs through the service's own calls, with no HTTP: what
/// the service adds to the library (owners, the grants table, bounds,
/// metrics) apart from the protocol.
async fn through_service(
    locks: &Arc<redquorum_serve::LockService>,
    round: usize,
) -> (f64, Vec<f64>) {
    let locks = Arc::clone(locks);
    in_tasks("svc", round, move |t, resource| {
        let locks = Arc::clone(&locks);
        async move {
            let granted = locks
                .try_lock(&TryLock {
                    store_name: "lockstore".into(),
                    resource_id: resource.clone(),
                    lock_owner: format!("o{t}"),
                    expiry_in_seconds: 30,
                })
                .await;
            assert_eq!(granted, Ok(true), "{resource}");
            let status = locks
                .unlock(&Unlock {
                    store_name: "lockstore".into(),
                    resource_id: resource.clone(),
                    lock_owner: format!("o{t}"),
                })
                .await;
            assert_eq!(status, Ok(UnlockStatus::Success), "{resource}");
        }
    })
    .await
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

/// The CPU time the HTTP clients' threads spent, in clock ticks: the load
/// tool's share of the process's.
static CLIENTS_CPU_TICKS: AtomicU64 = AtomicU64::new(0);

/// User and system CPU time in a `/proc` stat file, in clock ticks (100 a
/// second here): the 12th and 13th fields after the command's closing
/// parenthesis.
fn cpu_ticks(path: &str) -> u64 {
    let stat = std::fs::read_to_string(path).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// CPU seconds spent so far by this process (service, clients and
/// library together) and by every node (`INFO cpu`), to say where a
/// pair's time goes.
async fn cpu_spent() -> (f64, f64) {
    let ticks = cpu_ticks("/proc/self/stat") as f64;
    let mut nodes = 0.0;
    for url in self::nodes() {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut conn)
            .await
            .unwrap();
        nodes += info
            .lines()
            .filter_map(|l| {
                l.strip_prefix("used_cpu_sys:")
                    .or_else(|| l.strip_prefix("used_cpu_user:"))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum::<f64>();
    }
    (ticks / 100.0, nodes)
}

/// One way of making pairs, measured over its rounds.
#[derive(Default)]
struct Side {
    rate: f64,
    times: Vec<f64>,
    here: f64,
    clients: f64,
    nodes: f64,
}

impl Side {
    /// Runs one round of it, counting its rate, times and CPU.
    async fn round(&mut self, run: impl std::future::Future<Output = (f64, Vec<f64>)>) {
        let clients = CLIENTS_CPU_TICKS.load(Ordering::Relaxed);
        let before = cpu_spent().await;
        let (rate, times) = run.await;
        let after = cpu_spent().await;
        self.clients += (CLIENTS_CPU_TICKS.load(Ordering::Relaxed) - clients) as f64 / 100.0;
        self.rate += rate / 2.0;
        self.times.extend(times);
        self.here += after.0 - before.0;
        self.nodes += after.1 - before.1;
    }

    /// Its rate, latencies and CPU per pair, for `name`.
    fn report(&mut self, name: &str, library: f64) -> String {
        let pairs = (2 * TASKS * PAIRS_PER_TASK) as f64;
        format!(
            "{name}: {:.0} pairs/s (p50 {:.1} ms, p99 {:.1} ms), {:.2}x the library; CPU a pair: {:.0} µs in this process{}, {:.0} µs on the nodes",
            self.rate,
            p(&mut self.times, 50) / 1e3,
            p(&mut self.times, 99) / 1e3,
            self.rate / library,
            self.here / pairs * 1e6,
            if self.clients > 0.0 {
                format!(
                    " ({:.0} µs of it the HTTP clients')",
                    self.clients / pairs * 1e6
                )
            } else {
                String::new()
            },
            self.nodes / pairs * 1e6,
        )
    }
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
        resource_id: format!("bench:serve:{}:held:{n}", run()),
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
        let (bare_addr, bare_server) = bare_http().await;
        let bare = bare_rate(bare_addr).await;
        bare_server.abort();
        // Interleaved rounds, so that the machine's load hits all alike.
        let (mut h, mut g, mut s, mut l) = Default::default();
        for round in 0..2 {
            Side::round(&mut h, over_http(running.http_addr(), round)).await;
            Side::round(&mut g, over_grpc(running.grpc_addr(), round)).await;
            Side::round(&mut s, through_service(running.locks(), round)).await;
            Side::round(&mut l, through_library(&library, round)).await;
        }
        let library_rate = l.rate;
        println!("{TASKS} tasks at once, {PAIRS_PER_TASK} try-lock/unlock pairs each, twice:");
        println!("{}", h.report("over HTTP/1 (Dapr's API, a connection a task)", library_rate));
        println!("{}", g.report("over gRPC (Dapr's API, one HTTP/2 connection)", library_rate));
        println!("{}", s.report("the service's own calls (no protocol)", library_rate));
        println!("{}", l.report("the library", library_rate));
        println!(
            "HTTP alone (refused before any node call): {null_rate:.0} requests/s, so at most {:.0} pairs/s with no lock work",
            null_rate / 2.0
        );
        println!(
            "a bare HTTP/1 server (hyper, a fixed answer): {bare:.0} requests/s, so at most {:.0} pairs/s for any HTTP service here",
            bare / 2.0
        );
        let (service, node) = memory_per_lock(running.locks()).await;
        println!(
            "{HELD} locks held through the service: {service:.0} bytes each in the service, {node:.0} bytes each on a node"
        );
        running.shutdown().await;
        library.shutdown().await;
    });
}
