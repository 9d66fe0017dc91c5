//! `redquorum nodes`: every node's reachability, latency and server.

use std::time::Duration;

use redquorum::Retry;
use serde_json::json;

use crate::cli::{Global, NodesArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

/// How long a node may take to answer, unless --node-timeout says.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

pub async fn nodes(global: &Global, urls: &[String], args: &NodesArgs, ui: &Ui) -> Code {
    let timeout = global.node_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let redlock = match crate::connect_with(global, urls, Retry::none(), Some(timeout)).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let health = redlock.probe(timeout).await;
    let reachable = health.iter().filter(|h| h.is_reachable()).count();
    let quorum = redlock.quorum();
    if args.json {
        let nodes: Vec<serde_json::Value> = health
            .iter()
            .map(|h| {
                json!({
                    "node": h.node,
                    "reachable": h.is_reachable(),
                    "latency_us": h.reachable.as_ref().ok().map(|d| d.as_micros() as u64),
                    "error": h.reachable.as_ref().err().map(ToString::to_string),
                    "server": h.server,
                    "in_flight": h.in_flight,
                    "quarantined_ms": h.quarantined_for.map(|d| d.as_millis() as u64),
                    "durable": h.durable,
                    "evicting": h.evicting,
                    "replica": h.replica,
                })
            })
            .collect();
        let out = json!({
            "nodes": nodes,
            "reachable": reachable,
            "quorum": quorum,
            "verdict": if reachable >= quorum { "OK" } else { "NO_QUORUM" },
        });
        println!("{out}");
    } else {
        println!(
            "{:<32} {:<6} {:>10} {:<16} {:>9}  {:<16} ERROR",
            "NODE", "STATE", "LATENCY", "SERVER", "IN-FLIGHT", "WARNING"
        );
        for h in &health {
            let (state, latency, error) = match &h.reachable {
                Ok(d) => (
                    "up",
                    format!("{:.2} ms", d.as_secs_f64() * 1e3),
                    String::new(),
                ),
                Err(e) => ("down", "-".to_owned(), e.to_string()),
            };
            println!(
                "{:<32} {:<6} {:>10} {:<16} {:>9}  {:<16} {}",
                h.node,
                state,
                latency,
                h.server.as_deref().unwrap_or("-"),
                h.in_flight,
                warning(h),
                error
            );
        }
        for line in health.iter().flat_map(warnings) {
            println!("{line}");
        }
        println!("{reachable} of {} reachable, quorum {quorum}", health.len());
    }
    if reachable >= quorum {
        0
    } else {
        exit::UNAVAILABLE
    }
}

/// The WARNING column: what makes the node unsafe or unready for locks now.
fn warning(h: &redquorum::NodeHealth) -> String {
    let mut parts = Vec::new();
    if let Some(left) = h.quarantined_for {
        parts.push(format!("quarantine {}s", left.as_secs().max(1)));
    }
    if let Some(policy) = &h.evicting {
        parts.push(format!("evicts:{policy}"));
    }
    if h.replica {
        parts.push("replica".to_owned());
    }
    if h.durable == Some(false) {
        parts.push("no-fsync".to_owned());
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(",")
    }
}

/// What makes a node unsafe or unready for locks now, a sentence each (for
/// `nodes`, and on stderr for `status`).
pub fn warnings(h: &redquorum::NodeHealth) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(left) = h.quarantined_for {
        lines.push(format!(
            "{}: restarted without persistence; counts toward no new lock for {} more \
             (docs/operations.md, restarts)",
            h.node,
            humantime::format_duration(Duration::from_secs(left.as_secs().max(1)))
        ));
    }
    if let Some(policy) = &h.evicting {
        lines.push(format!(
            "{}: maxmemory-policy {policy} with a memory limit may evict lock keys (a lock \
             then can be granted twice): set noeviction",
            h.node
        ));
    }
    if h.replica {
        lines.push(format!(
            "{}: a replica; a lock node must be an independent master",
            h.node
        ));
    }
    lines
}
