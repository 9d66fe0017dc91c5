//! A metrics recorder installed after the client was built (its own
//! process: the facade takes one recorder per process) sees every series:
//! the per-node instruments resolve again, once, when a recorder appears.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::test]
async fn a_recorder_installed_after_connect_sees_every_series() {
    let redlock = redquorum::testing::redlock(3).await;
    // Used before any recorder exists: counted nowhere.
    redlock
        .lock("before", Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let prometheus = PrometheusBuilder::new().install_recorder().unwrap();
    let mut lock = redlock
        .lock("after", Duration::from_secs(10))
        .await
        .unwrap();
    lock.extend(Duration::from_secs(10)).await.unwrap();
    lock.release().await.unwrap();
    // The release's tail (the nodes after its quorum) has ended.
    redlock.shutdown().await;
    let scrape = prometheus.render();
    for series in [
        r#"redquorum_node_requests_total{node="memory://0",outcome="done"}"#,
        r#"redquorum_node_request_duration_seconds_count{node="memory://1"}"#,
        r#"redquorum_node_up{node="memory://2"} 1"#,
        r#"redquorum_node_in_flight{node="memory://0"} 0"#,
        r#"redquorum_grants_total{kind="plain"} 1"#,
        r#"redquorum_extensions_total{result="extended"} 1"#,
    ] {
        assert!(scrape.contains(series), "no {series} in:\n{scrape}");
    }
}
