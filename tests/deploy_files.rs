//! The alert rules and the dashboard in `deploy/` name only metrics the
//! library exports, the dashboard shows every one, every alert has a unit
//! test (`deploy/prometheus/redquorum.rules.test.yml`, run by
//! `scripts/alerts`) and a runbook entry (docs/operations.md §7b). Pure:
//! reads files only.

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every `redquorum_…` name in `text`, a histogram's or summary's series
/// (`_bucket`, `_sum`, `_count`) by the metric's own name.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("redquorum_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(name.to_owned());
        rest = &tail[end..];
    }
    names
}

/// The metrics the library exports: the names in `src/telemetry.rs`.
fn exported() -> BTreeSet<String> {
    let names = metric_names(&read("src/telemetry.rs"));
    assert!(names.len() >= 15, "{names:?}");
    names
}

/// The alert names of the rules file.
fn alerts(rules: &str) -> Vec<&str> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_name_only_exported_metrics() {
    let exported = exported();
    for file in [
        "deploy/prometheus/redquorum.rules.yml",
        "deploy/grafana/redquorum.json",
    ] {
        let named = metric_names(&read(file));
        assert!(!named.is_empty(), "{file} names no metric");
        let unknown: Vec<_> = named.difference(&exported).collect();
        assert!(unknown.is_empty(), "{file} names {unknown:?}, not exported");
    }
}

#[test]
fn the_dashboard_shows_every_exported_metric() {
    let shown = metric_names(&read("deploy/grafana/redquorum.json"));
    let missing: Vec<_> = exported().difference(&shown).cloned().collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}

#[test]
fn every_alert_has_a_unit_test_and_a_runbook() {
    let rules = read("deploy/prometheus/redquorum.rules.yml");
    let tests = read("deploy/prometheus/redquorum.rules.test.yml");
    let operations = read("docs/operations.md");
    let alerts = alerts(&rules);
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert}: no unit test in redquorum.rules.test.yml"
        );
        assert!(
            operations.contains(&format!("`{alert}`")),
            "{alert}: no runbook entry in docs/operations.md"
        );
    }
}

/// The checker's negative control: a name the library does not export is
/// caught.
#[test]
fn an_unknown_metric_is_caught() {
    let named = metric_names("rate(redquorum_locks_granted_total[5m]) + redquorum_node_up");
    let exported = exported();
    let unknown: Vec<_> = named.difference(&exported).collect();
    assert_eq!(unknown, ["redquorum_locks_granted_total"]);
}
