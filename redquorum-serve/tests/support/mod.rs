//! What the service's tests share: a service over in-memory nodes on
//! ports the system picks, a bare HTTP/1.1 client, and a gRPC client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use redquorum::testing::MemoryNode;
use redquorum::{Redlock, Retry};
use redquorum_serve::grpc::pb::dapr_client::DaprClient;
use redquorum_serve::grpc::v1;
use redquorum_serve::grpc::v1::locks_client::LocksClient;
use redquorum_serve::{ApiToken, Config, Limits, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Five in-memory nodes.
pub fn nodes() -> Vec<Arc<MemoryNode>> {
    (0..5).map(MemoryNode::new).collect()
}

/// A client over `nodes` as the command builds it (no retries).
pub async fn redlock(nodes: &[Arc<MemoryNode>]) -> Redlock {
    Redlock::builder()
        .custom_nodes(
            nodes
                .iter()
                .map(|n| Arc::clone(n) as Arc<dyn redquorum::node::Node>),
        )
        .retry(Retry::none())
        .build()
        .await
        .expect("in-memory nodes build")
}

/// A service over `nodes` on loopback ports the system picks.
pub async fn serve(nodes: &[Arc<MemoryNode>], limits: Limits, token: Option<&str>) -> Running {
    let config = Config {
        http: "127.0.0.1:0".parse().unwrap(),
        grpc: "127.0.0.1:0".parse().unwrap(),
        token: token.and_then(ApiToken::new),
        limits,
        ..Config::default()
    };
    Running::start(redlock(nodes).await, config)
        .await
        .expect("serve starts")
}

/// One HTTP/1.1 request; the status and body of its answer.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut answer))
        .await
        .expect("an answer within 30 s")
        .expect("read");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    // Chunked bodies: keep the JSON line only.
    let body = body
        .lines()
        .find(|l| l.starts_with('{'))
        .map(str::to_owned)
        .unwrap_or(body);
    (status, body)
}

/// `POST /v1.0-alpha1/lock/lockstore`.
pub async fn try_lock(addr: SocketAddr, resource: &str, owner: &str, expiry: i64) -> (u16, String) {
    let body = format!(
        r#"{{"resourceId":"{resource}","lockOwner":"{owner}","expiryInSeconds":{expiry}}}"#
    );
    http(addr, "POST", "/v1.0-alpha1/lock/lockstore", &body, &[]).await
}

/// `POST /v1.0-alpha1/unlock/lockstore`.
pub async fn unlock(addr: SocketAddr, resource: &str, owner: &str) -> (u16, String) {
    let body = format!(r#"{{"resourceId":"{resource}","lockOwner":"{owner}"}}"#);
    http(addr, "POST", "/v1.0-alpha1/unlock/lockstore", &body, &[]).await
}

/// A gRPC client of `running`'s Dapr service.
pub async fn grpc(running: &Running) -> DaprClient<tonic::transport::Channel> {
    DaprClient::connect(format!("http://{}", running.grpc_addr()))
        .await
        .expect("gRPC connects")
}

/// A client of the own API (`redquorum.v1.Locks`) on `running`.
pub async fn client(running: &Running) -> LocksClient<tonic::transport::Channel> {
    LocksClient::connect(format!("http://{}", running.grpc_addr()))
        .await
        .expect("gRPC connects")
}

/// An acquire of `resource` for 10 s, one round.
pub fn acquire(resource: &str) -> v1::AcquireRequest {
    v1::AcquireRequest {
        resource: resource.into(),
        ttl_ms: 10_000,
        ..Default::default()
    }
}

/// The typed failure a status carries.
pub fn failure(status: &tonic::Status) -> v1::Failure {
    v1::Failure::decode(status.details()).expect("a Failure in the details")
}
