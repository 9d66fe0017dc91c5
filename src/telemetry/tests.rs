//! The node telemetry's slow-node rule, read back from a local recorder
//! and log.

use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;
use crate::log_capture::Lines;

/// A node whose answers come near the node timeout is named once, with
/// the setting, after three of them; its gauge follows; an answer
/// within half of the timeout ends it. One late answer names nothing.
#[test]
fn a_node_answering_near_its_timeout_is_named_once() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let lines = Lines::default();
    let subscriber = lines.subscriber();
    let timeout = Duration::from_millis(50);
    let gauge = |scrape: &str| {
        scrape
            .lines()
            .find_map(|l| l.strip_prefix("redquorum_node_slow{node=\"far\"} "))
            .map(str::to_owned)
    };
    let scrapes = tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || {
            let node = NodeTelemetry::new(&Arc::from("far"));
            let ms = Duration::from_millis;
            // Answers 100 ms apart (two node timeouts).
            let mut at = ms(0);
            let mut answer = |took| {
                at += ms(100);
                node.answered_in(ms(took), timeout, at);
            };
            answer(70);
            answer(1); // fast: the count starts again
            let mut scrapes = vec![handle.render()];
            // A burst of slow answers (calls queued behind one stall)
            // counts once.
            for _ in 0..5 {
                node.answered_in(ms(90), timeout, ms(201));
            }
            for took in [70, 41, 80] {
                answer(took);
                scrapes.push(handle.render());
            }
            answer(30); // between: still slow
            scrapes.push(handle.render());
            answer(20);
            scrapes.push(handle.render());
            scrapes
        })
    });
    let gauges: Vec<_> = scrapes.iter().map(|s| gauge(s)).collect();
    let expected = ["0", "0", "1", "1", "1", "0"].map(|g| Some(g.to_owned()));
    assert_eq!(gauges, expected);
    let logged = lines.text();
    assert_eq!(logged.matches("WARN").count(), 1, "{logged}");
    assert!(logged.contains("node=far"), "{logged}");
    assert!(logged.contains("round_trip_ms=41"), "{logged}");
    assert!(logged.contains("Builder::node_timeout"), "{logged}");
    assert_eq!(logged.matches("INFO").count(), 1, "{logged}");
}
