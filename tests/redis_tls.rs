//! The core of the real-node suite over TLS, on five TLS-only masters that
//! require client certificates (`scripts/tls-nodes`, started by
//! `scripts/test`): grant, refuse, extend, release with nothing left behind,
//! fencing, a frozen node; and the TLS failures a user meets — a server
//! certificate the client rejects, no client certificate, TLS to a plain
//! port and plain text to a TLS port — each a typed error, never a hang.
//!
//! Needs `REDQUORUM_TLS_NODES` (the URLs) and `REDQUORUM_TLS_DIR` (the
//! certificates); fails loudly without them.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]
#![cfg(feature = "tls")]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Answer, ConfigError, LockError, NodeError, Redlock, Retry};
use redquorum_test_support::checks::eventually_ok;

fn urls() -> Vec<String> {
    let urls = std::env::var("REDQUORUM_TLS_NODES").expect(
        "REDQUORUM_TLS_NODES is not set: these tests need the five TLS nodes; run scripts/test \
         (or scripts/tls-nodes up and export REDQUORUM_TLS_NODES=$(scripts/tls-nodes urls) \
         REDQUORUM_TLS_DIR=$(scripts/tls-nodes dir))",
    );
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    assert_eq!(urls.len(), 5, "REDQUORUM_TLS_NODES must list five nodes");
    urls
}

fn file(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(std::env::var("REDQUORUM_TLS_DIR").expect("REDQUORUM_TLS_DIR"));
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One test at a time: TLS handshakes of five nodes × several clients at
/// once take a loaded machine past the connect wait.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits (bounded) until `redlock` can take a lock: its connections are up.
async fn ready(redlock: &Redlock) {
    let probe = support::unique("tls-ready");
    let lock = redlock
        .lock_with(
            &probe,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().wait(Duration::from_secs(10)),
        )
        .await
        .expect("the TLS nodes never became reachable");
    lock.release().await.unwrap();
}

fn builder() -> redquorum::Builder {
    Redlock::builder()
        .nodes(urls())
        .tls_ca(file("ca.crt"))
        .tls_client_cert(file("client.crt"), file("client.key"))
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
}

/// Direct TLS connections to the five nodes, bypassing redquorum.
async fn raw_all() -> Vec<redis::aio::MultiplexedConnection> {
    let mut conns = Vec::new();
    for url in urls() {
        let certs = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: file("client.crt"),
                client_key: file("client.key"),
            }),
            root_cert: Some(file("ca.crt")),
        };
        let client = redis::Client::build_with_tls(url.as_str(), certs).unwrap();
        conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    conns
}

async fn keys_left(conns: &mut [redis::aio::MultiplexedConnection], key: &str) -> usize {
    let mut left = 0;
    for conn in conns.iter_mut() {
        let exists: bool = conn.exists(key).await.unwrap();
        left += usize::from(exists);
    }
    left
}

#[tokio::test]
async fn locks_work_over_mutual_tls_and_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let (a, b) = (
        builder().build().await.unwrap(),
        builder().build().await.unwrap(),
    );
    ready(&a).await;
    ready(&b).await;
    let resource = support::unique("tls");
    let key = support::lock_key(&resource);
    let mut conns = raw_all().await;
    let mut lock = a
        .try_lock(&resource, Duration::from_secs(10))
        .await
        .unwrap();
    // Every node holds it (delivery), once the grant's tail has landed, and
    // another client is refused.
    support::settled(&a).await;
    for conn in conns.iter_mut() {
        let held = conn.get::<_, Option<String>>(&key).await.unwrap();
        assert_eq!(held.as_deref(), Some(lock.token()));
    }
    match b.try_lock(&resource, Duration::from_secs(10)).await {
        Err(LockError::Taken { votes }) => assert!(votes.held() >= 3, "{votes}"),
        other => panic!("expected Taken, got {other:?}"),
    }
    lock.extend(Duration::from_secs(30)).await.unwrap();
    lock.release().await.unwrap();
    let start = Instant::now();
    while keys_left(&mut conns, &key).await > 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "keys left behind");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fenced = a
        .lock_with(
            &resource,
            Duration::from_secs(10),
            &redquorum::LockOptions::new().fenced(),
        )
        .await
        .unwrap();
    let first = fenced.fence().unwrap();
    fenced.release().await.unwrap();
    let fenced = b
        .lock_with(
            &resource,
            Duration::from_secs(10),
            &redquorum::LockOptions::new().fenced(),
        )
        .await
        .unwrap();
    assert!(fenced.fence().unwrap() > first);
    fenced.release().await.unwrap();
}

