//! Side by side on the same five Redis masters, in one process, interleaved:
//! redquorum, `rslock` (the best Rust peer on crates.io) and a raw `redis`
//! floor (`SET NX PX` to all five nodes at once, waiting for every reply, then
//! the release script on all five, again waiting for every reply).
//!
//! ```text
//! export REDQUORUM_BASE_PORT=7200 REDQUORUM_STATE_DIR=/tmp/rq-nodes-bench
//! scripts/nodes up
//! export REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=$PWD/scripts/nodes
//! cargo bench --bench compare
//! ```
//!
//! For each scenario (all healthy; node 3 frozen with `scripts/nodes freeze 3`;
//! node 5 behind a proxy adding 10 ms each way, +20 ms per round trip) it
//! measures, per client:
//!
//! - a lone client doing lock+release back to back: p50, p99, heap
//!   allocations per cycle (a counting global allocator);
//! - throughput with 1, 16, 64 and 256 tasks, each on its own key, plus peak
//!   RSS and peak heap growth at 256 tasks;
//! - hand-offs per second with 8 tasks contending for one key (retry pauses
//!   drawn from 0-10 ms for all three clients).
//!
//! Every phase is bounded in time (and the lone phase in count too), so a
//! client that stalls on a frozen node cannot hang the run; cycles cut short
//! are reported. Each phase gives every client four slices of a quarter of
//! its time, in the order A B C, C B A, A B C, C B A, so that changes in the
//! machine's load during the run favour nobody.
//!
//! Environment:
//! - `REDQUORUM_NODES` (required): five comma-separated URLs.
//! - `REDQUORUM_SCRIPTS_NODES`: `scripts/nodes` to freeze/thaw with (default:
//!   this repository's). Keep `REDQUORUM_BASE_PORT`/`REDQUORUM_STATE_DIR`
//!   exported: the script reads them. The bench refuses to freeze anything
//!   unless `scripts/nodes urls` prints exactly `REDQUORUM_NODES`.
//! - `REDQUORUM_BENCH_SECS`: seconds per client per phase (default 2).
//! - `REDQUORUM_BENCH_SCENARIOS`: any of `healthy,frozen,slow` (default all).
//! - `REDQUORUM_BENCH_CLIENTS`: any of `redquorum,rslock,raw` (default all;
//!   one alone is for profiling).
//! - `REDQUORUM_BENCH_PHASES`: any of `lone,load,contention` (default all).
//! - `REDQUORUM_BENCH_NODE_TIMEOUT_MS`: node timeout for redquorum and the
//!   floor (default 50 ms); only for profiling under valgrind.
//! - `REDQUORUM_BENCH_CHART`: where to write the SVG chart (default
//!   `docs/throughput.svg`; `none` to skip).
//!
//! Run by `cargo test --all-targets` (no `--bench` argument) it only prints
//! that it skipped, so the test suite stays fast and needs no peer library
//! behaviour.

#[path = "../tests/support/proxy.rs"]
#[allow(dead_code)] // the bench adds latency, never cuts
mod proxy;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redquorum::{LockError, Redlock, Retry};
use tokio::time::Instant;

// ------------------------------------------------------------ allocator --

/// Counts every allocation (`alloc`, `alloc_zeroed` and `realloc` calls) and
/// tracks live and peak heap bytes. Threads that set [`UNCOUNTED`] (the
/// latency proxy's) are left out.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static UNCOUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    !UNCOUNTED.try_with(Cell::get).unwrap_or(true)
}

