//! Shared helpers for the tests that run on the five real Redis nodes.
//!
//! The nodes come from `REDQUORUM_NODES` (comma-separated URLs, set by
//! `scripts/test`). Without it these tests fail loudly: a lock test that
//! passes without Redis proves nothing.
#![allow(dead_code, unused_imports)] // each test binary uses a different part

pub mod acl;
pub mod cluster;
pub mod memory;

pub use redquorum_test_support::{
    adopt, kill_clients, load, node_proxies, node_urls, patient, proxy, raw, raw_all, redlock,
    script_calls, set_px_everywhere, unique, until_in_line,
};

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::RngExt;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redquorum::Redlock;

/// A client whose links to the five nodes go through test proxies (to cut
/// or slow one node's links without touching the shared nodes), with
/// `node_timeout`.
pub async fn proxied(node_timeout: Duration) -> (Vec<proxy::Proxy>, Redlock) {
    let proxies = node_proxies().await;
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(proxy::Proxy::url))
        .node_timeout(node_timeout)
        .trust_durable_restarts(true)
        .build()
        .await
        .expect("connect through the proxies");
    (proxies, redlock)
}

/// Runs `work` under random minority faults on `proxies` (see
/// [`proxy_chaos`]); its output and how many link faults were injected.
pub async fn under_chaos<T>(
    proxies: &[proxy::Proxy],
    work: impl std::future::Future<Output = T>,
) -> (T, u32) {
    let stop = AtomicBool::new(false);
    let work = async {
        let out = work.await;
        stop.store(true, Ordering::SeqCst);
        out
    };
    tokio::join!(work, proxy_chaos(proxies, &stop))
}

/// Until `stop`: one fault at a time on one or two random links — held
/// (frozen), down (connections closed and refused) or slowed past the node
/// timeout — for 20–300 ms, then healed.
async fn proxy_chaos(proxies: &[proxy::Proxy], stop: &AtomicBool) -> u32 {
    let mut faults = 0;
    // Bounded: each turn takes at least 20 ms.
    for _ in 0..10_000 {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let (nodes, kind, hold) = {
            let mut rng = rand::rng();
            let first = rng.random_range(0..5);
            let second = (first + rng.random_range(1..5)) % 5;
            let count = rng.random_range(1..=2);
            let nodes = [first, second][..count].to_vec();
            (nodes, rng.random_range(0..3), rng.random_range(20..=300))
        };
        for &n in &nodes {
            match kind {
                0 => proxies[n].set_cut(true),
                1 => proxies[n].set_down(true),
                _ => proxies[n].set_latency(Duration::from_millis(150)),
            }
        }
        tokio::time::sleep(Duration::from_millis(hold)).await;
        for &n in &nodes {
            proxies[n].set_cut(false);
            proxies[n].set_down(false);
            proxies[n].set_latency(Duration::ZERO);
        }
        faults += nodes.len() as u32;
    }
    faults
}

/// The lock key redquorum uses for `resource`.
pub fn lock_key(resource: &str) -> String {
    format!("{{{resource}}}:lock")
}

/// A shard subscriber (`SSUBSCRIBE`) to `channel` on the node at `url`,
/// as the release scripts publish (`SPUBLISH`): the connection, and what
/// it hears (RESP3 pushes; `PushKind::SMessage` with the channel and the
/// published token).
pub async fn shard_subscriber(
    url: &str,
    channel: &str,
) -> (
    MultiplexedConnection,
    tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
) {
    let url = format!(
        "{url}{}protocol=resp3",
        if url.contains('?') { '&' } else { '?' }
    );
    let client = redis::Client::open(url).unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("SSUBSCRIBE")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    (conn, rx)
}

/// The next release a [`shard_subscriber`] hears (within 5 s, or the test
/// fails): the published token.
pub async fn next_release(
    pushes: &mut tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
) -> String {
    let message = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let push = pushes.recv().await.expect("the subscriber's pushes");
            if push.kind == redis::PushKind::SMessage {
                return push;
            }
        }
    })
    .await
    .expect("no release published within 5 s");
    redis::from_redis_value(message.data[1].clone()).expect("a token")
}

/// Waits (at most 5 s) until every node counts a shard subscriber on
/// `key`'s channel.
pub async fn wait_subscribed(conns: &mut [redis::aio::MultiplexedConnection], key: &str) {
    wait_subscribed_by(conns, key, &[1; 5]).await;
}

/// Waits (at most 5 s) until node `i` counts `least[i]` shard subscribers
/// on `key`'s channel.
pub async fn wait_subscribed_by(
    conns: &mut [redis::aio::MultiplexedConnection],
    key: &str,
    least: &[u64],
) {
    wait_counted(conns, "SHARDNUMSUB", key, least).await;
}

