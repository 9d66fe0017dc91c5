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
    let health = redlock.nodes().probe(timeout).await;
    let reachable = health.iter().filter(|h| h.is_reachable()).count();
    let quorum = redlock.nodes().quorum();
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
                    "member": h.member,
                    "excluded": h.excluded,
                })
            })
            .collect();
        let deployment = redlock.nodes().deployment().map(|d| {
            json!({
                "members": d.members(),
                "set": d.fingerprint(),
                "max_ttl_ms": d.max_ttl_ms(),
            })
        });
        let out = json!({
            "nodes": nodes,
            "deployment": deployment,
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
                warning(h, rounds_timeout(global)),
                error
            );
        }
        for line in health
            .iter()
            .flat_map(|h| warnings(h, rounds_timeout(global)))
        {
            println!("{line}");
        }
        match redlock.nodes().deployment() {
            Some(d) => println!("deployment: {d}"),
            None => println!("deployment: no record agreed"),
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
fn warning(h: &redquorum::NodeHealth, node_timeout: Duration) -> String {
    let mut parts = Vec::new();
    if let Some(rtt) = slow(h, node_timeout) {
        parts.push(format!("slow:{}ms", rtt.as_millis()));
    }
    if let Some(left) = h.quarantined_for {
        parts.push(format!("quarantine {}s", left.as_secs().max(1)));
    }
    if let Some(policy) = &h.evicting {
        parts.push(format!("evicts:{policy}"));
    }
    if h.replica {
        parts.push("replica".to_owned());
    }
    if h.excluded.is_some() {
        parts.push("no-member".to_owned());
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
pub fn warnings(h: &redquorum::NodeHealth, node_timeout: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(rtt) = slow(h, node_timeout) {
        lines.push(format!(
            "{}: a round trip of {} ms is near or past the node timeout lock rounds use ({} ms): \
             its answers come too late to count; raise --node-timeout (Builder::node_timeout) \
             to about three round trips",
            h.node,
            rtt.as_millis(),
            node_timeout.as_millis()
        ));
    }
    if let Some(left) = h.quarantined_for {
        lines.push(format!(
            "{}: quarantined (restarted, or first seen, within the longest TTL: it may have \
             forgotten keys); counts toward no new lock for {} more (docs/operations.md, restarts)",
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
    if let Some(why) = &h.excluded {
        lines.push(format!(
            "{}: {why}; counts toward no lock (docs/agreement.md)",
            h.node
        ));
    }
    lines
}

/// The node timeout lock rounds use: `--node-timeout`, or the library's
/// default ceiling.
pub fn rounds_timeout(global: &Global) -> Duration {
    global
        .node_timeout
        .unwrap_or(redquorum::quorum::DEFAULT_NODE_TIMEOUT)
}

/// The node's round trip, where it is past 80 % of `node_timeout`.
fn slow(h: &redquorum::NodeHealth, node_timeout: Duration) -> Option<Duration> {
    h.reachable
        .as_ref()
        .ok()
        .copied()
        .filter(|rtt| *rtt * 5 > node_timeout * 4)
}