fn grow(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping uses only atomics and a const thread-local without destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            if new_size >= layout.size() {
                grow(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Resets the peak heap and peak RSS marks; returns the live heap now.
fn reset_peaks() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    // "5" resets the peak resident set size (VmHWM) of the process.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    live
}

/// Peak RSS (VmHWM) of the process in bytes.
fn peak_rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user + system) used so far by this process, all threads.
fn process_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// CPU time used so far by the Redis servers, when they are local processes
/// started by `scripts/nodes` (their pid files are under
/// `REDQUORUM_STATE_DIR`); `None` otherwise (e.g. Docker nodes).
fn servers_cpu() -> Option<Duration> {
    let dir = std::env::var("REDQUORUM_STATE_DIR").ok()?;
    let mut total = Duration::ZERO;
    for n in 1..=5 {
        let pid = std::fs::read_to_string(format!("{dir}/{n}/redis.pid")).ok()?;
        total += cpu_of(&format!("/proc/{}/stat", pid.trim()));
    }
    Some(total)
}

/// utime + stime of a `/proc/PID/stat` file (clock ticks of 10 ms).
fn cpu_of(path: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

/// Client and server CPU over a phase.
#[derive(Default, Clone, Copy)]
struct Cpu {
    client: Duration,
    servers: Option<Duration>,
}

impl Cpu {
    fn start() -> (Duration, Option<Duration>) {
        (process_cpu(), servers_cpu())
    }

    fn since(start: (Duration, Option<Duration>)) -> Cpu {
        Cpu {
            client: process_cpu().saturating_sub(start.0),
            servers: servers_cpu()
                .zip(start.1)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }

    fn add(&mut self, o: Cpu) {
        self.client += o.client;
        self.servers = match (self.servers, o.servers) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

// -------------------------------------------------------------- clients --

const TTL: Duration = Duration::from_secs(10);
/// Upper bound of the random pause between contended retries, for all three.
const RETRY_MAX: Duration = Duration::from_millis(10);
/// The raw floor's per-request timeout: redquorum's default node timeout.
const RAW_TIMEOUT: Duration = Duration::from_millis(50);
const RELEASE_LUA: &str = include_str!("../src/scripts/release.lua");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Redquorum,
    Rslock,
    Raw,
}

const CLIENTS: [Which; 3] = [Which::Redquorum, Which::Rslock, Which::Raw];

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Redquorum => "redquorum",
            Which::Rslock => "rslock",
            Which::Raw => "raw floor",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Which::Redquorum => "redquorum",
            Which::Rslock => "rslock",
            Which::Raw => "raw",
        }
    }
}

enum Client {
    Redquorum(Redlock),
    Rslock(rslock::LockManager),
    Raw(Raw),
}

/// The floor: what five concurrent round trips cost, waiting for all.
struct Raw {
    conns: Vec<MultiplexedConnection>,
    release_sha: String,
}

impl Raw {
    async fn connect(urls: &[String]) -> Raw {
        let timeout = profiling_timeout().unwrap_or(RAW_TIMEOUT);
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        let mut conns = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("node URL");
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap_or_else(|e| panic!("raw floor: cannot connect to {url}: {e}"));
            conns.push(conn);
        }
        let release_sha = redis::Script::new(RELEASE_LUA).get_hash().to_owned();
        for conn in &mut conns {
            let _: Value = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE_LUA)
                .query_async(conn)
                .await
                .expect("SCRIPT LOAD");
        }
        Raw { conns, release_sha }
    }

    /// One round: `SET NX PX` everywhere, then the release script everywhere
    /// unless `keep`; true if a majority set the key.
    async fn round(&self, key: &str, token: &str, keep: bool) -> bool {
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64);
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let set = &set;
            async move { c.send_packed_command(set).await }
        }))
        .await;
        let yes = replies
            .iter()
            .filter(|r| matches!(r, Ok(Value::Okay)))
            .count();
        let granted = yes > self.conns.len() / 2;
        if !granted || !keep {
            self.release(key, token).await;
        }
        granted
    }

    async fn release(&self, key: &str, token: &str) {
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.release_sha).arg(1).arg(key).arg(token);
        join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let del = &del;
            async move { c.send_packed_command(del).await }
        }))
        .await;
    }
}

