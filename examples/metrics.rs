//! Serves redquorum's metrics to Prometheus.
//!
//! The library records through the `metrics` facade and ships no exporter:
//! install one before building the client (its per-node instruments bind to
//! the recorder installed then). Here `metrics-exporter-prometheus` renders
//! the text format and a few lines of tokio serve it on
//! `http://127.0.0.1:9898/metrics` while a worker takes and releases a lock
//! every 100 ms.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example metrics            # serve
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example metrics -- --once  # print one scrape
//! ```
//!
//! A Prometheus job for it:
//!
//! ```yaml
//! scrape_configs:
//!   - job_name: redquorum
//!     static_configs: [{ targets: ["127.0.0.1:9898"] }]
//! ```

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use redquorum::Redlock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADDRESS: &str = "127.0.0.1:9898";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let redlock = Redlock::connect(&urls).await?;

    if std::env::args().any(|a| a == "--once") {
        for i in 0..20 {
            let lock = redlock
                .lock(&format!("metrics-example:{i}"), Duration::from_secs(5))
                .await?;
            lock.release().await?;
        }
        print!("{}", prometheus.render());
        return Ok(());
    }

    tokio::spawn(async move {
        loop {
            if let Ok(lock) = redlock
                .lock("metrics-example", Duration::from_secs(5))
                .await
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = lock.release().await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let listener = tokio::net::TcpListener::bind(ADDRESS).await?;
    println!("serving http://{ADDRESS}/metrics");
    loop {
        let (mut stream, _) = listener.accept().await?;
        let body = prometheus.render();
        tokio::spawn(async move {
            // One request per connection; what it asked for does not matter.
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}