/// Waits (at most 5 s) until node `i` counts `least[i]` subscribers to
/// `channel`, as `PUBSUB count` (`NUMSUB` or `SHARDNUMSUB`) reports them.
pub async fn wait_counted(
    conns: &mut [redis::aio::MultiplexedConnection],
    count: &str,
    channel: &str,
    least: &[u64],
) {
    let start = Instant::now();
    for (conn, &n) in conns.iter_mut().zip(least) {
        loop {
            let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg(count)
                .arg(channel)
                .query_async(conn)
                .await
                .unwrap();
            if counts.first().is_some_and(|(_, c)| *c >= n) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the waiter never subscribed ({count})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Every key on every node that mentions `resource`, with its value (or its
/// type, for keys that are not strings): one map per node.
pub async fn snapshot(
    conns: &mut [MultiplexedConnection],
    resource: &str,
) -> Vec<BTreeMap<String, String>> {
    let pattern = format!("*{}*", glob_escape(resource));
    let mut out = Vec::new();
    for conn in conns.iter_mut() {
        let keys: Vec<String> = conn.keys(&pattern).await.expect("KEYS");
        let mut map = BTreeMap::new();
        for key in keys {
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query_async(conn)
                .await
                .expect("TYPE");
            // A key may expire or be deleted between KEYS and here.
            let value = match kind.as_str() {
                "none" => continue,
                "string" => match conn.get::<_, Option<String>>(&key).await.expect("GET") {
                    Some(v) => v,
                    None => continue,
                },
                _ => format!("<{kind}>"),
            };
            map.insert(key, value);
        }
        out.push(map);
    }
    out
}

/// Waits until `redlock` has no call in flight to any node: the tail of
/// every returned operation (a release returns at its quorum; the other
/// nodes get it just after) has been applied and answered. Panics after
/// five seconds: not for use while a node is down (a release kept for it
/// stays in flight until its key's TTL).
pub async fn settled(redlock: &Redlock) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while redlock
            .nodes()
            .iter()
            .map(|n| (n.name(), n.in_flight()))
            .any(|(_, n)| n > 0)
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("calls still in flight after 5 s");
}

/// Polls `snapshot` until it equals `expected`, for at most `bound`. Used
/// where the library finishes work in the background by design (the tail of
/// a release); there is no event to wait on from outside.
pub async fn eventually_snapshot(
    conns: &mut [MultiplexedConnection],
    resource: &str,
    expected: &[BTreeMap<String, String>],
    bound: Duration,
) {
    let want = format!("{expected:?}");
    eventually_keys(conns, resource, bound, &want, |now| now == expected).await;
}

/// Polls until no node of the five holds any key of `resource`, for at
/// most `bound` ([`eventually_snapshot`] with five empty snapshots).
pub async fn eventually_gone(conns: &mut [MultiplexedConnection], resource: &str, bound: Duration) {
    eventually_snapshot(conns, resource, &vec![Default::default(); 5], bound).await;
}

/// Polls `snapshot` until `settled` holds, for at most `bound`; panics with
/// the last snapshot and `want` (what `settled` looks for) otherwise.
pub async fn eventually_keys(
    conns: &mut [MultiplexedConnection],
    resource: &str,
    bound: Duration,
    want: &str,
    settled: impl Fn(&[BTreeMap<String, String>]) -> bool,
) {
    let start = std::time::Instant::now();
    loop {
        let now = snapshot(conns, resource).await;
        if settled(&now) {
            return;
        }
        if start.elapsed() > bound {
            panic!(
                "keys of {resource} did not settle within {bound:?}:\n now {now:?}\n want {want}"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn glob_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Runs `scripts/nodes ARGS…` (path from `REDQUORUM_SCRIPTS_NODES`).
pub fn nodes_script(args: &[&str]) {
    let script = std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/nodes").to_owned());
    // Its log goes to stderr: kept quiet unless the command fails.
    let out = Command::new(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Node numbers (1-based) frozen for as long as this lives; thawed on drop,
/// even when the test panics.
pub struct Frozen(Vec<usize>);

impl Frozen {
    pub fn new(nodes: &[usize]) -> Self {
        for n in nodes {
            nodes_script(&["freeze", &n.to_string()]);
        }
        Frozen(nodes.to_vec())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for n in &self.0 {
            nodes_script(&["thaw", &n.to_string()]);
        }
    }
}

/// A node (1-based) killed for as long as this lives; started again (with
/// its data) on drop.
pub struct Killed(usize);

impl Killed {
    pub fn new(node: usize) -> Self {
        nodes_script(&["kill", &node.to_string()]);
        Killed(node)
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        nodes_script(&["start", &self.0.to_string()]);
    }
}

/// Restarts node `node` (1-based) with its data wiped: what a node without
/// persistence looks like after a crash. Only for tests that show what that
/// breaks.
pub fn wipe_restart(node: usize) {
    nodes_script(&["wipe-restart", &node.to_string()]);
}

/// Restarts node `node` (1-based) durable and empty, and [`adopt`]s its
/// dataset: a test's clean-up after it wiped or restarted the node bare.
pub fn restore_durable(node: usize) {
    wipe_restart(node);
    adopt(node);
}

/// How long a soak run lasts: `REDQUORUM_SOAK_SECS=n`, or 300 s for
/// `REDQUORUM_SOAK=1`; `None` (the short CI mode) otherwise.
pub fn soak_duration() -> Option<Duration> {
    if let Ok(secs) = std::env::var("REDQUORUM_SOAK_SECS") {
        let secs: u64 = secs
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("REDQUORUM_SOAK_SECS must be a number, got {secs:?}"));
        return Some(Duration::from_secs(secs));
    }
    match std::env::var("REDQUORUM_SOAK").as_deref() {
        Ok("" | "0") | Err(_) => None,
        Ok(_) => Some(Duration::from_secs(300)),
    }
}

/// The `p`-th percentile (0..=100) of `samples` (sorted in place).
pub fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * p / 100]
}

/// Log lines written on this thread while the guard lives.
pub fn capture_logs() -> (
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    tracing::subscriber::DefaultGuard,
) {
    #[derive(Clone)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines(Default::default());
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (lines.0, tracing::subscriber::set_default(subscriber))
}