/// `REDQUORUM_BENCH_NODE_TIMEOUT_MS`: a longer node timeout for redquorum and
/// the floor, only to profile them under valgrind (which runs ~50x slower).
fn profiling_timeout() -> Option<Duration> {
    std::env::var("REDQUORUM_BENCH_NODE_TIMEOUT_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

fn raw_key(resource: &str) -> String {
    format!("{{{resource}}}:lock")
}

fn raw_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Client {
    async fn connect(which: Which, urls: &[String]) -> Client {
        match which {
            Which::Redquorum => {
                let mut builder = Redlock::builder()
                    .nodes(urls)
                    .retry(Retry::new(3, RETRY_MAX));
                if let Some(timeout) = profiling_timeout() {
                    builder = builder.node_timeout(timeout);
                }
                Client::Redquorum(builder.build().await.expect("redquorum build"))
            }
            Which::Rslock => {
                let mut manager = rslock::LockManager::new(urls.to_vec());
                manager.set_retry(3, RETRY_MAX);
                Client::Rslock(manager)
            }
            Which::Raw => Client::Raw(Raw::connect(urls).await),
        }
    }

    /// One lock attempt (a single round, no retry) and its release.
    async fn cycle(&self, resource: &str) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.try_lock(resource, TTL).await.map_err(short)?;
                lock.release().await.map_err(short)
            }
            Client::Rslock(m) => {
                // Retry count 1: `lock` makes exactly one attempt.
                let lock = lock_once(m, resource).await?;
                m.unlock(&lock).await;
                Ok(())
            }
            Client::Raw(raw) => {
                let key = raw_key(resource);
                if raw.round(&key, &raw_token(), false).await {
                    Ok(())
                } else {
                    Err("no majority".into())
                }
            }
        }
    }

    /// Acquires `resource` with each client's own retry loop (pauses of up
    /// to 10 ms), runs `section`, releases. Stops trying at `until`.
    async fn contend(
        &self,
        resource: &str,
        until: Instant,
        section: impl FnOnce(),
    ) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let wait = until.saturating_duration_since(Instant::now());
                let lock = r.lock_wait(resource, TTL, wait).await.map_err(short)?;
                section();
                lock.release().await.map_err(short)
            }
            Client::Rslock(m) => {
                // `acquire` loops until it has the lock; the caller bounds it.
                let guard = m.acquire(resource, TTL).await.map_err(|e| e.to_string())?;
                section();
                guard.release().await;
                Ok(())
            }
            Client::Raw(raw) => {
                let key = raw_key(resource);
                let token = raw_token();
                loop {
                    if raw.round(&key, &token, true).await {
                        break;
                    }
                    if Instant::now() >= until {
                        return Err("timed out".into());
                    }
                    let pause = rand::random_range(0..=RETRY_MAX.as_micros() as u64);
                    tokio::time::sleep(Duration::from_micros(pause)).await;
                }
                section();
                raw.release(&key, &token).await;
                Ok(())
            }
        }
    }
}

async fn lock_once(m: &rslock::LockManager, resource: &str) -> Result<rslock::Lock, String> {
    let mut once = m.clone();
    once.set_retry(1, RETRY_MAX);
    once.lock(resource.as_bytes(), TTL)
        .await
        .map_err(|e| e.to_string())
}

fn short(e: LockError) -> String {
    match e {
        LockError::Taken { .. } => "taken".into(),
        LockError::Unavailable { .. } => "unavailable".into(),
        LockError::Expired { .. } => "expired".into(),
        LockError::Timeout { .. } => "timeout".into(),
        other => other.to_string(),
    }
}

// --------------------------------------------------------------- phases --

#[derive(Default, Clone)]
struct Lone {
    latencies: Vec<Duration>,
    errors: u64,
    allocs: u64,
    cpu: Cpu,
    /// A cycle was still running when the phase's time ran out.
    cut: bool,
    first_error: Option<String>,
}

impl Lone {
    fn merge(&mut self, other: Lone) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.allocs += other.allocs;
        self.cpu.add(other.cpu);
        self.cut |= other.cut;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn allocs_per_cycle(&self) -> f64 {
        self.allocs as f64 / self.latencies.len().max(1) as f64
    }
}

const LONE_MAX_CYCLES: usize = 200_000;
/// How long a cycle still running when a phase's time is up may take to
/// finish before it is dropped and reported as cut short.
const GRACE: Duration = Duration::from_secs(3);

/// A lone client: lock+release back to back, at most `LONE_MAX_CYCLES`
/// cycles or until `until`, whichever first (the last cycle may finish
/// within `GRACE`).
async fn lone(client: &Client, resource: &str, until: Instant) -> Lone {
    let mut out = Lone {
        latencies: Vec::with_capacity(LONE_MAX_CYCLES),
        ..Lone::default()
    };
    let before = ALLOCS.load(Ordering::Relaxed);
    let cpu = Cpu::start();
    while out.latencies.len() < LONE_MAX_CYCLES && Instant::now() < until {
        let start = Instant::now();
        match tokio::time::timeout_at(until + GRACE, client.cycle(resource)).await {
            Ok(Ok(())) => out.latencies.push(start.elapsed()),
            Ok(Err(e)) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
            Err(_) => out.cut = true,
        }
    }
    out.allocs = ALLOCS.load(Ordering::Relaxed) - before;
    out.cpu = Cpu::since(cpu);
    out
}

#[derive(Default, Clone)]
struct Load {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    cpu: Cpu,
    /// Cycles still running when time ran out (dropped).
    cut: u64,
    secs: f64,
    peak_heap: usize,
    peak_rss: usize,
}

