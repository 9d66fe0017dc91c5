//! `--metrics-addr`: a long-running command serves the client's metrics on
//! `/metrics`, and a real Prometheus server (Debian's, which
//! `scripts/alerts` installs) scraping it with the repository's alert rules
//! fires `RedquorumNodeDegraded` once a node freezes — and not before
//! (docs/operations.md §7b). The node is frozen for this client only: its
//! links go through test proxies, one of which stops answering.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::path::Path;
use std::time::Duration;

use support::cli::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A port free now on the loopback.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `GET path` on `127.0.0.1:port` (HTTP/1.0: a whole body, then the
/// server closes): the body, or `None` while nothing answers.
async fn get(port: u16, path: &str) -> Option<String> {
    let ask = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.").then(|| body.to_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .ok()?
}

/// How many times Prometheus has evaluated its rule groups so far, as its
/// own scrape of itself says (0 while it cannot say).
async fn evaluations(port: u16) -> f64 {
    let query = "/api/v1/query?query=sum(prometheus_rule_group_iterations_total)";
    let Some(body) = get(port, query).await else {
        return 0.0;
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The alerts Prometheus reports firing, by name and node.
async fn firing(port: u16) -> Vec<(String, String)> {
    let Some(body) = get(port, "/api/v1/alerts").await else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let alerts = json["data"]["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    alerts
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            let label = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_owned();
            (label("alertname"), label("node"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_fires_the_degraded_node_alert_for_a_frozen_node() {
    let proxies = {
        let mut proxies = Vec::new();
        for url in node_urls() {
            proxies.push(proxy::Proxy::start(url.trim_start_matches("redis://")).await);
        }
        proxies
    };
    let via: Vec<String> = proxies.iter().map(proxy::Proxy::url).collect();
    let (metrics_port, prometheus_port) = (free_port(), free_port());
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let resource = unique("cli-metrics");
    let _holder = redquorum(
        &via,
        &[
            "--metrics-addr",
            &metrics_addr,
            "exec",
            "--ttl",
            "3s",
            &resource,
            "--",
            "sleep",
            "120",
        ],
    )
    .spawn()
    .expect("spawn redquorum exec");
    redquorum_test_support::checks::eventually(
        "exec's /metrics shows its grant and five nodes up",
        Duration::from_secs(20),
        || async {
            get(metrics_port, "/metrics").await.is_some_and(|m| {
                m.contains("redquorum_grants_total{kind=\"plain\"} 1")
                    && m.matches("redquorum_node_up{").count() == 5
            })
        },
    )
    .await;

    // Prometheus with the repository's rules, the degraded node's `for`
    // cut from 1 m to 2 s (the rule is otherwise as shipped).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique("prometheus"));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus/redquorum.rules.yml"
    ))
    .unwrap();
    let degraded = "expr: redquorum_node_up == 0\n        for: 1m";
    assert!(
        rules.contains(degraded),
        "the rule changed: update this test"
    );
    let rules = rules.replace(degraded, "expr: redquorum_node_up == 0\n        for: 2s");
    std::fs::write(dir.join("rules.yml"), rules).unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [rules.yml]\n\
         scrape_configs:\n  - job_name: redquorum\n    static_configs: [{{targets: ['{metrics_addr}']}}]\n\
         \x20 - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{prometheus_port}']}}]\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let _prometheus = tokio::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus (Debian's package; scripts/alerts installs it)");
    redquorum_test_support::checks::eventually(
        "Prometheus scrapes exec's endpoint",
        Duration::from_secs(60),
        || async {
            get(
                prometheus_port,
                "/api/v1/query?query=sum(redquorum_node_up)",
            )
            .await
            .is_some_and(|b| b.contains("\"5\""))
        },
    )
    .await;
    // The control: every node answers, nothing fires — once the rules have
    // been evaluated over more than the rule's `for` (2 s at 1 s each).
    let evaluated = evaluations(prometheus_port).await;
    redquorum_test_support::checks::eventually(
        "Prometheus evaluates its rules three times more",
        Duration::from_secs(60),
        || async { evaluations(prometheus_port).await >= evaluated + 3.0 },
    )
    .await;
    assert_eq!(
        firing(prometheus_port).await,
        [],
        "an alert with every node up"
    );

    // Node 1 stops answering this client (as a SIGSTOPped server would).
    proxies[0].set_cut(true);
    redquorum_test_support::checks::eventually(
        "RedquorumNodeDegraded fires for node 1",
        Duration::from_secs(60),
        || async {
            firing(prometheus_port)
                .await
                .contains(&("RedquorumNodeDegraded".to_owned(), via[0].clone()))
        },
    )
    .await;
    proxies[0].set_cut(false);
}

/// Only the long-running commands serve metrics; an address in use is an
/// OS error, named.
#[tokio::test]
async fn metrics_addr_is_for_long_running_commands() {
    let nodes = node_urls();
    let out = run(
        &nodes,
        &[
            "--metrics-addr",
            "127.0.0.1:9",
            "status",
            &unique("cli-metrics"),
        ],
    )
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("--metrics-addr"), "{}", stderr(&out));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(
        &nodes,
        &[
            "--metrics-addr",
            &addr,
            "exec",
            &unique("cli-metrics"),
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code(&out), 71, "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot listen"), "{}", stderr(&out));
}
