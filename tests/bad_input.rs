//! Bad input and misbehaving nodes: never a panic, always a typed error (or
//! a correct lock).
//!
//! - Property tests over every builder setting (node timeout, drift factor,
//!   retry policy), TTLs and resource names, on in-memory nodes (many cases)
//!   and on the five real nodes (a bounded number, each a real acquire and
//!   release).
//! - Nodes that answer with errors: out of memory (`maxmemory 1`,
//!   `noeviction`), a read-only replica, and credentials revoked while the
//!   client runs. Each is undone by a guard, even when the test fails.
//!
//! The node-changing tests take turns with the real-node property test
//! through one mutex.

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use redis::AsyncCommands;
use redquorum::node::Node;
use redquorum::quorum::{MAX_TTL_MS, validity};
use redquorum::{Answer, ConfigError, Lock, LockError, NodeError, Redlock, Retry};
use support::memory::MemoryNode;
use support::*;
use tokio::sync::Mutex;

static CLUSTER: Mutex<()> = Mutex::const_new(());

/// No single call in these tests may take longer than this.
const BOUND: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
struct Settings {
    node_timeout: Option<Duration>,
    drift_factor: Option<f64>,
    retry: Option<Retry>,
}

/// Durations from zero to `Duration::MAX`.
fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_micros(999)),
        Just(Duration::from_millis(1)),
        (1u64..2_000).prop_map(Duration::from_millis),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
    ]
}

fn factors() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(0.0),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
        Just(0.01),
        Just(0.999_999_999_999),
        Just(1.0),
        Just(-0.01),
        0.0..1.0f64,
        -10.0..10.0f64,
        proptest::num::f64::ANY,
    ]
}

fn settings() -> impl Strategy<Value = Settings> {
    let attempts = prop_oneof![Just(0u32), Just(1), 0u32..5, Just(u32::MAX)];
    (
        proptest::option::of(durations()),
        proptest::option::of(factors()),
        proptest::option::of((attempts, durations())),
    )
        .prop_map(|(node_timeout, drift_factor, retry)| Settings {
            node_timeout,
            drift_factor,
            retry: retry.map(|(a, d)| Retry::new(a, d)),
        })
}

/// Settings that build, mostly: so that most real-node cases reach a real
/// lock (retry delays may still be huge: `try_lock` never pauses).
fn valid_settings() -> impl Strategy<Value = Settings> {
    (
        proptest::option::of((1u64..2_000).prop_map(Duration::from_millis)),
        proptest::option::of(prop_oneof![Just(0.0), Just(0.01), 0.0..0.5f64]),
        proptest::option::of((1u32..5, durations())),
    )
        .prop_map(|(node_timeout, drift_factor, retry)| Settings {
            node_timeout,
            drift_factor,
            retry: retry.map(|(a, d)| Retry::new(a, d)),
        })
}

fn ttls() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_micros(999)),
        (1u64..=10).prop_map(Duration::from_millis),
        (10u64..60_000).prop_map(Duration::from_millis),
        Just(Duration::from_millis(MAX_TTL_MS)),
        Just(Duration::from_millis(MAX_TTL_MS + 1)),
        Just(Duration::MAX),
    ]
}

/// Resource names: empty, huge, control characters and NUL, Unicode,
/// braces and glob characters, anything.
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("\0".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("{}".to_owned()),
        Just("}:lock{".to_owned()),
        Just("x".repeat(1 << 20)),
        "[\\x00-\\x1f\\x7f]{1,16}",
        "[{}:*?\\[\\]\\\\ ]{1,12}",
        "\\PC{1,24}",
        any::<String>(),
    ]
}