impl Load {
    fn merge(&mut self, o: Load) {
        self.ok += o.ok;
        self.errors += o.errors;
        self.first_error = self.first_error.take().or(o.first_error);
        self.cpu.add(o.cpu);
        self.cut += o.cut;
        self.secs += o.secs;
        self.peak_heap = self.peak_heap.max(o.peak_heap);
        self.peak_rss = self.peak_rss.max(o.peak_rss);
    }

    fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ok as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// `tasks` tasks, each looping lock+release on a key of its own; none
/// starts a cycle after `dur`. The rate is over the time until the last
/// cycle ended; a cycle still running `GRACE` after `dur` is dropped and
/// counted as cut short.
async fn throughput(client: &Arc<Client>, tag: &str, tasks: usize, dur: Duration) -> Load {
    let base = reset_peaks();
    let cpu = Cpu::start();
    let start = Instant::now();
    let until = start + dur;
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let client = Arc::clone(client);
            let resource = format!("{tag}:{i}");
            tokio::spawn(async move {
                let (mut ok, mut errors, mut first) = (0u64, 0u64, None);
                while Instant::now() < until {
                    match tokio::time::timeout_at(until + GRACE, client.cycle(&resource)).await {
                        Ok(Ok(())) => ok += 1,
                        Ok(Err(e)) => {
                            errors += 1;
                            first.get_or_insert(e);
                        }
                        Err(_) => return (ok, errors, first, 1u64),
                    }
                }
                (ok, errors, first, 0)
            })
        })
        .collect();
    let mut load = Load::default();
    for h in handles {
        let (ok, errors, first, cut) = h.await.expect("throughput task panicked");
        load.ok += ok;
        load.errors += errors;
        load.first_error = load.first_error.take().or(first);
        load.cut += cut;
    }
    load.secs = start.elapsed().as_secs_f64();
    load.cpu = Cpu::since(cpu);
    load.peak_heap = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    load.peak_rss = peak_rss();
    load
}

#[derive(Default, Clone, Copy)]
struct Contention {
    grants: u64,
    errors: u64,
    /// Acquisitions still running `GRACE` after the phase (dropped).
    cut: u64,
    overlaps: u64,
    secs: f64,
}

const CONTENDERS: usize = 8;

/// `CONTENDERS` tasks hand one key around for `dur`.
async fn contention(client: &Arc<Client>, resource: &str, dur: Duration) -> Contention {
    let start = Instant::now();
    let until = start + dur;
    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let client = Arc::clone(client);
            let resource = resource.to_owned();
            let (busy, overlaps) = (busy.clone(), overlaps.clone());
            tokio::spawn(async move {
                let (mut grants, mut errors) = (0u64, 0u64);
                while Instant::now() < until {
                    let section = || {
                        if busy.swap(true, Ordering::SeqCst) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        busy.store(false, Ordering::SeqCst);
                    };
                    match tokio::time::timeout_at(
                        until + GRACE,
                        client.contend(&resource, until, section),
                    )
                    .await
                    {
                        Ok(Ok(())) => grants += 1,
                        Ok(Err(_)) => errors += 1,
                        Err(_) => return (grants, errors, 1u64),
                    }
                }
                (grants, errors, 0)
            })
        })
        .collect();
    let mut out = Contention::default();
    for h in handles {
        let (g, e, cut) = h.await.expect("contention task panicked");
        out.grants += g;
        out.errors += e;
        out.cut += cut;
    }
    out.secs = start.elapsed().as_secs_f64();
    out.overlaps = overlaps.load(Ordering::SeqCst);
    out
}

// ------------------------------------------------------------ scenarios --

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Healthy,
    Frozen,
    Slow,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "all healthy",
            Scenario::Frozen => "node 3 frozen",
            Scenario::Slow => "node 5 +20 ms",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::Frozen => "frozen",
            Scenario::Slow => "slow",
        }
    }
}

const CONCURRENCY: [usize; 4] = [1, 16, 64, 256];
/// Which node is frozen (1-based), and which sits behind the slow proxy.
const FROZEN_NODE: usize = 3;
const SLOW_NODE: usize = 5;

#[derive(Default, Clone)]
struct Results {
    lone: [Lone; 3],
    load: [[Load; 4]; 3],
    contention: [Contention; 3],
}

/// Slices per client per phase.
const SLICES: usize = 4;

