//! The own API's streams over HTTP (a line of JSON an event), on
//! in-memory nodes: a kept-alive lease lives while its response is read
//! and is released when the caller closes the connection; a campaign
//! leads while its response lasts, and an observer sees it.

mod support;

use std::time::Duration;

use redquorum_serve::Limits;
use redquorum_test_support::checks::eventually;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a stream: POSTs `body` to `path` and reads until the answer
/// holds `until`; the connection, still open, and what was read.
async fn open_stream(
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
    until: &str,
) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    while !String::from_utf8_lossy(&read).contains(until) {
        let mut chunk = [0; 1024];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&chunk[..n]);
    }
    (stream, String::from_utf8(read).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_lease_lives_while_its_response_is_open() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let (stream, read) = open_stream(
        running.http_addr(),
        "/v1/locks/keep-alive",
        r#"{"resource":"k","ttlMs":300}"#,
        "granted",
    )
    .await;
    assert!(read.contains("application/x-ndjson"), "{read}");
    assert!(read.contains(r#""resource":"k""#), "{read}");
    // Kept past several of its 300 ms TTLs by the service.
    let held_at_first = nodes[0].holder("{k}:lock").expect("held");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(nodes[0].holder("{k}:lock"), Some(held_at_first));
    // The caller goes: the lease is released, not left to expire.
    drop(stream);
    eventually("the lease released", Duration::from_secs(30), || {
        std::future::ready(nodes.iter().all(|n| n.holder("{k}:lock").is_none()))
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_leads_while_its_response_is_open_and_an_observer_sees_it() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let addr = running.http_addr();
    let (_observer, seen) =
        open_stream(addr, "/v1/locks/observe", r#"{"election":"e"}"#, "vacant").await;
    assert!(seen.contains(r#""state":"vacant""#), "{seen}");
    let (leader, read) = open_stream(
        addr,
        "/v1/locks/campaign",
        r#"{"election":"e","ttlMs":2000,"label":"web-1"}"#,
        "granted",
    )
    .await;
    assert!(read.contains(r#""fence":"#), "its term: {read}");
    let (_observer, seen) =
        open_stream(addr, "/v1/locks/observe", r#"{"election":"e"}"#, "leading").await;
    assert!(seen.contains(r#""label":"web-1""#), "{seen}");
    // A bad request is the own API's typed failure, before any stream.
    let (status, answer) = http(
        addr,
        "POST",
        "/v1/locks/campaign",
        r#"{"election":""}"#,
        &[],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("invalid_argument"), "{answer}");
    drop(leader);
    running.shutdown().await;
}