/// The error `build` must give for `s`, if any (checked in this order).
fn expected_build_error(s: &Settings) -> Option<ConfigError> {
    if let Some(f) = s.drift_factor
        && !(f.is_finite() && (0.0..1.0).contains(&f))
    {
        return Some(ConfigError::InvalidDriftFactor(f));
    }
    let longest = Duration::from_millis(MAX_TTL_MS);
    if s.node_timeout
        .is_some_and(|t| t < Duration::from_millis(1) || t > longest)
    {
        return Some(ConfigError::InvalidNodeTimeout);
    }
    if s.retry
        .is_some_and(|r| r.attempts() == 0 || r.max_delay() > longest)
    {
        return Some(ConfigError::InvalidRetry);
    }
    None
}

fn builder(s: &Settings) -> redquorum::Builder {
    let mut b = Redlock::builder();
    if let Some(t) = s.node_timeout {
        b = b.node_timeout(t);
    }
    if let Some(f) = s.drift_factor {
        b = b.drift_factor(f);
    }
    if let Some(r) = s.retry {
        b = b.retry(r);
    }
    b
}

/// What a lock call must give for a valid client: `Err(e)` for bad input
/// (nothing is sent), `Ok(validity)` otherwise.
fn expected_lock(s: &Settings, name: &str, ttl: Duration) -> Result<Duration, ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::EmptyResource);
    }
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 || ms > MAX_TTL_MS {
        return Err(ConfigError::InvalidTtl(ttl));
    }
    let factor = s.drift_factor.unwrap_or(0.01);
    validity(ms, factor).ok_or(ConfigError::TtlNotAboveDrift {
        ttl,
        drift: redquorum::quorum::drift(ms, factor),
    })
}

/// Whether a round with these settings must be granted on healthy, free
/// nodes: enough validity and node timeout that no scheduling hiccup can
/// make it late. Otherwise `Expired` or `Unavailable` are fair answers too.
fn must_grant(s: &Settings, ttl: Duration, validity: Duration) -> bool {
    // 50 ms (the default) is not enough to promise a grant on two shared
    // cores whose five nodes fsync every write on one disk: a rehearsal saw
    // all five time out at once.
    validity >= Duration::from_millis(500) && node_timeout(s, ttl) >= Duration::from_millis(200)
}

/// The per-node timeout a round uses: the configured one, or
/// `min(50 ms, ttl / 20)`.
fn node_timeout(s: &Settings, ttl: Duration) -> Duration {
    s.node_timeout
        .unwrap_or_else(|| Duration::from_millis(50).min(ttl / 20))
}