/// The order of the slices: A B C, C B A, A B C, C B A (only the clients
/// in `REDQUORUM_BENCH_CLIENTS`, default all, e.g. for a profile).
fn slices() -> impl Iterator<Item = usize> {
    let only = std::env::var("REDQUORUM_BENCH_CLIENTS").unwrap_or_default();
    (0..SLICES)
        .flat_map(|k| if k % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] })
        .filter(move |&i| only.is_empty() || only.split(',').any(|w| w.trim() == CLIENTS[i].tag()))
}

async fn run_scenario(scenario: Scenario, urls: &[String], secs: f64) -> Results {
    let slice = Duration::from_secs_f64(secs / SLICES as f64);
    let run = format!("bench:{}:{}", std::process::id(), scenario.tag());

    // The slow node is reached through a proxy on a thread of its own, so
    // that its copying neither competes with the clients' runtime nor shows
    // up in their allocation counts.
    let mut urls = urls.to_vec();
    let proxy = if scenario == Scenario::Slow {
        let (proxy, url) = SlowProxy::start(&urls[SLOW_NODE - 1], Duration::from_millis(10));
        urls[SLOW_NODE - 1] = url;
        Some(proxy)
    } else {
        None
    };

    let mut clients = Vec::new();
    for which in CLIENTS {
        let client = Arc::new(Client::connect(which, &urls).await);
        // Warm up: connections up, scripts cached, before any fault.
        for i in 0..20 {
            if let Err(e) = client.cycle(&format!("{run}:warmup:{i}")).await {
                panic!("{}: warm-up cycle failed: {e}", which.name());
            }
        }
        clients.push(client);
    }

    let _frozen = (scenario == Scenario::Frozen).then(|| Frozen::new(FROZEN_NODE));
    let mut res = Results::default();

    let phases = std::env::var("REDQUORUM_BENCH_PHASES").unwrap_or_default();
    let phase = |p: &str| phases.is_empty() || phases.split(',').any(|w| w.trim() == p);
    println!(
        "[{}] lone client, lock+release back to back",
        scenario.tag()
    );
    for (pass, i) in slices().enumerate().filter(|_| phase("lone")) {
        let until = Instant::now() + slice;
        let l = lone(&clients[i], &format!("{run}:lone:{i}:{pass}"), until).await;
        res.lone[i].merge(l);
    }
    for (c, &tasks) in CONCURRENCY.iter().enumerate() {
        println!(
            "[{}] throughput, {tasks} tasks on distinct keys",
            scenario.tag()
        );
        for (pass, i) in slices().enumerate().filter(|_| phase("load")) {
            let tag = format!("{run}:load{tasks}:{i}:{pass}");
            let l = throughput(&clients[i], &tag, tasks, slice).await;
            res.load[i][c].merge(l);
        }
    }
    println!(
        "[{}] contention, {CONTENDERS} tasks on one key",
        scenario.tag()
    );
    for (pass, i) in slices().enumerate().filter(|_| phase("contention")) {
        let resource = format!("{run}:contended:{i}:{pass}");
        let c = contention(&clients[i], &resource, slice).await;
        let r = &mut res.contention[i];
        r.grants += c.grants;
        r.errors += c.errors;
        r.overlaps += c.overlaps;
        r.cut += c.cut;
        r.secs += c.secs;
    }
    drop(_frozen);
    drop(proxy);
    res
}

/// A latency proxy on its own thread and runtime.
struct SlowProxy {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowProxy {
    fn start(upstream_url: &str, one_way: Duration) -> (SlowProxy, String) {
        let upstream = upstream_url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            UNCOUNTED.with(|u| u.set(true));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let proxy = proxy::Proxy::start(&upstream).await;
                proxy.set_latency(one_way);
                url_tx.send(proxy.url()).expect("send proxy url");
                let _ = stopped.await;
            });
        });
        let url = url_rx.recv().expect("proxy started");
        (
            SlowProxy {
                stop: Some(stop),
                thread: Some(thread),
            },
            url,
        )
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// --------------------------------------------------------------- faults --

fn nodes_script() -> String {
    std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/nodes").to_owned())
}

fn run_nodes(action: &str, node: usize) -> bool {
    matches!(
        Command::new(nodes_script()).args([action, &node.to_string()]).status(),
        Ok(s) if s.success()
    )
}

/// Node `n` frozen (SIGSTOP / docker pause) until dropped, also on panic.
struct Frozen(usize);

/// The node currently frozen, for the Ctrl-C handler (0: none).
static FROZEN_NOW: AtomicUsize = AtomicUsize::new(0);

