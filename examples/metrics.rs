//! Serves redquorum's metrics to Prometheus with
//! [`MetricsEndpoint`](redquorum::telemetry::MetricsEndpoint) (feature
//! `prometheus`): `http://127.0.0.1:9898/metrics`, while a worker takes and
//! releases a lock every 100 ms. With `--once`: 20 lock+release cycles,
//! then one scrape of its own endpoint printed, and exit.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example metrics            # serve
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example metrics -- --once  # print one scrape
//! ```
//!
//! A Prometheus job for it (the alert rules and a dashboard are in
//! `deploy/`, docs/operations.md §7b):
//!
//! ```yaml
//! scrape_configs:
//!   - job_name: redquorum
//!     static_configs: [{ targets: ["127.0.0.1:9898"] }]
//! ```

use std::time::Duration;

use redquorum::Redlock;
use redquorum::telemetry::MetricsEndpoint;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADDRESS: &str = "127.0.0.1:9898";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let once = std::env::args().any(|a| a == "--once");
    // Port 0 for the one-shot run: any free port will do.
    let endpoint = MetricsEndpoint::serve(if once { "127.0.0.1:0" } else { ADDRESS }).await?;
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let redlock = Redlock::connect(&urls).await?;

    if once {
        for i in 0..20 {
            let lock = redlock
                .lock(&format!("metrics-example:{i}"), Duration::from_secs(5))
                .await?;
            lock.release().await?;
        }
        // What a scrape gets: the endpoint answering over HTTP.
        let mut scrape = tokio::net::TcpStream::connect(endpoint.local_addr()).await?;
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut answer = String::new();
        scrape.read_to_string(&mut answer).await?;
        println!("GET http://{}/metrics", endpoint.local_addr());
        print!("{answer}");
        return Ok(());
    }

    println!("serving http://{}/metrics", endpoint.local_addr());
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
}
