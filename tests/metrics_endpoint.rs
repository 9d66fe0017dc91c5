//! The Prometheus endpoint (feature `prometheus`, on for this repository's
//! tests): `GET /metrics` answers the library's metrics, other requests
//! 404 or 400, at most `MAX_SCRAPES` are served at once (one more is
//! closed unanswered, and served again once one ends), and a second
//! endpoint in the process is a typed error, as is an address in use. Its
//! own binary: it installs the process's metrics recorder.

use std::time::Duration;

use redquorum::telemetry::{EndpointError, MAX_SCRAPES, MetricsEndpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request, and the whole answer (the server closes after it).
async fn ask(endpoint: &MetricsEndpoint, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(endpoint.local_addr()).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_serves_metrics_within_its_bounds() {
    let endpoint = MetricsEndpoint::serve("127.0.0.1:0").await.unwrap();
    let redlock = redquorum::testing::redlock(5).await;
    for _ in 0..3 {
        let lock = redlock
            .try_lock("job", Duration::from_secs(5))
            .await
            .unwrap();
        lock.release().await.unwrap();
    }

    let scrape = ask(&endpoint, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(scrape.starts_with("HTTP/1.1 200 OK\r\n"), "{scrape}");
    assert!(scrape.contains("text/plain; version=0.0.4"), "{scrape}");
    assert!(
        scrape.contains("redquorum_grants_total{kind=\"plain\"} 3"),
        "{scrape}"
    );
    assert!(
        scrape.contains("redquorum_node_up{node=\"memory://0\"} 1"),
        "{scrape}"
    );
    assert!(
        endpoint
            .render()
            .contains("# TYPE redquorum_grants_total counter")
    );

    let elsewhere = ask(&endpoint, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(
        elsewhere.starts_with("HTTP/1.1 404 Not Found"),
        "{elsewhere}"
    );
    let garbage = ask(&endpoint, b"\x16\x03\x01 not http\r\n\r\n").await;
    assert!(garbage.starts_with("HTTP/1.1 400 Bad Request"), "{garbage}");

    // MAX_SCRAPES connections that send nothing hold every place: one more
    // is closed unanswered.
    let mut idle = Vec::new();
    for _ in 0..MAX_SCRAPES {
        idle.push(TcpStream::connect(endpoint.local_addr()).await.unwrap());
    }
    // (Each idle connection is accepted in turn: the one after them is
    // accepted after every one of them.)
    let mut beyond = TcpStream::connect(endpoint.local_addr()).await.unwrap();
    beyond
        .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), beyond.read_to_end(&mut answer))
        .await
        .expect("closed within 10 s");
    assert!(
        read.is_err() || answer.is_empty(),
        "served beyond the bound: {}",
        String::from_utf8_lossy(&answer)
    );
    // Their places come back as they end.
    drop(idle);
    redquorum_test_support::checks::eventually(
        "a scrape served again",
        Duration::from_secs(10),
        || async {
            let mut stream = TcpStream::connect(endpoint.local_addr()).await.unwrap();
            let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await;
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer).await;
            answer.starts_with("HTTP/1.1 200 OK")
        },
    )
    .await;

    // One recorder per process; an address in use is a bind error.
    assert!(matches!(
        MetricsEndpoint::serve("127.0.0.1:0").await,
        Err(EndpointError::RecorderInstalled(_))
    ));
    assert!(matches!(
        MetricsEndpoint::serve(endpoint.local_addr()).await,
        Err(EndpointError::Bind(_))
    ));
}
