//! The service's bounds on what it remembers, held at the bound and while
//! rounds are under way (on in-memory nodes), and bounds out of range
//! refused at start.

mod support;

use redquorum_serve::Limits;
use redquorum_serve::grpc::v1;
use support::*;

/// The acquires, every one polled once while three nodes hold their
/// answers back (so all are under way at once), then their outcomes.
async fn all_under_way<F: std::future::Future>(
    nodes: &[std::sync::Arc<redquorum::testing::MemoryNode>],
    calls: Vec<F>,
) -> Vec<F::Output> {
    for node in &nodes[..3] {
        node.freeze();
    }
    let mut all = std::pin::pin!(futures::future::join_all(calls));
    assert!(
        futures::poll!(all.as_mut()).is_pending(),
        "the rounds wait for the frozen nodes"
    );
    for node in &nodes[..3] {
        node.thaw();
    }
    all.await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_held_through_an_instance_are_bounded() {
    let nodes = nodes();
    let limits = Limits {
        max_held: 2,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let mut locks = client(&running).await;
    let a = locks.acquire(acquire("a")).await.unwrap().into_inner();
    locks.acquire(acquire("b")).await.unwrap();
    let e = locks.acquire(acquire("c")).await.unwrap_err();
    assert_eq!(
        (e.code(), failure(&e).kind.as_str()),
        (tonic::Code::ResourceExhausted, "too_many_requests")
    );
    assert!(
        nodes.iter().all(|n| n.holder("{c}:lock").is_none()),
        "refused before asking"
    );
    locks
        .release(v1::ReleaseRequest {
            resource: "a".into(),
            token: a.token,
            ..Default::default()
        })
        .await
        .unwrap();
    locks.acquire(acquire("c")).await.unwrap();
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_on_held_locks_holds_while_rounds_are_under_way() {
    let nodes = nodes();
    let limits = Limits {
        max_held: 3,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let service = std::sync::Arc::clone(running.locks());
    let requests: Vec<_> = (0..10).map(|n| acquire(&format!("r{n}"))).collect();
    let outcomes = all_under_way(
        &nodes,
        requests.iter().map(|r| service.acquire(r)).collect(),
    )
    .await;
    let granted = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(granted, 3, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .all(|f| f.kind == "too_many_requests")
    );
    // Dapr's grants and the own API's locks share the bound.
    let dapr = redquorum_serve::TryLock {
        store_name: "lockstore".into(),
        resource_id: "d".into(),
        lock_owner: "o".into(),
        expiry_in_seconds: 10,
    };
    assert!(matches!(
        service.try_lock(&dapr).await,
        Err(redquorum_serve::ServeError::Busy(_))
    ));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_held_per_owner_are_bounded() {
    let nodes = nodes();
    let limits = Limits {
        max_held_per_owner: 2,
        max_held: 3,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let addr = running.http_addr();
    assert_eq!(try_lock(addr, "r1", "a", 10).await.1, r#"{"success":true}"#);
    assert_eq!(try_lock(addr, "r2", "a", 10).await.1, r#"{"success":true}"#);
    let (status, answer) = try_lock(addr, "r3", "a", 10).await;
    assert_eq!(status, 429, "{answer}");
    assert!(answer.contains("--max-held-per-owner"), "{answer}");
    assert!(
        nodes.iter().all(|n| n.holder("{r3}:lock").is_none()),
        "refused before the nodes were asked"
    );
    assert_eq!(try_lock(addr, "r3", "b", 10).await.1, r#"{"success":true}"#);
    let (status, answer) = try_lock(addr, "r4", "c", 10).await;
    assert_eq!(status, 429, "{answer}");
    assert!(answer.contains("--max-held)"), "{answer}");
    // An unlock makes room.
    assert_eq!(unlock(addr, "r1", "a").await.1, r#"{"status":0}"#);
    assert_eq!(try_lock(addr, "r4", "c", 10).await.1, r#"{"success":true}"#);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_bound_holds_while_its_rounds_are_under_way() {
    let nodes = nodes();
    let limits = Limits {
        max_held_per_owner: 2,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let service = std::sync::Arc::clone(running.locks());
    let requests: Vec<_> = (0..10)
        .map(|n| redquorum_serve::TryLock {
            store_name: "lockstore".into(),
            resource_id: format!("r{n}"),
            lock_owner: "a".into(),
            expiry_in_seconds: 10,
        })
        .collect();
    for node in &nodes[..3] {
        node.freeze();
    }
    let mut all = std::pin::pin!(futures::future::join_all(
        requests.iter().map(|r| service.try_lock(r))
    ));
    assert!(futures::poll!(all.as_mut()).is_pending());
    for node in &nodes[..3] {
        node.thaw();
    }
    let outcomes = all.await;
    assert_eq!(
        outcomes.iter().filter(|o| **o == Ok(true)).count(),
        2,
        "{outcomes:?}"
    );
    // The refused rounds gave their reservations back; an unlock frees one.
    let addr = running.http_addr();
    assert_eq!(try_lock(addr, "x", "a", 10).await.0, 429);
    let granted = (0..10).find(|n| outcomes[*n] == Ok(true)).unwrap();
    assert_eq!(
        unlock(addr, &format!("r{granted}"), "a").await.1,
        r#"{"status":0}"#
    );
    assert_eq!(try_lock(addr, "x", "a", 10).await.1, r#"{"success":true}"#);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_out_of_range_are_refused_at_start() {
    let nodes = nodes();
    for limits in [
        Limits {
            max_connections: 0,
            ..Limits::default()
        },
        Limits {
            max_in_flight: usize::MAX,
            ..Limits::default()
        },
    ] {
        let config = redquorum_serve::Config {
            http: "127.0.0.1:0".parse().unwrap(),
            grpc: "127.0.0.1:0".parse().unwrap(),
            limits,
            ..redquorum_serve::Config::default()
        };
        let refused = redquorum_serve::Running::start(redlock(&nodes).await, config).await;
        assert!(
            matches!(refused, Err(redquorum_serve::StartError::Limits(_))),
            "{refused:?}"
        );
    }
    // The command refuses them as bad usage, before any node is asked.
    for flag in ["--max-connections", "--max-held", "--max-rate"] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_redquorum-serve"))
            .args(["--nodes", "redis://127.0.0.1:1", flag, "0"])
            .output()
            .await
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flag}: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_lose_their_places_after_the_idle_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let nodes = nodes();
    let limits = Limits {
        max_connections: 3,
        idle_timeout: std::time::Duration::from_millis(500),
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let (http_addr, grpc_addr) = (running.http_addr(), running.grpc_addr());
    // One silent connection on each port, and one kept alive after an
    // answer: the three places.
    let silent_http = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    let silent_grpc = tokio::net::TcpStream::connect(grpc_addr).await.unwrap();
    let mut kept = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    kept.write_all(b"GET /v1.0/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0; 12];
    kept.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 204");
    // Each is closed by the service once it has sent nothing for the
    // idle timeout (bounded only so that a regression fails, not hangs).
    for mut stream in [silent_http, silent_grpc, kept] {
        let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        })
        .await;
        assert!(closed.is_ok(), "a silent connection kept its place");
    }
    // A body announced and never sent: answered as bad input within the
    // timeout, not waited for.
    let mut stalled = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    stalled
        .write_all(
            b"POST /v1.0-alpha1/lock/lockstore HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stalled.read_to_end(&mut answer),
    )
    .await
    .expect("answered, and closed, in time");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
    // Their places are free: a new caller is served.
    assert_eq!(
        http(http_addr, "GET", "/v1.0/healthz", "", &[]).await.0,
        204
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_and_quiet_streams_outlive_the_idle_timeout() {
    let nodes = nodes();
    let limits = Limits {
        idle_timeout: std::time::Duration::from_millis(300),
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let service = std::sync::Arc::clone(running.locks());
    // Held for 1.2 s: four idle timeouts.
    service
        .acquire(&v1::AcquireRequest {
            ttl_ms: 1200,
            ..acquire("busy")
        })
        .await
        .expect("the holder");
    let mut locks = client(&running).await;
    let observing = locks
        .observe(v1::ObserveRequest {
            election: "quiet".into(),
        })
        .await
        .expect("observes");
    let mut states = observing.into_inner();
    let first = states.message().await.unwrap().expect("the leader now");
    assert_eq!(first.state, "vacant");
    // A gRPC acquire that waits past the holder's expiry: its connection
    // carries nothing but the service's pings meanwhile.
    let waited = locks
        .acquire(v1::AcquireRequest {
            wait_ms: 10_000,
            ..acquire("busy")
        })
        .await
        .expect("granted once the holder's lock expired");
    assert_eq!(waited.into_inner().resource, "busy");
    // The same over HTTP: no header is read while a request is answered.
    service
        .acquire(&v1::AcquireRequest {
            ttl_ms: 1200,
            ..acquire("busy-http")
        })
        .await
        .expect("the holder");
    let (status, answer) = http(
        running.http_addr(),
        "POST",
        "/v1/locks/acquire",
        r#"{"resource":"busy-http","ttlMs":10000,"waitMs":10000}"#,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // The quiet stream is still open: a new leader reaches it.
    service
        .campaign(&v1::CampaignRequest {
            election: "quiet".into(),
            ttl_ms: 10_000,
            ..Default::default()
        })
        .await
        .map(|(_, leading)| std::mem::forget(leading))
        .expect("leads");
    let next = states
        .message()
        .await
        .expect("the stream lives")
        .expect("a change");
    assert_eq!(next.state, "leading");
    running.shutdown().await;
}