#[tokio::test]
async fn a_frozen_tls_node_costs_a_round_nothing() {
    let _serial = SERIAL.lock().await;
    let redlock = builder().build().await.unwrap();
    ready(&redlock).await;
    let _frozen = FrozenTls::new(5);
    let result = async {
        for i in 0..20 {
            let start = Instant::now();
            let lock = redlock
                .try_lock(&support::unique("tls-frozen"), Duration::from_secs(5))
                .await
                .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
            lock.release().await.unwrap();
            // Decided by the four others: never waits for the frozen node,
            // which would cost a whole node timeout (1 s) at least.
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "{:?}",
                start.elapsed()
            );
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), result).await;
    outcome.expect("rounds stalled on a frozen node");
}

/// TLS node `n` (1-based) frozen (SIGSTOP) while this lives; thawed on
/// drop, even when the test panics.
struct FrozenTls(usize);

impl FrozenTls {
    fn new(n: usize) -> Self {
        tls_nodes(&["freeze", &n.to_string()]);
        FrozenTls(n)
    }
}

impl Drop for FrozenTls {
    fn drop(&mut self) {
        tls_nodes(&["thaw", &self.0.to_string()]);
    }
}

fn tls_nodes(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/tls-nodes");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every node failing its handshake the same way is a configuration error
/// at `build`; `$what` names the case.
async fn tls_config_error(what: &str, builder: redquorum::Builder) -> String {
    let _serial = SERIAL.lock().await;
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), builder.build())
        .await
        .unwrap_or_else(|_| panic!("{what}: build hung"));
    match result {
        Err(ConfigError::Tls(message)) => {
            println!("{what} ({:?}): {message}", start.elapsed());
            message
        }
        other => panic!("{what}: expected ConfigError::Tls, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_certificate_the_client_rejects_is_a_config_error() {
    let builder = Redlock::builder()
        .nodes(urls())
        .tls_ca(file("other-ca.crt"))
        .tls_client_cert(file("client.crt"), file("client.key"))
        .node_timeout(Duration::from_secs(2));
    let message = tls_config_error("untrusted server certificate", builder).await;
    assert!(message.contains("certificate"), "{message}");
}

#[tokio::test]
async fn a_missing_client_certificate_is_a_config_error() {
    let builder = Redlock::builder()
        .nodes(urls())
        .tls_ca(file("ca.crt"))
        .node_timeout(Duration::from_secs(2));
    tls_config_error("no client certificate", builder).await;
}

#[tokio::test]
async fn tls_to_a_plain_port_is_named_per_node_never_a_hang() {
    let _serial = SERIAL.lock().await;
    let plain: Vec<String> = support::node_urls()
        .iter()
        .map(|u| u.replacen("redis://", "rediss://", 1))
        .collect();
    let redlock = tokio::time::timeout(
        Duration::from_secs(10),
        Redlock::builder()
            .nodes(plain)
            .tls_ca(file("ca.crt"))
            .node_timeout(Duration::from_millis(200))
            .retry(Retry::none())
            .build(),
    )
    .await
    .expect("build hung")
    .expect("a node whose handshake is unanswered is no build error");
    // A plain-text server never answers a ClientHello: each node says so
    // once its connect attempt gives up (1 s). A probe's PING made during
    // an attempt waits for the next one (the link's rule for a kicked
    // link), so each probe waits out two attempts; bounded.
    let named = |h: &redquorum::NodeHealth| matches!(&h.reachable, Err(e) if e.to_string().contains("TLS handshake"));
    eventually_ok(
        "every node names the TLS handshake",
        Duration::from_secs(10),
        async || {
            let health = redlock.nodes().probe(Duration::from_millis(2_500)).await;
            if health.iter().all(named) {
                Ok(())
            } else {
                Err(format!("{health:?}"))
            }
        },
    )
    .await;
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        redlock.try_lock("tls-to-plain", Duration::from_secs(5)),
    )
    .await
    .expect("try_lock hung");
    match refused {
        Err(LockError::Unavailable { votes }) => {
            let text = votes.to_string();
            assert!(text.contains("TLS handshake"), "{text}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn plain_text_to_a_tls_port_fails_fast_per_node() {
    let _serial = SERIAL.lock().await;
    let plain: Vec<String> = urls()
        .iter()
        .map(|u| u.replacen("rediss://", "redis://", 1))
        .collect();
    let start = Instant::now();
    let redlock = tokio::time::timeout(
        Duration::from_secs(10),
        Redlock::builder()
            .nodes(plain)
            .node_timeout(Duration::from_millis(200))
            .retry(Retry::none())
            .build(),
    )
    .await
    .expect("build hung")
    .expect("a node that does not answer is no build error");
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        redlock.try_lock("tls-plain", Duration::from_secs(5)),
    )
    .await
    .expect("try_lock hung");
    match refused {
        Err(LockError::Unavailable { votes }) => {
            for (node, answer) in votes.iter() {
                assert!(
                    matches!(
                        answer,
                        Answer::Undecided
                            | Answer::Failed(
                                NodeError::NotConnected(_)
                                    | NodeError::TimedOut
                                    | NodeError::Connection(_)
                            )
                    ),
                    "{node}: {answer:?}"
                );
            }
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    println!(
        "plain text to TLS ports: refused after {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_ca_bundle_that_does_not_parse_is_a_config_error() {
    let err = Redlock::builder()
        .nodes(urls())
        .tls_ca(b"not a certificate".to_vec())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, ConfigError::Tls(_)), "{err:?}");
    assert!(!format!("{err:?}").contains("BEGIN"), "{err:?}");
}

/// The same nodes over their Unix sockets (`redis+unix://`, plain text):
/// locks work, and the node names are the socket paths.
#[tokio::test]
async fn unix_socket_nodes_work() {
    let _serial = SERIAL.lock().await;
    let dir = std::env::var("REDQUORUM_TLS_DIR").expect("REDQUORUM_TLS_DIR");
    let urls: Vec<String> = (1..=5)
        .map(|n| format!("redis+unix://{dir}/node{n}/redis.sock"))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    ready(&redlock).await;
    assert!(
        redlock
            .nodes()
            .iter()
            .all(|n| n.name().starts_with("unix:") && n.name().ends_with("redis.sock"))
    );
    let mut lock = redlock
        .try_lock(&support::unique("unix"), Duration::from_secs(5))
        .await
        .unwrap();
    lock.extend(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn certificate_verification_is_off_only_by_explicit_opt_in() {
    let _serial = SERIAL.lock().await;
    let insecure: Vec<String> = urls().iter().map(|u| format!("{u}/#insecure")).collect();
    let refused = Redlock::builder()
        .nodes(&insecure)
        .tls_client_cert(file("client.crt"), file("client.key"))
        .build()
        .await;
    assert!(
        matches!(refused, Err(ConfigError::Insecure { .. })),
        "{refused:?}"
    );
    // Opted in: no CA given (the test CA is in no system store), yet the
    // handshakes succeed.
    let redlock = Redlock::builder()
        .nodes(&insecure)
        .tls_client_cert(file("client.crt"), file("client.key"))
        .danger_accept_invalid_certificates()
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .build()
        .await
        .unwrap();
    ready(&redlock).await;
}

/// Inspection reads over TLS, through the client's own connections.
#[tokio::test]
async fn inspect_reads_tls_nodes() {
    let _serial = SERIAL.lock().await;
    let redlock = builder().build().await.unwrap();
    ready(&redlock).await;
    let resource = support::unique("tls-inspect");
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(10))
        .await
        .unwrap();
    support::settled(&redlock).await; // every node has it
    let seen = redlock.inspect(&resource).await.unwrap();
    assert_eq!(
        seen.verdict(),
        &redquorum::verdict::Verdict::Held {
            holder: redquorum::inspect::Holder::Token(lock.token().into()),
            nodes: 5
        }
    );
    lock.release().await.unwrap();
}

/// TLS nodes 40 ms away work from the first call: the handshake (TCP, TLS,
/// AUTH…) of a node still connecting for the first time is waited for
/// before the round's clock starts.
///
/// The node timeout is six round trips (a shared machine's stalls are not
/// findings); so that `build` still returns while the nodes connect, the
/// handshake meets three times the latency (its chunks keep the latency
/// they met), the calls after it 40 ms.
#[tokio::test]
async fn distant_tls_nodes_work_from_the_first_call() {
    let _serial = SERIAL.lock().await;
    let mut proxies = Vec::new();
    for url in urls() {
        let proxy = support::proxy::Proxy::start(url.trim_start_matches("rediss://")).await;
        proxy.set_latency(Duration::from_millis(60));
        proxies.push(proxy);
    }
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(|p| format!("rediss://{}", p.addr())))
        .tls_ca(file("ca.crt"))
        .tls_client_cert(file("client.crt"), file("client.key"))
        .node_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    for proxy in &proxies {
        proxy.set_latency(Duration::from_millis(20));
    }
    let lock = redlock
        .try_lock(&support::unique("tls-far"), Duration::from_secs(10))
        .await
        .expect("the first call");
    lock.release().await.expect("the release");
}