impl Frozen {
    fn new(n: usize) -> Frozen {
        FROZEN_NOW.store(n, Ordering::SeqCst);
        let guard = Frozen(n);
        assert!(run_nodes("freeze", n), "scripts/nodes freeze {n} failed");
        guard
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !run_nodes("thaw", self.0) {
            eprintln!(
                "!! could not thaw node {}: run `{} thaw {}`",
                self.0,
                nodes_script(),
                self.0
            );
        }
        FROZEN_NOW.store(0, Ordering::SeqCst);
    }
}

/// Whether `scripts/nodes` manages exactly the nodes in `REDQUORUM_NODES`:
/// never freeze someone else's cluster.
fn script_matches(urls: &[String]) -> Result<(), String> {
    let out = Command::new(nodes_script())
        .arg("urls")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nodes_script()))?;
    let listed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if listed == urls.join(",") {
        Ok(())
    } else {
        Err(format!(
            "`{} urls` prints {listed:?}, not REDQUORUM_NODES {:?} \
             (export REDQUORUM_BASE_PORT / REDQUORUM_STATE_DIR as for `scripts/nodes up`)",
            nodes_script(),
            urls.join(",")
        ))
    }
}

// -------------------------------------------------------------- reports --

fn pct(samples: &[Duration], p: usize) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    Some(s[(s.len() - 1) * p / 100])
}

fn ms(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(100) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1e3),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// " (3 err: taken, 2 cut)" when a phase had failed or cut-short cycles.
fn notes(errors: u64, first: Option<&String>, cut: u64) -> String {
    let err = match first {
        Some(e) if errors > 0 => format!("{errors} err: {e}"),
        _ => format!("{errors} err"),
    };
    match (errors, cut) {
        (0, 0) => String::new(),
        (_, 0) => format!(" ({err})"),
        (0, c) => format!(" ({c} cut)"),
        (_, c) => format!(" ({err}, {c} cut)"),
    }
}

