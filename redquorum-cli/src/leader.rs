//! `redquorum leader`: who leads an election, once or at every change — a
//! printer of the library's `Election::leader` and `Election::observe`.

use std::time::Duration;

use futures::StreamExt;
use redquorum::election::{Election, LeaderState};
use redquorum::inspect::TimeLeft;
use redquorum::{LockError, Retry};
use serde_json::json;

use crate::cli::{Global, LeaderArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

/// Connecting and reading, per node, unless `--node-timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

pub async fn leader(global: &Global, nodes: &[String], args: &LeaderArgs, ui: &Ui) -> Code {
    let timeout = global.node_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let redlock = match crate::connect_with(global, nodes, Retry::none(), Some(timeout)).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let election = match Election::new(&redlock, &args.name) {
        Ok(election) => election,
        Err(e) => {
            ui.usage(&e.to_string());
            return exit::USAGE;
        }
    };
    let code = if args.watch {
        watch(&election, args.json).await
    } else {
        match election.leader().await {
            Ok(state) => {
                println!("{}", show(&args.name, &state, args.json));
                match state {
                    LeaderState::Unknown => exit::UNAVAILABLE,
                    _ => 0,
                }
            }
            Err(LockError::Input(e)) => {
                ui.usage(&e.to_string());
                exit::USAGE
            }
            Err(e) => {
                ui.error(format_args!("cannot read {}: {e}", args.name));
                exit::SOFTWARE
            }
        }
    };
    redlock.shutdown().await;
    code
}

/// Prints every change until interrupted (the default SIGINT action ends
/// the process: nothing here needs cleaning up).
async fn watch(election: &Election, json: bool) -> Code {
    let mut changes = Box::pin(election.observe());
    while let Some(state) = changes.next().await {
        println!("{}", show(election.name(), &state, json));
    }
    0
}

/// One line: text or a JSON object.
fn show(name: &str, state: &LeaderState, json: bool) -> String {
    let millis = |t: &Option<TimeLeft>| match t {
        Some(TimeLeft::For(d)) => Some(d.as_millis() as u64),
        _ => None,
    };
    if json {
        let value = match state {
            LeaderState::Leading(leader) => json!({
                "election": name,
                "state": "leading",
                "term": leader.term,
                "label": leader.label,
                "token_prefix": leader.token_prefix,
                "time_left_ms": millis(&leader.time_left),
            }),
            LeaderState::Vacant => json!({"election": name, "state": "vacant"}),
            _ => json!({"election": name, "state": "unknown"}),
        };
        return value.to_string();
    }
    match state {
        LeaderState::Leading(leader) => {
            let label = leader
                .label
                .as_deref()
                .map_or("(no label)".into(), crate::ui::printable);
            let left = match millis(&leader.time_left) {
                Some(ms) => format!(
                    ", {} left",
                    humantime::format_duration(Duration::from_millis(ms))
                ),
                None => String::new(),
            };
            format!(
                "{name}: term {} led by {label} (token {}…){left}",
                leader.term, leader.token_prefix
            )
        }
        LeaderState::Vacant => format!("{name}: no leader"),
        _ => format!("{name}: unknown (too few nodes answered)"),
    }
}
