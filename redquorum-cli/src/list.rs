//! `redquorum list`: what is held now on a quorum, by name pattern — a
//! printer of the library's listing (`Redlock::list`).

use std::time::Duration;

use redquorum::inspect::{Listing, TimeLeft};
use redquorum::{LockError, Retry};
use serde_json::json;

use crate::cli::{Global, ListArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

/// Connecting and reading, per node, unless `--node-timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

pub async fn list(global: &Global, nodes: &[String], args: &ListArgs, ui: &Ui) -> Code {
    let timeout = global.node_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let redlock = match crate::connect_with(global, nodes, Retry::none(), Some(timeout)).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let code = match redlock.list(&args.pattern, args.limit).await {
        Ok(listing) => {
            if args.json {
                println!("{}", as_json(&listing));
            } else {
                print_table(&listing, ui);
            }
            if listing.complete {
                0
            } else {
                exit::UNAVAILABLE
            }
        }
        Err(LockError::Input(e)) => {
            ui.usage(&e.to_string());
            exit::USAGE
        }
        Err(e) => {
            ui.error(format_args!("cannot list {}: {e}", args.pattern));
            exit::SOFTWARE
        }
    };
    redlock.shutdown().await;
    code
}

fn left_text(left: Option<TimeLeft>) -> String {
    match left {
        None => "-".to_owned(),
        Some(TimeLeft::Forever) => "no expiry".to_owned(),
        Some(TimeLeft::For(d)) => {
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
        }
    }
}

fn print_table(listing: &Listing, ui: &Ui) {
    println!(
        "{:<10} {:<32} {:<24} {:<9} {:>10} {:>5} {:>5}",
        "KIND", "RESOURCE", "LABEL", "TOKEN", "LEFT", "NODES", "HOLDS"
    );
    for l in &listing.held {
        println!(
            "{:<10} {:<32} {:<24} {:<9} {:>10} {:>5} {:>5}",
            l.kind.name(),
            l.resource,
            l.label.as_deref().unwrap_or("-"),
            l.holder.as_deref().unwrap_or("-"),
            left_text(l.time_left),
            l.nodes,
            l.holds
        );
    }
    for (node, why) in &listing.unscanned {
        ui.note(format_args!("{node}: not scanned: {why}"));
    }
    if !listing.complete {
        ui.note(format_args!(
            "the list may be incomplete: too few nodes scanned, or the limit reached"
        ));
    }
}

fn as_json(listing: &Listing) -> serde_json::Value {
    let held: Vec<_> = listing
        .held
        .iter()
        .map(|l| {
            json!({
                "kind": l.kind.name(),
                "resource": l.resource,
                "label": l.label,
                "token_prefix": l.holder,
                "pttl_ms": l.time_left.map(|t| match t {
                    TimeLeft::For(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
                    TimeLeft::Forever => -1,
                }),
                "nodes": l.nodes,
                "holds": l.holds,
                "fence": l.fence,
            })
        })
        .collect();
    let unscanned: Vec<_> = listing
        .unscanned
        .iter()
        .map(|(node, why)| json!({"node": node, "error": why.to_string()}))
        .collect();
    json!({"held": held, "complete": listing.complete, "unscanned": unscanned})
}