/// CPU per completed cycle, in µs.
fn per_cycle(cpu: Option<Duration>, cycles: u64) -> String {
    match cpu {
        Some(cpu) if cycles > 0 => format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / cycles as f64),
        _ => "-".into(),
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// One markdown table per scenario: a row per figure, a column per client,
/// then redquorum's ratio to rslock and to the floor (higher = redquorum
/// better).
fn table(scenario: Scenario, r: &Results) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "### {}\n", scenario.name());
    let _ = writeln!(
        t,
        "| figure | redquorum | rslock | raw floor | rq vs rslock | rq vs floor |"
    );
    let _ = writeln!(t, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let row = |t: &mut String, name: &str, cells: [String; 3], vs: [String; 2]| {
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {} | {} | {} |",
            cells[0], cells[1], cells[2], vs[0], vs[1]
        );
    };
    for (p, label) in [(50, "p50"), (99, "p99")] {
        let v: Vec<Option<Duration>> = r.lone.iter().map(|l| pct(&l.latencies, p)).collect();
        let s = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
        row(
            &mut t,
            &format!("lone lock+release {label}"),
            [ms(v[0]), ms(v[1]), ms(v[2])],
            [ratio(s(v[1]), s(v[0])), ratio(s(v[2]), s(v[0]))],
        );
    }
    let cells = |f: &dyn Fn(usize) -> String| [f(0), f(1), f(2)];
    row(
        &mut t,
        "lone cycles",
        cells(&|i| {
            let l = &r.lone[i];
            format!(
                "{}{}",
                l.latencies.len(),
                notes(l.errors, l.first_error.as_ref(), u64::from(l.cut))
            )
        }),
        ["".into(), "".into()],
    );
    row(
        &mut t,
        "heap allocations per cycle",
        cells(&|i| format!("{:.1}", r.lone[i].allocs_per_cycle())),
        [
            ratio(r.lone[1].allocs_per_cycle(), r.lone[0].allocs_per_cycle()),
            ratio(r.lone[2].allocs_per_cycle(), r.lone[0].allocs_per_cycle()),
        ],
    );
    for (c, tasks) in CONCURRENCY.iter().enumerate() {
        let rate = |i: usize| r.load[i][c].rate();
        row(
            &mut t,
            &format!("cycles/s, {tasks} tasks"),
            cells(&|i| {
                let l = &r.load[i][c];
                format!(
                    "{:.0}{}",
                    l.rate(),
                    notes(l.errors, l.first_error.as_ref(), l.cut)
                )
            }),
            [ratio(rate(0), rate(1)), ratio(rate(0), rate(2))],
        );
    }
    row(
        &mut t,
        "client CPU per cycle, lone",
        cells(&|i| per_cycle(Some(r.lone[i].cpu.client), r.lone[i].latencies.len() as u64)),
        ["".into(), "".into()],
    );
    for tasks in [64, 256] {
        let c = CONCURRENCY.iter().position(|&c| c == tasks).unwrap_or(0);
        let cycles = |i: usize| r.load[i][c].ok;
        let cpu_client = |i: usize| r.load[i][c].cpu.client.as_secs_f64() / cycles(i).max(1) as f64;
        let cpu_servers = |i: usize| {
            r.load[i][c]
                .cpu
                .servers
                .map_or(0.0, |d| d.as_secs_f64() / cycles(i).max(1) as f64)
        };
        row(
            &mut t,
            &format!("client CPU per cycle, {tasks} tasks"),
            cells(&|i| per_cycle(Some(r.load[i][c].cpu.client), cycles(i))),
            [
                ratio(cpu_client(1), cpu_client(0)),
                ratio(cpu_client(2), cpu_client(0)),
            ],
        );
        row(
            &mut t,
            &format!("Redis CPU per cycle (5 servers), {tasks} tasks"),
            cells(&|i| per_cycle(r.load[i][c].cpu.servers, cycles(i))),
            [
                ratio(cpu_servers(1), cpu_servers(0)),
                ratio(cpu_servers(2), cpu_servers(0)),
            ],
        );
    }
    let last = CONCURRENCY.len() - 1;
    row(
        &mut t,
        "peak RSS (process), 256 tasks",
        cells(&|i| mib(r.load[i][last].peak_rss)),
        ["".into(), "".into()],
    );
    row(
        &mut t,
        "peak heap growth, 256 tasks",
        cells(&|i| mib(r.load[i][last].peak_heap)),
        ["".into(), "".into()],
    );
    let g = |i: usize| {
        let c = &r.contention[i];
        c.grants as f64 / c.secs.max(f64::MIN_POSITIVE)
    };
    row(
        &mut t,
        &format!("hand-offs/s, {CONTENDERS} tasks on one key"),
        cells(&|i| {
            let c = &r.contention[i];
            let mut s = format!("{:.0}{}", g(i), notes(c.errors, None, c.cut));
            if c.overlaps > 0 {
                let _ = write!(s, " ({} OVERLAPS)", c.overlaps);
            }
            s
        }),
        [ratio(g(0), g(1)), ratio(g(0), g(2))],
    );
    t
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn targets(all: &[(Scenario, Results)]) -> String {
    let mut t = String::new();
    let get = |s: Scenario| all.iter().find(|(x, _)| *x == s).map(|(_, r)| r);
    let p50 = |l: &Lone| pct(&l.latencies, 50).map_or(f64::NAN, |d| d.as_secs_f64());
    if let Some(h) = get(Scenario::Healthy) {
        let x = p50(&h.lone[1]) / p50(&h.lone[0]);
        let _ = writeln!(
            t,
            "- lone lock+release p50, rslock / redquorum: {x:.2}x (target >= 1.25x): {}",
            verdict(x >= 1.25)
        );
        let c64 = CONCURRENCY.iter().position(|&c| c == 64).unwrap_or(0);
        let rq = h.load[0][c64].rate();
        let a = rq / h.load[1][c64].rate();
        let b = rq / h.load[2][c64].rate();
        let _ = writeln!(
            t,
            "- throughput at 64 tasks, redquorum / rslock: {a:.2}x (target >= 2x): {}",
            verdict(a >= 2.0)
        );
        let _ = writeln!(
            t,
            "- throughput at 64 tasks, redquorum / raw floor: {b:.2}x (target >= 1.3x): {}",
            verdict(b >= 1.3)
        );
        let allocs = h.lone[0].allocs_per_cycle();
        let _ = writeln!(
            t,
            "- heap allocations per lock+release cycle: {allocs:.1} (target <= 40): {}",
            verdict(allocs <= 40.0)
        );
        if let Some(f) = get(Scenario::Frozen) {
            let x = p50(&f.lone[0]) / p50(&h.lone[0]);
            let _ = writeln!(
                t,
                "- 1 of 5 frozen / healthy, redquorum lone p50: {x:.2}x (target <= 1.5x): {} \
                 (rslock: {} per cycle frozen)",
                verdict(x <= 1.5),
                ms(pct(&f.lone[1].latencies, 50))
            );
        }
    }
    t
}

// ---------------------------------------------------------------- chart --

