//! Dapr's lock API over HTTP and gRPC, on in-memory nodes: the answers
//! Dapr's SDKs expect, owners across instances, bad input and bounds.

mod support;

use redquorum_serve::Limits;
use redquorum_serve::grpc::pb;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_and_unlock_answer_as_dapr_does_over_http() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let addr = running.http_addr();

    assert_eq!(
        try_lock(addr, "order-1", "alice", 10).await,
        (200, r#"{"success":true}"#.into())
    );
    // Held: refused to everyone, its owner included (Dapr's stores do so).
    assert_eq!(
        try_lock(addr, "order-1", "bob", 10).await.1,
        r#"{"success":false}"#
    );
    assert_eq!(
        try_lock(addr, "order-1", "alice", 10).await.1,
        r#"{"success":false}"#
    );
    // Every node holds it, under a random token, labelled with the owner.
    assert!(nodes.iter().all(|n| n.holder("{order-1}:lock").is_some()));
    assert!(
        nodes
            .iter()
            .all(|n| n.holder("{order-1}:lock").as_deref() != Some("alice"))
    );

    assert_eq!(
        unlock(addr, "order-1", "bob").await,
        (200, r#"{"status":2}"#.into())
    );
    assert_eq!(
        unlock(addr, "order-1", "alice").await,
        (200, r#"{"status":0}"#.into())
    );
    assert_eq!(
        unlock(addr, "order-1", "alice").await,
        (200, r#"{"status":1}"#.into())
    );
    assert!(nodes.iter().all(|n| n.holder("{order-1}:lock").is_none()));
    assert_eq!(
        try_lock(addr, "order-1", "bob", 10).await.1,
        r#"{"success":true}"#
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_unlocks_through_any_instance() {
    let nodes = nodes();
    let (a, b) = (
        serve(&nodes, Limits::default(), None).await,
        serve(&nodes, Limits::default(), None).await,
    );
    assert_eq!(
        try_lock(a.http_addr(), "job", "alice", 30).await.1,
        r#"{"success":true}"#
    );
    // The other instance excludes too, and knows whose it is.
    assert_eq!(
        try_lock(b.http_addr(), "job", "bob", 30).await.1,
        r#"{"success":false}"#
    );
    assert_eq!(
        unlock(b.http_addr(), "job", "bob").await.1,
        r#"{"status":2}"#
    );
    assert_eq!(
        unlock(b.http_addr(), "job", "alice").await.1,
        r#"{"status":0}"#
    );
    // The granting instance's memory of it is stale now: the nodes decide.
    assert_eq!(
        try_lock(b.http_addr(), "job", "alice", 30).await.1,
        r#"{"success":true}"#
    );
    assert_eq!(
        unlock(a.http_addr(), "job", "alice").await.1,
        r#"{"status":0}"#
    );
    assert_eq!(
        unlock(a.http_addr(), "job", "alice").await.1,
        r#"{"status":1}"#
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_service_answers_as_dapr_does() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut client = grpc(&running).await;
    let lock = |owner: &str| pb::TryLockRequest {
        store_name: "lockstore".into(),
        resource_id: "r".into(),
        lock_owner: owner.into(),
        expiry_in_seconds: 10,
    };
    let unlock = |owner: &str| pb::UnlockRequest {
        store_name: "lockstore".into(),
        resource_id: "r".into(),
        lock_owner: owner.into(),
    };
    assert!(
        client
            .try_lock_alpha1(lock("a"))
            .await
            .unwrap()
            .into_inner()
            .success
    );
    assert!(
        !client
            .try_lock_alpha1(lock("b"))
            .await
            .unwrap()
            .into_inner()
            .success
    );
    let status = |s: pb::unlock_response::Status| s as i32;
    let got = client
        .unlock_alpha1(unlock("b"))
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        got,
        status(pb::unlock_response::Status::LockBelongsToOthers)
    );
    let got = client
        .unlock_alpha1(unlock("a"))
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(got, status(pb::unlock_response::Status::Success));
    let got = client
        .unlock_alpha1(unlock("a"))
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(got, status(pb::unlock_response::Status::LockDoesNotExist));

    // Bad input: INVALID_ARGUMENT, nothing held.
    for bad in [
        pb::TryLockRequest {
            resource_id: String::new(),
            ..lock("a")
        },
        pb::TryLockRequest {
            lock_owner: String::new(),
            ..lock("a")
        },
        pb::TryLockRequest {
            expiry_in_seconds: 0,
            ..lock("a")
        },
        pb::TryLockRequest {
            expiry_in_seconds: 61,
            ..lock("a")
        },
        pb::TryLockRequest {
            resource_id: "x".repeat(1025),
            ..lock("a")
        },
    ] {
        let e = client.try_lock_alpha1(bad.clone()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}: {e}");
    }
    let e = client
        .try_lock_alpha1(pb::TryLockRequest {
            store_name: "other".into(),
            ..lock("a")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("lock store other not found"), "{e}");
    assert_eq!(nodes.iter().map(|n| n.live_keys()).sum::<usize>(), 0);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_protobuf_is_invalid_argument() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    // A gRPC frame whose message is a field 1 claiming 100 bytes and
    // carrying 1: not a TryLockRequest.
    let message = [0x0a, 100, b'x'];
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let mut channel =
        tonic::transport::Channel::from_shared(format!("http://{}", running.grpc_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut grpc = tonic::client::Grpc::new(&mut channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
    );
    let e = grpc
        .unary(tonic::Request::new(frame[5..].to_vec()), path, RawCodec)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    running.shutdown().await;
}

/// Sends bytes as they are, and reads none.
#[derive(Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = ();
    type Error = tonic::Status;
    fn decode(&mut self, _: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        Ok(Some(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_input_is_a_malformed_request_and_holds_nothing() {
    let nodes = nodes();
    let limits = Limits {
        max_request_bytes: 512,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let addr = running.http_addr();
    let path = "/v1.0-alpha1/lock/lockstore";
    let long = "x".repeat(600);
    for body in [
        "{",
        "[]",
        r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":"10"}"#,
        r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":10,"extra":1}"#,
        r#"{"resourceId":"","lockOwner":"a","expiryInSeconds":10}"#,
        r#"{"resourceId":"r","expiryInSeconds":10}"#,
        r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":0}"#,
        r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":-5}"#,
        r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":100000}"#,
        &format!(r#"{{"resourceId":"{long}","lockOwner":"a","expiryInSeconds":10}}"#),
    ] {
        let (status, answer) = http(addr, "POST", path, body, &[]).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer.contains(r#""errorCode":"ERR_MALFORMED_REQUEST""#),
            "{body}: {answer}"
        );
    }
    let (status, answer) = http(addr, "POST", "/v1.0-alpha1/lock/nope", "{}", &[]).await;
    assert_eq!(status, 400);
    assert!(
        answer.contains("ERR_MALFORMED_REQUEST"),
        "Dapr checks the names first: {answer}"
    );
    let body = r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":10}"#;
    let (status, answer) = http(addr, "POST", "/v1.0-alpha1/lock/nope", body, &[]).await;
    assert_eq!(
        (status, answer.contains("ERR_LOCK_STORE_NOT_FOUND")),
        (400, true),
        "{answer}"
    );
    assert_eq!(nodes.iter().map(|n| n.live_keys()).sum::<usize>(), 0);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_where_one_is_set_but_not_for_health() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), Some("s3cret")).await;
    let addr = running.http_addr();
    let body = r#"{"resourceId":"r","lockOwner":"a","expiryInSeconds":10}"#;
    let path = "/v1.0-alpha1/lock/lockstore";
    let (status, answer) = http(addr, "POST", path, body, &[]).await;
    assert_eq!(status, 401, "{answer}");
    assert!(!answer.contains("s3cret"));
    let (status, _) = http(addr, "POST", path, body, &[("dapr-api-token", "wrong")]).await;
    assert_eq!(status, 401);
    assert_eq!(http(addr, "GET", "/metrics", "", &[]).await.0, 401);
    let (status, answer) = http(addr, "POST", path, body, &[("dapr-api-token", "s3cret")]).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"success":true}"#));
    assert_eq!(
        http(addr, "GET", "/v1.0/healthz/outbound", "", &[]).await.0,
        204
    );

    let mut client = grpc(&running).await;
    let request = pb::UnlockRequest {
        store_name: "lockstore".into(),
        resource_id: "r".into(),
        lock_owner: "a".into(),
    };
    let e = client.unlock_alpha1(request.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut with_token = tonic::Request::new(request);
    with_token
        .metadata_mut()
        .insert("dapr-api-token", "s3cret".parse().unwrap());
    assert_eq!(
        client
            .unlock_alpha1(with_token)
            .await
            .unwrap()
            .into_inner()
            .status,
        0
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_needs_a_token() {
    let nodes = nodes();
    let config = redquorum_serve::Config {
        http: "0.0.0.0:0".parse().unwrap(),
        grpc: "127.0.0.1:0".parse().unwrap(),
        ..redquorum_serve::Config::default()
    };
    let e = redquorum_serve::Running::start(redlock(&nodes).await, config)
        .await
        .unwrap_err();
    assert!(
        matches!(e, redquorum_serve::StartError::TokenRequired(_)),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_rate_is_bounded() {
    let nodes = nodes();
    let limits = Limits {
        max_rate: 2,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let addr = running.http_addr();
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(try_lock(addr, &format!("r{i}"), "a", 10).await.0);
    }
    // A bucket of 2 refills 2 a second: 8 requests made one after the
    // other in less than 3 s meet an empty bucket at least once.
    let refused = statuses.iter().filter(|s| **s == 429).count();
    let granted = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(refused + granted, 8, "{statuses:?}");
    assert!(refused >= 1, "{statuses:?}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_quorum_and_metrics_are_served() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let addr = running.http_addr();
    assert_eq!(http(addr, "GET", "/v1.0/healthz", "", &[]).await.0, 204);
    assert_eq!(try_lock(addr, "r", "a", 10).await.0, 200);
    let (status, text) = http(addr, "GET", "/metrics", "", &[]).await;
    assert_eq!(status, 200);
    assert!(
        text.contains(r#"redquorum_serve_requests_total{method="try_lock",outcome="granted"}"#),
        "{text}"
    );
    // An instance whose nodes are not there (nothing listens on ports 1 to 3):
    // its try-locks fail undecided, and it is not ready.
    let gone = redquorum::Redlock::builder()
        .nodes([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
        .retry(redquorum::Retry::none())
        .build()
        .await
        .unwrap();
    let config = redquorum_serve::Config {
        http: "127.0.0.1:0".parse().unwrap(),
        grpc: "127.0.0.1:0".parse().unwrap(),
        ..redquorum_serve::Config::default()
    };
    let blind = redquorum_serve::Running::start(gone, config).await.unwrap();
    let (status, answer) = try_lock(blind.http_addr(), "r2", "a", 10).await;
    assert_eq!(status, 500, "{answer}");
    assert!(answer.contains("ERR_TRY_LOCK"), "{answer}");
    let (status, why) = http(blind.http_addr(), "GET", "/v1.0/healthz", "", &[]).await;
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains("0 of 3 nodes count toward a grant, 2 needed"),
        "{why}"
    );
    blind.shutdown().await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_granted_locks_to_their_owners() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let addr = running.http_addr();
    assert_eq!(
        try_lock(addr, "kept", "a", 30).await.1,
        r#"{"success":true}"#
    );
    running.shutdown().await;
    assert!(
        nodes.iter().all(|n| n.holder("{kept}:lock").is_some()),
        "still held"
    );
    let other = serve(&nodes, Limits::default(), None).await;
    assert_eq!(
        try_lock(other.http_addr(), "kept", "b", 30).await.1,
        r#"{"success":false}"#
    );
    assert_eq!(
        unlock(other.http_addr(), "kept", "a").await.1,
        r#"{"status":0}"#
    );
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_wait_to_be_accepted() {
    let nodes = nodes();
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let running = serve(&nodes, limits, None).await;
    let addr = running.http_addr();
    let idle: Vec<_> =
        futures::future::join_all((0..2).map(|_| tokio::net::TcpStream::connect(addr)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    // Both places are held (each connection is accepted once it has one).
    let mut third = tokio::spawn(async move { http(addr, "GET", "/v1.0/healthz", "", &[]).await });
    let waited = tokio::time::timeout(std::time::Duration::from_millis(300), &mut third).await;
    assert!(
        waited.is_err(),
        "a third connection was served past the bound of two"
    );
    drop(idle);
    assert_eq!(third.await.unwrap().0, 204, "served once a place was free");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dapr_unlock_never_releases_a_lock_of_the_own_api_labelled_as_its_owner() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let native = redquorum_serve::grpc::v1::AcquireRequest {
        resource: "shared".into(),
        ttl_ms: 10_000,
        label: "alice".into(),
        ..Default::default()
    };
    running.locks().acquire(&native).await.expect("granted");
    let addr = running.http_addr();
    assert_eq!(unlock(addr, "shared", "alice").await.1, r#"{"status":2}"#);
    assert!(
        nodes.iter().all(|n| n.holder("{shared}:lock").is_some()),
        "nothing released"
    );
    assert_eq!(
        try_lock(addr, "shared", "alice", 10).await.1,
        r#"{"success":false}"#
    );
    running.shutdown().await;
}