fn check_config_error(got: Result<Lock, LockError>, want: &ConfigError) {
    match got {
        Err(LockError::Config(e)) => assert_eq!(&e, want),
        other => panic!("expected {want:?}, got {other:?}"),
    }
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {BOUND:?}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// For in-memory nodes: virtual time, so retry pauses cost nothing.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// On in-memory nodes, every entry point with any settings and input: a
/// typed error exactly when the input is bad, never a panic.
async fn memory_case(s: Settings, name: String, other: String, ttl: Duration) -> Ended {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let built = bounded(
        "build",
        builder(&s)
            .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
            .build(),
    )
    .await;
    let redlock = match (built, expected_build_error(&s)) {
        (Err(e), Some(want)) => {
            // NaN != NaN: compare the variant and the bits.
            match (&e, &want) {
                (ConfigError::InvalidDriftFactor(a), ConfigError::InvalidDriftFactor(b)) => {
                    assert_eq!(a.to_bits(), b.to_bits())
                }
                _ => assert_eq!(e, want),
            }
            return Ended::BuildError;
        }
        (Ok(r), None) => r,
        (got, want) => panic!("build: expected {want:?}, got {got:?}"),
    };
    let ended = match expected_lock(&s, &name, ttl) {
        Err(want) => {
            check_config_error(
                bounded("try_lock", redlock.try_lock(&name, ttl)).await,
                &want,
            );
            // `lock` and `lock_wait` validate before any round or pause.
            check_config_error(bounded("lock", redlock.lock(&name, ttl)).await, &want);
            check_config_error(
                bounded("lock_wait", redlock.lock_wait(&name, ttl, Duration::MAX)).await,
                &want,
            );
            Ended::InputError
        }
        Ok(validity) => match bounded("try_lock", redlock.try_lock(&name, ttl)).await {
            Ok(lock) => {
                assert_eq!(lock.resource(), name);
                bounded("release", lock.release())
                    .await
                    .expect("release on healthy nodes");
                Ended::Locked
            }
            Err(LockError::Expired { .. } | LockError::Unavailable { .. })
                if !must_grant(&s, ttl, validity) =>
            {
                Ended::Refused
            }
            Err(e) => panic!("try_lock({name:?}, {ttl:?}) with {s:?}: {e}"),
        },
    };
    // Several resources and reentrant owners: typed errors or a lock, never
    // a panic, whatever the names. (The in-memory nodes do not implement
    // these operations, so a valid call is refused as `Unavailable`: one
    // round is enough, and retries with a zero pause would spin forever on
    // virtual time.)
    let once = match builder(&Settings {
        retry: Some(Retry::none()),
        ..s.clone()
    })
    .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
    .build()
    .await
    {
        Ok(r) => r,
        Err(e) => panic!("the same settings built once already: {e}"),
    };
    let many = [name.as_str(), other.as_str()];
    match bounded("lock_many", once.lock_many(&many, ttl)).await {
        Ok(lock) => bounded("release", lock.release()).await.expect("release"),
        Err(LockError::Config(e)) => {
            let distinct = name != other;
            assert!(
                distinct || matches!(e, ConfigError::DuplicateResource(_)),
                "{e:?}"
            );
        }
        Err(_) => {}
    }
    match bounded("lock_reentrant", once.lock_reentrant(&name, ttl, &other)).await {
        Ok(lock) => bounded("release", lock.release()).await.expect("release"),
        Err(LockError::Config(e)) => {
            if other.is_empty() && expected_lock(&s, &name, ttl).is_ok() {
                assert_eq!(e, ConfigError::EmptyOwner);
            }
        }
        Err(_) => {}
    }
    ended
}

/// How a case ended, to show the cases exercise every path.
#[derive(Debug, Default)]
struct Paths {
    build_errors: usize,
    input_errors: usize,
    locks: usize,
    refused: usize,
}

/// Runs `cases` generated cases through `case`, failing (with proptest's
/// shrunk input) on the first panic, and returns how they ended.
fn run_cases<S: Strategy>(cases: u32, strategy: S, case: impl Fn(S::Value) -> Ended) -> Paths
where
    S::Value: std::fmt::Debug,
{
    let paths = std::sync::Mutex::new(Paths::default());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&strategy, |input| {
        let ended = case(input);
        let mut p = paths.lock().unwrap();
        match ended {
            Ended::BuildError => p.build_errors += 1,
            Ended::InputError => p.input_errors += 1,
            Ended::Locked => p.locks += 1,
            Ended::Refused => p.refused += 1,
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    paths.into_inner().unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Ended {
    BuildError,
    InputError,
    Locked,
    Refused,
}

#[test]
fn any_input_on_memory_nodes_is_a_typed_error_or_a_lock() {
    let settings = prop_oneof![valid_settings(), settings()];
    let paths = run_cases(
        512,
        (settings, names(), names(), ttls()),
        |(s, name, other, ttl)| paused_runtime().block_on(memory_case(s, name, other, ttl)),
    );
    println!("memory nodes, 512 cases: {paths:?}");
    assert!(
        paths.build_errors > 50 && paths.input_errors > 50 && paths.locks > 50,
        "{paths:?}"
    );
}

/// On the five real nodes: the same oracle, and for valid input a real lock
/// whose token sits on a quorum under the right key, released afterwards.
async fn real_case(s: Settings, name: String, ttl: Duration) -> Ended {
    let urls = node_urls();
    let built = bounded("build", builder(&s).nodes(&urls).build()).await;
    let redlock = match (built, expected_build_error(&s)) {
        (Err(_), Some(_)) => return Ended::BuildError, // exact errors: checked on memory nodes
        (Ok(r), None) => r,
        (got, want) => panic!("build: expected {want:?}, got {got:?}"),
    };
    let validity = match expected_lock(&s, &name, ttl) {
        Err(want) => {
            check_config_error(
                bounded("try_lock", redlock.try_lock(&name, ttl)).await,
                &want,
            );
            return Ended::InputError;
        }
        Ok(v) => v,
    };
    // Shrinking replays names: start from a clean slate, whatever an
    // earlier (failed) case left.
    let key = lock_key(&name);
    let mut conns = raw_all().await;
    for conn in &mut conns {
        let _: () = conn.del(&key).await.unwrap();
    }
    let lock = match bounded("try_lock", redlock.try_lock(&name, ttl)).await {
        Ok(lock) => lock,
        Err(LockError::Expired { .. } | LockError::Unavailable { .. })
            if !must_grant(&s, ttl, validity) =>
        {
            return Ended::Refused;
        }
        Err(e) => panic!("try_lock({} bytes, {ttl:?}) with {s:?}: {e}", name.len()),
    };
    assert_eq!(lock.resource(), name);
    let mut holding = 0;
    for conn in &mut conns {
        let v: Option<Vec<u8>> = conn.get(&key).await.unwrap();
        holding += usize::from(v.as_deref() == Some(lock.token().as_bytes()));
    }
    assert!(
        holding >= 3 || !lock.is_valid(),
        "token on {holding} nodes only"
    );
    match bounded("release", lock.release()).await {
        Ok(()) => {}
        // A node timeout of a few ms may pass before a quorum confirms on a
        // loaded machine, and so may 50 ms when every node must write and
        // fsync a megabyte-long key; the releases are sent all the same (the
        // loop below checks that they land).
        Err(LockError::Unavailable { .. })
            if node_timeout(&s, ttl) < Duration::from_millis(50) || name.len() >= 1 << 16 => {}
        Err(e) => panic!("release with {s:?}: {e}"),
    }
    // The rest of the release lands in the background.
    let start = std::time::Instant::now();
    loop {
        let mut left = 0;
        for conn in &mut conns {
            let exists: bool = conn.exists(&key).await.unwrap();
            left += usize::from(exists);
        }
        if left == 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{left} keys left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ended::Locked
}

#[test]
fn any_input_on_real_nodes_is_a_typed_error_or_a_correct_lock() {
    let settings = prop_oneof![3 => valid_settings(), 1 => settings()];
    let ttls = prop_oneof![
        3 => (10u64..60_000).prop_map(Duration::from_millis),
        1 => ttls(),
    ];
    let paths = run_cases(64, (settings, names(), ttls), |(s, name, ttl)| {
        let _turn = CLUSTER.blocking_lock();
        runtime().block_on(real_case(s, name, ttl))
    });
    println!("real nodes, 64 cases: {paths:?}");
    assert!(
        paths.locks >= 16,
        "too few cases reached a real lock: {paths:?}"
    );
}

/// A config value of nodes `nodes` (0-based), set for as long as this lives;
/// the old values are put back on drop, even when the test panics.
struct ConfigSet {
    nodes: Vec<usize>,
    saved: Vec<(String, String)>,
}

impl ConfigSet {
    async fn new(nodes: &[usize], settings: &[(&str, &str)]) -> ConfigSet {
        let mut saved = Vec::new();
        let mut first = raw(nodes[0]).await;
        for (name, _) in settings {
            let (_, old): (String, String) = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut first)
                .await
                .unwrap();
            saved.push((name.to_string(), old));
        }
        let guard = ConfigSet {
            nodes: nodes.to_vec(),
            saved,
        };
        for &n in nodes {
            let mut conn = raw(n).await;
            for (name, value) in settings {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
        guard
    }
}

/// A blocking connection for guards' `Drop`, which cannot await.
fn blocking_conn(node: usize) -> redis::Connection {
    redis::Client::open(node_urls()[node].as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connection to restore a node")
}

impl Drop for ConfigSet {
    fn drop(&mut self) {
        for &n in &self.nodes {
            let mut conn = blocking_conn(n);
            for (name, value) in &self.saved {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query(&mut conn)
                    .expect("restore config");
            }
        }
    }
}

/// The nodes' own error, for a vote that failed with `Server(msg)`.
fn server_errors(votes: &redquorum::Votes) -> Vec<String> {
    votes
        .iter()
        .filter_map(|(_, a)| match a {
            Answer::Failed(NodeError::Server(msg)) => Some(msg.to_string()),
            _ => None,
        })
        .collect()
}

/// Nodes out of memory (`maxmemory 1`, `noeviction`) refuse the acquire
/// with their `OOM` error: a majority of them makes the round `Unavailable`
/// with that message per node; a minority costs nothing.
#[tokio::test]
async fn out_of_memory_nodes_give_typed_server_errors() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("oom");
    {
        let _oom = ConfigSet::new(
            &[0, 1, 2],
            &[("maxmemory", "1"), ("maxmemory-policy", "noeviction")],
        )
        .await;
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let errors = server_errors(&votes);
                assert!(errors.len() >= 3, "{votes}");
                assert!(errors.iter().all(|m| m.contains("OOM")), "{errors:?}");
                assert_eq!(votes.held(), 0);
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    {
        let _oom = ConfigSet::new(
            &[3, 4],
            &[("maxmemory", "1"), ("maxmemory-policy", "noeviction")],
        )
        .await;
        let lock = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .expect("three nodes with memory are a quorum");
        lock.release().await.unwrap();
    }
    // Restored: all five take writes again.
    let mut conns = raw_all().await;
    for conn in &mut conns {
        let _: () = conn.set_ex(lock_key(&resource), "probe", 1).await.unwrap();
        let _: () = conn.del(lock_key(&resource)).await.unwrap();
    }
}

/// Nodes made replicas (`REPLICAOF`) for as long as this lives; masters
/// again (`REPLICAOF NO ONE`) on drop. A replica flushes its data when it
/// syncs, so only the tests of this binary, which take turns, may see it.
struct Replicas(Vec<usize>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for &n in &self.0 {
            let mut conn = blocking_conn(n);
            let _: () = redis::cmd("REPLICAOF")
                .arg("NO")
                .arg("ONE")
                .query(&mut conn)
                .expect("REPLICAOF NO ONE");
        }
    }
}

/// Read-only replicas refuse the acquire with `READONLY`: a majority of
/// them makes the round `Unavailable`, with each node's message.
#[tokio::test]
async fn read_only_replicas_give_typed_server_errors() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("replica");
    let master_port = node_urls()[4].rsplit(':').next().unwrap().to_owned();
    {
        let replicas = Replicas(vec![0, 1, 2]);
        for &n in &replicas.0 {
            let mut conn = raw(n).await;
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(&master_port)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let errors = server_errors(&votes);
                assert!(errors.len() >= 3, "{votes}");
                assert!(
                    errors
                        .iter()
                        .all(|m| m.to_lowercase().contains("read only replica")),
                    "{errors:?}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    // Masters again: the lock is granted (once any sync in progress ends).
    let start = std::time::Instant::now();
    loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "not writable again: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `ACL args…` on every node.
async fn acl_all(args: &[&str]) {
    for i in 0..5 {
        let mut conn = raw(i).await;
        let _: redis::Value = redis::cmd("ACL")
            .arg(args)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// An ACL user on every node, deleted on drop.
struct AclUser(String);

impl Drop for AclUser {
    fn drop(&mut self) {
        for i in 0..5 {
            let mut conn = blocking_conn(i);
            let _: redis::Value = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.0)
                .query(&mut conn)
                .expect("ACL DELUSER");
        }
    }
}

/// Credentials revoked while the client runs: the nodes cut the
/// connections, the background reconnect is refused, and rounds report each
/// such node as `Auth` or `NotConnected` with the node's authentication
/// message (never a hang, never a panic). Restoring the password brings the
/// nodes back without a new client.
#[tokio::test]
async fn credentials_revoked_at_round_time_are_typed() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser(format!("rq-revoked-{:08x}", rand::random::<u32>()));
    let name = user.0.as_str();
    acl_all(&[
        "SETUSER",
        name,
        "on",
        ">first-password",
        "~*",
        "&*",
        "+@all",
    ])
    .await;
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{name}:first-password@"), 1))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let resource = unique("revoked");
    redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .expect("valid credentials")
        .release()
        .await
        .unwrap();

    // New password on nodes 1-3, and their connections killed.
    for i in 0..3 {
        let mut conn = raw(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "resetpass", ">second-password"][..])
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: redis::Value = redis::cmd("CLIENT")
            .arg(&["KILL", "USER", name][..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let auth_refused = |a: &Answer| match a {
        Answer::Failed(NodeError::Auth(_)) => true,
        Answer::Failed(NodeError::NotConnected(m)) => {
            let m = m.to_lowercase();
            m.contains("auth") || m.contains("wrongpass")
        }
        _ => false,
    };
    // The first round may see the dropped connections; then the refused
    // reconnects. Bounded: the reconnect backoff starts at 10 ms.
    let start = std::time::Instant::now();
    let votes = loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Err(LockError::Unavailable { votes }) => {
                let refused = votes
                    .iter()
                    .take(3)
                    .filter(|(_, a)| auth_refused(a))
                    .count();
                if refused == 3 {
                    break votes;
                }
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no authentication error reported within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (node, answer) in votes.iter().take(3) {
        assert!(!node.contains("password"), "password leaked: {node}");
        let text = format!("{answer:?}");
        assert!(!text.contains("first-password"), "{text}");
    }

    // The old password back: the background reconnect succeeds.
    for i in 0..3 {
        let mut conn = raw(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "resetpass", ">first-password"][..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let start = std::time::Instant::now();
    loop {
        match redlock.try_lock(&resource, Duration::from_secs(5)).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "not back within 10 s: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key of another type on a minority of nodes is someone else's data: the
/// lock is granted by the other three, and neither the acquire's clean-up
/// nor extend nor release touches the foreign keys.
#[tokio::test]
async fn wrong_type_key_on_a_minority_is_left_alone() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let mut conns = raw_all().await;
    let resource = unique("wrongtype-minority");
    let key = lock_key(&resource);
    for conn in &mut conns[..2] {
        let _: () = conn.rpush(&key, "someone else's").await.unwrap();
    }
    let mut lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .expect("three free nodes");
    lock.extend(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let mut want = vec![std::collections::BTreeMap::new(); 5];
    for m in &mut want[..2] {
        m.insert(key.clone(), "<list>".to_owned());
    }
    eventually_snapshot(&mut conns, &resource, &want, Duration::from_secs(2)).await;
    for conn in &mut conns {
        let _: () = conn.del(&key).await.unwrap();
    }
}

/// Found by `any_input_on_real_nodes_is_a_typed_error_or_a_correct_lock`:
/// the builder used to accept any node timeout of at least 1 ms, and the
/// release round computed `Instant::now() + node_timeout` unchecked, so
/// `release()` (and the clean-up of any refused round) panicked with
/// "overflow when adding duration to instant" for `Duration::MAX`. Fixed in
/// src by bounding the timeout to 2^40 ms; this keeps both ends covered.
#[tokio::test]
async fn huge_node_timeout_never_panics() {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let build = |timeout| {
        Redlock::builder()
            .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
            .node_timeout(timeout)
            .build()
    };
    assert_eq!(
        build(Duration::MAX).await.unwrap_err(),
        ConfigError::InvalidNodeTimeout
    );
    let redlock = build(Duration::from_millis(MAX_TTL_MS))
        .await
        .expect("the largest timeout accepted");
    let lock = redlock
        .try_lock("r", Duration::from_secs(5))
        .await
        .expect("free");
    // A refused round cleans up through the same code.
    assert!(matches!(
        redlock.try_lock("r", Duration::from_secs(5)).await,
        Err(LockError::Taken { .. })
    ));
    lock.release().await.expect("release");
}

/// Regression, found by `any_input_on_memory_nodes_is_a_typed_error_or_a_lock`:
/// `-0.0` is a finite number in `[0, 1)` (it equals `0.0`), but its `{:e}`
/// form "-0e0" once failed to parse as digits and the builder refused it.
#[tokio::test]
async fn negative_zero_drift_factor_is_accepted() {
    let node = MemoryNode::new(0);
    let built = Redlock::builder()
        .custom_nodes([node as Arc<dyn Node>])
        .drift_factor(-0.0)
        .build()
        .await;
    assert!(built.is_ok(), "{built:?}");
}

/// The least-privilege ACL user that `docs/operations.md` recommends can use
/// every kind of lock, and nothing else: only redquorum's keys and channels,
/// only the commands its scripts and connections need.
#[tokio::test]
async fn least_privilege_acl_user_can_lock() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser(format!("rq-least-{:08x}", rand::random::<u32>()));
    let name = user.0.as_str();
    acl_all(&[
        "SETUSER",
        name,
        "on",
        ">s3cret",
        "resetkeys",
        "~{*}:lock",
        "~{*}:fence",
        "resetchannels",
        "&{*}:lock",
        "-@all",
        "+ping",
        "+info",
        "+evalsha",
        "+eval",
        "+subscribe",
        "+unsubscribe",
        "+set",
        "+get",
        "+del",
        "+exists",
        "+type",
        "+pttl",
        "+pexpire",
        "+incr",
        "+hset",
        "+hsetnx",
        "+hdel",
        "+hexists",
        "+hincrby",
        "+publish",
    ])
    .await;
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{name}:s3cret@"), 1))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the user may connect");
    let r = unique("acl");
    let ttl = Duration::from_secs(5);
    let mut lock = redlock.try_lock(&r, ttl).await.expect("plain");
    lock.extend(ttl).await.expect("extend");
    lock.release().await.expect("release");
    let lock = redlock.lock_fenced(&r, ttl).await.expect("fenced");
    assert!(lock.fence().is_some());
    lock.release().await.expect("release fenced");
    let lock = redlock
        .lock_reentrant(&r, ttl, "owner")
        .await
        .expect("reentrant");
    lock.release().await.expect("release reentrant");
    let (a, b) = (format!("{r}:a"), format!("{r}:b"));
    let lock = redlock.lock_many(&[&a, &b], ttl).await.expect("many");
    lock.release().await.expect("release many");
    // A waiter woken by a release (SUBSCRIBE / PUBLISH on the lock channel).
    let held = redlock.try_lock(&r, ttl).await.expect("plain again");
    let waiter = {
        let redlock = redlock.clone();
        let r = r.clone();
        tokio::spawn(async move { redlock.lock_wait(&r, ttl, Duration::from_secs(10)).await })
    };
    // The waiter's SUBSCRIBE went through: node 1 counts a subscriber.
    let mut admin = raw(0).await;
    let start = std::time::Instant::now();
    loop {
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(lock_key(&r))
            .query_async(&mut admin)
            .await
            .unwrap();
        if subscribers > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no subscriber");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    waiter
        .await
        .unwrap()
        .expect("woken")
        .release()
        .await
        .unwrap();
    // Nothing was denied along the way…
    for i in 0..5 {
        let mut conn = raw(i).await;
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut conn)
            .await
            .unwrap();
        let denied = format!("{log:?}");
        assert!(!denied.contains(name), "node {}: {denied}", i + 1);
    }
    // …and nothing beyond is allowed: other keys are off limits.
    let client = redis::Client::open(urls[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let denied: redis::RedisResult<()> = conn.set("not-a-lock-key", "x").await;
    assert!(denied.is_err(), "the user may write other keys");
}