fn chart(path: &str, all: &[(Scenario, Results)]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let colors = [
        RGBColor(200, 30, 45),
        RGBColor(40, 90, 180),
        RGBColor(110, 110, 110),
    ];
    let root = SVGBackend::new(path, (420 * all.len() as u32, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let rates = || {
        all.iter()
            .flat_map(|(_, r)| r.load.iter().flatten().map(Load::rate))
    };
    let max = rates().fold(1.0f64, f64::max);
    let min = rates().filter(|&r| r > 0.0).fold(max, f64::min);
    let floor = (min / 2.0).max(0.1);
    let panels = root.split_evenly((1, all.len()));
    for (area, (scenario, r)) in panels.iter().zip(all) {
        let mut chart = ChartBuilder::on(area)
            .caption(scenario.name(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((1u32..300u32).log_scale(), (floor..max * 2.0).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("concurrent tasks (distinct keys)")
            .y_desc("lock+release cycles/s")
            .x_label_formatter(&|x| x.to_string())
            .y_label_formatter(&|y| {
                if *y < 1.0 {
                    format!("{y:.1}")
                } else {
                    format!("{y:.0}")
                }
            })
            .draw()?;
        for (i, which) in CLIENTS.iter().enumerate() {
            let color = colors[i];
            let points: Vec<(u32, f64)> = CONCURRENCY
                .iter()
                .zip(&r.load[i])
                .map(|(&c, l)| (c as u32, l.rate().max(floor)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(which.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

// ----------------------------------------------------------------- main --

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("compare: skipped (not run by `cargo bench`); run `cargo bench --bench compare`");
        return;
    }
    let nodes = std::env::var("REDQUORUM_NODES").unwrap_or_else(|_| {
        eprintln!(
            "compare: REDQUORUM_NODES is not set. It needs five Redis masters:\n  \
             export REDQUORUM_BASE_PORT=7200 REDQUORUM_STATE_DIR=/tmp/rq-nodes-bench\n  \
             scripts/nodes up\n  \
             export REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=$PWD/scripts/nodes"
        );
        std::process::exit(2);
    });
    let urls: Vec<String> = nodes.split(',').map(|s| s.trim().to_owned()).collect();
    assert_eq!(urls.len(), 5, "REDQUORUM_NODES must list five nodes");
    let secs: f64 = std::env::var("REDQUORUM_BENCH_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("REDQUORUM_BENCH_SECS: a number of seconds")
        })
        .unwrap_or(2.0);
    let wanted =
        std::env::var("REDQUORUM_BENCH_SCENARIOS").unwrap_or_else(|_| "healthy,frozen,slow".into());
    let mut scenarios: Vec<Scenario> = [Scenario::Healthy, Scenario::Frozen, Scenario::Slow]
        .into_iter()
        .filter(|s| wanted.split(',').any(|w| w.trim() == s.tag()))
        .collect();
    if scenarios.contains(&Scenario::Frozen)
        && let Err(e) = script_matches(&urls)
    {
        eprintln!("compare: not freezing anything: {e}");
        scenarios.retain(|s| *s != Scenario::Frozen);
    }
    let chart_path = std::env::var("REDQUORUM_BENCH_CHART")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/docs/throughput.svg").into());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "compare: {} nodes, ttl {TTL:?}, {secs} s per client per phase, scenarios {:?}, \
         client runtime: tokio multi-thread, {} workers",
        urls.len(),
        scenarios.iter().map(|s| s.tag()).collect::<Vec<_>>(),
        runtime.metrics().num_workers()
    );
    let started = std::time::Instant::now();
    let all = runtime.block_on(async {
        // Ctrl-C: thaw before leaving (Drop does not run on a signal).
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                let n = FROZEN_NOW.load(Ordering::SeqCst);
                if n != 0 {
                    run_nodes("thaw", n);
                }
                std::process::exit(130);
            }
        });
        let mut all = Vec::new();
        for &s in &scenarios {
            let r = run_scenario(s, &urls, secs).await;
            all.push((s, r));
            // Let a thawed node drain its backlog before the next scenario.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        all
    });

    println!();
    for (s, r) in &all {
        println!("{}", table(*s, r));
    }
    println!("Targets (same run):\n{}", targets(&all));
    if chart_path != "none" {
        match chart(&chart_path, &all) {
            Ok(()) => println!("chart: {chart_path}"),
            Err(e) => eprintln!("chart: could not write {chart_path}: {e}"),
        }
    }
    println!("total {:.0} s", started.elapsed().as_secs_f64());
}
