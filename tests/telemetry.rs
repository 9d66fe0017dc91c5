//! What operators see: the metrics (read back through a Prometheus recorder
//! installed before any client is built) and the log lines when a node
//! degrades, recovers, or a lease is lost. In-memory nodes, so a node can be
//! frozen exactly.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redquorum::node::Node;
use redquorum::{LockError, Redlock};
use redquorum_test_support::checks;
use support::memory::MemoryNode;

/// The process's one recorder (the facade takes one per process).
fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("install the recorder")
    })
}

/// The value of the sample `name{labels}` in a scrape, if present.
fn sample(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        let matches = if labels.is_empty() {
            rest.is_empty()
        } else {
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        };
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// Log lines written while the returned guard lives (this thread only).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// The lines holding every one of `parts`.
    fn lines(&self, parts: &[&str]) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| parts.iter().all(|p| line.contains(p)))
            .map(str::to_owned)
            .collect()
    }
}

fn nodes(prefix: &str) -> Vec<Arc<MemoryNode>> {
    (0..5)
        .map(|i| MemoryNode::named(&format!("memory://{prefix}-{i}")))
        .collect()
}

async fn client(nodes: &[Arc<MemoryNode>]) -> Redlock {
    Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| Arc::clone(n) as Arc<dyn Node>))
        .node_timeout(Duration::from_millis(20))
        .build()
        .await
        .expect("build")
}

/// Waits (at most 5 s) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    checks::eventually(what, Duration::from_secs(5), || std::future::ready(done())).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_frozen_node_is_one_warning_its_recovery_one_note_and_every_call_is_counted() {
    let prom = prometheus();
    let (logs, _guard) = Logs::capture();
    let nodes = nodes("frozen");
    let redlock = client(&nodes).await;
    let frozen = "memory://frozen-4";

    nodes[4].freeze();
    for i in 0..20 {
        let lock = redlock
            .try_lock(&format!("job-{i}"), Duration::from_secs(5))
            .await
            .expect("four of five nodes grant");
        lock.release().await.expect("release");
    }
    eventually("the frozen node is degraded", || {
        redlock
            .nodes()
            .iter()
            .filter(|n| n.is_degraded())
            .map(|n| n.name())
            .any(|n| n == frozen)
    })
    .await;
    assert_eq!(
        redlock
            .nodes()
            .iter()
            .filter(|n| n.is_degraded())
            .map(|n| n.name())
            .collect::<Vec<_>>(),
        [frozen]
    );
    let warned = logs.lines(&["WARN", frozen, "timing out"]);
    assert_eq!(
        warned.len(),
        1,
        "one warning, not one per call: {warned:#?}"
    );
    let scrape = prom.render();
    assert_eq!(
        sample(&scrape, "redquorum_node_up", &[("node", frozen)]),
        Some(0.0)
    );
    let done = sample(
        &scrape,
        "redquorum_node_requests_total",
        &[("node", "memory://frozen-0"), ("outcome", "done")],
    );
    assert_eq!(done, Some(40.0), "20 acquires and 20 releases:\n{scrape}");

    // Thawed: the queued calls land, the node answers, one note.
    nodes[4].thaw();
    let lock = redlock
        .try_lock("after-thaw", Duration::from_secs(5))
        .await
        .expect("lock");
    lock.release().await.expect("release");
    eventually("the node recovered", || {
        redlock
            .nodes()
            .iter()
            .filter(|n| n.is_degraded())
            .map(|n| n.name())
            .next()
            .is_none()
    })
    .await;
    let recovered = logs.lines(&["INFO", frozen, "node recovered"]);
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    let scrape = prom.render();
    assert_eq!(
        sample(&scrape, "redquorum_node_up", &[("node", frozen)]),
        Some(1.0)
    );
    assert!(
        sample(
            &scrape,
            "redquorum_node_request_duration_seconds_count",
            &[("node", "memory://frozen-0")]
        )
        .is_some_and(|n| n >= 42.0),
        "{scrape}"
    );
    // Operation metrics (shared by every test in this binary: at least).
    assert!(
        sample(&scrape, "redquorum_grants_total", &[("kind", "plain")]).is_some_and(|n| n >= 21.0)
    );

    // A refusal is counted with its reason.
    let held = redlock
        .try_lock("held", Duration::from_secs(5))
        .await
        .expect("lock");
    match redlock.try_lock("held", Duration::from_secs(5)).await {
        Err(LockError::Taken { .. }) => {}
        other => panic!("{other:?}"),
    }
    held.release().await.expect("release");
    let scrape = prom.render();
    assert!(
        sample(
            &scrape,
            "redquorum_refusals_total",
            &[("kind", "plain"), ("reason", "taken")]
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_lease_says_which_nodes_failed_and_how() {
    let prom = prometheus();
    let (logs, _guard) = Logs::capture();
    let nodes = nodes("lease");
    let redlock = client(&nodes).await;
    let ttl = Duration::from_millis(300);
    let result = redlock
        .run("lease-job", ttl, |_lease| {
            let nodes = nodes.clone();
            async move {
                // A majority freezes under the running work.
                for node in &nodes[..3] {
                    node.freeze();
                }
                std::future::pending::<()>().await
            }
        })
        .await;
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    let lost = logs.lines(&["WARN", "lease lost", "lease-job"]);
    assert_eq!(lost.len(), 1, "{lost:#?}");
    assert!(
        lost[0].contains("memory://lease-0: timed out"),
        "the line names the failed nodes and how: {}",
        lost[0]
    );
    for node in &nodes {
        node.thaw();
    }
    let scrape = prom.render();
    assert!(sample(&scrape, "redquorum_leases_lost_total", &[]).is_some_and(|n| n >= 1.0));
}
