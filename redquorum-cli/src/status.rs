//! `redquorum status`: what every node holds for a resource, and the quorum
//! verdict — a printer of the library's inspection (`Redlock::inspect`),
//! which reads through the client's own connections (TLS, cluster members,
//! key prefix and interop keys included).

use std::time::Duration;

use redquorum::RwLock;
use redquorum::inspect::{Holder, Holding, Inspection, NodeView, RwInspection, TimeLeft, Verdict};
use redquorum::{LockError, Redlock, Retry, Semaphore};
use serde_json::json;

use crate::cli::{Global, StatusArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

/// Connecting and reading, per node, unless `--node-timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of a token `status` shows without `--show-token`.
const PREFIX: usize = 8;

pub async fn status(global: &Global, nodes: &[String], args: &StatusArgs, ui: &Ui) -> Code {
    let timeout = global.node_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let max_ttl = global.max_ttl.unwrap_or(redquorum::DEFAULT_MAX_TTL);
    let redlock = match crate::connect_with(global, nodes, Retry::none(), Some(timeout)).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    // What would make the answer below wrong soon: on stderr, before it.
    for h in redlock.nodes().probe(timeout).await {
        for line in crate::nodes::warnings(&h, crate::nodes::rounds_timeout(global)) {
            ui.note(format_args!("{line}"));
        }
    }
    let code = match show(&redlock, args, ui, max_ttl).await {
        Ok(code) => code,
        Err(LockError::Input(e)) => {
            ui.usage(&e.to_string());
            exit::USAGE
        }
        Err(e) => {
            ui.error(format_args!("cannot read {}: {e}", args.resource));
            exit::SOFTWARE
        }
    };
    redlock.shutdown().await;
    code
}

/// `max_ttl`: the client's longest TTL, against which holders' keys are
/// read.
async fn show(
    redlock: &Redlock,
    args: &StatusArgs,
    ui: &Ui,
    max_ttl: Duration,
) -> Result<Code, LockError> {
    let whole = args.show_token;
    // A semaphore's permit count lives on its nodes while a permit is held:
    // `status NAME` of a held semaphore is never "FREE", and `-n` is checked.
    let stored = if args.rw {
        None
    } else {
        Semaphore::stored_permits(redlock, &args.resource).await?
    };
    let permits = match (args.permits, stored) {
        (Some(asked), Some(count)) if asked != count => {
            ui.note(format_args!(
                "{}: its holders were granted {count} permits, not {asked}: showing {count}",
                args.resource
            ));
            Some(count)
        }
        (None, Some(count)) => {
            ui.note(format_args!(
                "{} is a semaphore of {count} permits (the count its nodes keep)",
                args.resource
            ));
            Some(count)
        }
        (asked, _) => asked,
    };
    if args.rw {
        let seen = RwLock::new(redlock, &args.resource)?.inspect().await?;
        print_rw(&args.resource, &seen, args.json, whole);
        let unknown = matches!(seen.writer().verdict(), Verdict::Unknown { .. });
        return Ok(if unknown || seen.readers_uncertain() {
            exit::UNAVAILABLE
        } else {
            0
        });
    }
    let Some(permits) = permits else {
        let seen = redlock.inspect(&args.resource).await?;
        if args.json {
            println!("{}", to_json(&seen, whole));
        } else {
            print_table(&seen, whole, max_ttl);
        }
        return Ok(exit_for(std::slice::from_ref(&seen)));
    };
    // One table (or JSON object) per slot of the semaphore, then how many
    // permits are held.
    let seen = Semaphore::new(redlock, &args.resource, permits)?
        .inspect()
        .await?;
    let held = seen.held();
    if args.json {
        let slots: Vec<serde_json::Value> =
            seen.slots().iter().map(|s| to_json(s, whole)).collect();
        let object = json!({
            "resource": args.resource,
            "permits": permits,
            "held": held,
            "available": seen.available(),
            "slots": slots,
        });
        println!("{object}");
    } else {
        for slot in seen.slots() {
            print_table(slot, whole, max_ttl);
        }
        println!("{}: {held} of {permits} permits held", args.resource);
    }
    Ok(exit_for(seen.slots()))
}

/// 69 when the unreachable nodes could decide some verdict, else 0.
fn exit_for(seen: &[Inspection]) -> Code {
    if seen
        .iter()
        .any(|s| matches!(s.verdict(), Verdict::Unknown { .. }))
    {
        exit::UNAVAILABLE
    } else {
        0
    }
}

fn prefix(s: &str, whole: bool) -> String {
    if whole || s.chars().count() <= PREFIX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(PREFIX).collect::<String>())
    }
}

/// The holder's kind, as `--json` names it.
fn kind(holder: &Holder) -> &'static str {
    match holder {
        Holder::Token(_) => "token",
        Holder::Owner(_) => "reentrant",
        _ => "other",
    }
}

/// What identifies the holder, in full.
fn full(holder: &Holder) -> String {
    match holder {
        Holder::Token(token) | Holder::Owner(token) => token.clone(),
        Holder::Foreign(kind) => format!("<{kind}>"),
        other => other.to_string(),
    }
}

/// The holder as a table shows it (a reentrant owner with its hold count).
fn shown(holder: &Holder, holds: Option<u64>, whole: bool) -> String {
    match holder {
        Holder::Token(token) => prefix(token, whole),
        Holder::Owner(owner) => format!("owners {}×{}", prefix(owner, whole), holds.unwrap_or(0)),
        Holder::Foreign(kind) => format!("<{kind} key>"),
        other => other.to_string(),
    }
}

/// A PTTL as `--json` gives it: -1 for a key without expiry.
fn pttl_ms(left: Option<TimeLeft>) -> Option<i64> {
    left.map(|left| match left {
        TimeLeft::For(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        TimeLeft::Forever => -1,
    })
}

fn pttl_text(left: Option<TimeLeft>) -> String {
    match left {
        None => "-".to_owned(),
        Some(TimeLeft::Forever) => "no expiry".to_owned(),
        Some(TimeLeft::For(d)) => {
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
        }
    }
}

/// The hold count of the first node where `holder` holds it.
fn holds_of(seen: &Inspection, holder: &Holder) -> Option<u64> {
    seen.nodes()
        .iter()
        .filter_map(|n| n.read.as_ref().ok())
        .find(|h| h.holder.as_ref() == Some(holder))
        .and_then(|h| h.holds)
}

fn verdict_line(seen: &Inspection, whole: bool) -> String {
    let (resource, q, n) = (seen.resource(), seen.quorum(), seen.nodes().len());
    match seen.verdict() {
        Verdict::Held { holder, nodes } => format!(
            "{resource}: held by {}{} on {nodes}/{n} nodes, quorum {q}: HELD",
            shown(holder, holds_of(seen, holder), whole),
            seen.label().map_or_else(String::new, |label| format!(
                " ({})",
                crate::ui::printable(label)
            ))
        ),
        Verdict::Free { nodes } => {
            format!("{resource}: free on {nodes}/{n} nodes, quorum {q}: FREE")
        }
        Verdict::Unknown { reachable } => format!(
            "{resource}: {reachable} of {n} nodes reachable, not enough to decide (quorum {q}): UNKNOWN"
        ),
        Verdict::NotHeld { free } => format!(
            "{resource}: no holder on a quorum and only {free}/{n} nodes free (quorum {q}); \
             the keys left expire at their PTTL: NOT_HELD"
        ),
    }
}

fn verdict_name(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Held { .. } => "HELD",
        Verdict::Free { .. } => "FREE",
        Verdict::NotHeld { .. } => "NOT_HELD",
        Verdict::Unknown { .. } => "UNKNOWN",
    }
}

fn print_table(seen: &Inspection, whole: bool, max_ttl: Duration) {
    let any_error = seen.nodes().iter().any(|n| n.read.is_err());
    let mut rows = vec![
        ["NODE", "REACHABLE", "HELD", "HOLDER", "PTTL", "FENCE"]
            .map(str::to_owned)
            .to_vec(),
    ];
    if any_error {
        rows[0].push("ERROR".to_owned());
    }
    for node in seen.nodes() {
        let mut row = match &node.read {
            Ok(held) => vec![
                node.node.clone(),
                "yes".to_owned(),
                if held.holder.is_some() { "yes" } else { "no" }.to_owned(),
                held.holder
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |h| shown(h, held.holds, whole)),
                pttl_text(held.time_left),
                held.fence
                    .map_or_else(|| "-".to_owned(), |fence| fence.to_string()),
            ],
            Err(_) => {
                let mut row = vec![node.node.clone(), "no".to_owned()];
                row.extend(["?"; 4].map(str::to_owned));
                row
            }
        };
        if any_error {
            row.push(error_text(node));
        }
        rows.push(row);
    }
    print_rows(&rows);
    println!("{}", verdict_line(seen, whole));
    for line in longer_than(seen, max_ttl) {
        println!("{line}");
    }
}

/// A line per node whose holder's key lives longer than `max_ttl`: a peer
/// (interop keys) or a client with a longer `max_ttl`, whose lock can
/// outlive a restarted node's quarantine (docs/migrating.md).
fn longer_than(seen: &Inspection, max_ttl: Duration) -> Vec<String> {
    seen.nodes()
        .iter()
        .filter_map(|node| {
            let held = node.read.as_ref().ok()?;
            held.holder.as_ref()?;
            let left = match held.time_left? {
                TimeLeft::For(left) if left > max_ttl => {
                    humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
                        .to_string()
                }
                TimeLeft::For(_) => return None,
                _ => "no expiry".to_owned(),
            };
            Some(format!(
                "{}: the holder's key has {left} left, above --max-ttl {}: a peer or a client \
                 with a longer max_ttl, whose lock can outlive a restarted node's quarantine \
                 (docs/migrating.md)",
                node.node,
                humantime::format_duration(max_ttl)
            ))
        })
        .collect()
}

fn error_text<T>(node: &NodeView<T>) -> String {
    node.read
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default()
}

fn node_json(node: &NodeView<Holding>, whole: bool) -> serde_json::Value {
    match &node.read {
        Ok(held) => {
            let holder = held.holder.as_ref();
            let mut object = json!({
                "node": node.node,
                "reachable": true,
                "error": null,
                "held": holder.is_some(),
                "kind": holder.map(kind),
                "token_prefix": holder.map(|h| prefix(&full(h), false)),
                "pttl_ms": pttl_ms(held.time_left),
                "fence": held.fence,
            });
            if let Some(Holder::Owner(owner)) = holder {
                object["owners"] = json!({ prefix(owner, whole): held.holds.unwrap_or(0) });
            }
            if whole {
                object["token"] = json!(holder.map(full));
            }
            object
        }
        Err(e) => json!({
            "node": node.node,
            "reachable": false,
            "error": e.to_string(),
            "held": null,
            "kind": null,
            "token_prefix": null,
            "pttl_ms": null,
            "fence": null,
        }),
    }
}

fn to_json(seen: &Inspection, whole: bool) -> serde_json::Value {
    let nodes: Vec<serde_json::Value> = seen.nodes().iter().map(|n| node_json(n, whole)).collect();
    let holder = match seen.verdict() {
        Verdict::Held { holder, nodes } => {
            let mut h = json!({
                "kind": kind(holder),
                "token_prefix": prefix(&full(holder), false),
                "label": seen.label(),
                "nodes": nodes,
            });
            if whole {
                h["token"] = json!(full(holder));
            }
            h
        }
        _ => serde_json::Value::Null,
    };
    json!({
        "resource": seen.resource(),
        "nodes": nodes,
        "quorum": seen.quorum(),
        "reachable": seen.reachable(),
        "free": seen.free(),
        "verdict": verdict_name(seen.verdict()),
        "holder": holder,
    })
}

/// `status --rw`: the writer key as a plain lock's, then each node's live
/// readers and intent.
fn print_rw(resource: &str, seen: &RwInspection, json: bool, whole: bool) {
    let writer = seen.writer();
    let (readers, intent) = (seen.readers_held(), seen.intent_nodes());
    let (n, quorum) = (seen.nodes().len(), writer.quorum());
    if json {
        let nodes: Vec<serde_json::Value> = seen
            .nodes()
            .iter()
            .map(|node| match &node.read {
                Ok(held) => {
                    let live: Vec<serde_json::Value> = held
                        .readers
                        .iter()
                        .map(|(token, left)| {
                            let mut reader = json!({
                                "token_prefix": prefix(token, false),
                                "pttl_ms": left.as_millis() as u64,
                            });
                            if whole {
                                reader["token"] = json!(token);
                            }
                            reader
                        })
                        .collect();
                    json!({
                        "node": node.node,
                        "reachable": true,
                        "error": null,
                        "readers": live,
                        "intent_pttl_ms": pttl_ms(held.intent.as_ref().map(|(_, left)| *left)),
                    })
                }
                Err(e) => json!({
                    "node": node.node,
                    "reachable": false,
                    "error": e.to_string(),
                    "readers": null,
                    "intent_pttl_ms": null,
                }),
            })
            .collect();
        let object = json!({
            "resource": resource,
            "quorum": quorum,
            "reachable": writer.reachable(),
            "writer": to_json(writer, whole),
            "readers": readers,
            "intent_nodes": intent,
            "nodes": nodes,
        });
        println!("{object}");
        return;
    }
    let any_error = seen.nodes().iter().any(|n| n.read.is_err());
    let mut header = ["NODE", "REACHABLE", "WRITER", "PTTL", "READERS", "INTENT"]
        .map(str::to_owned)
        .to_vec();
    if any_error {
        header.push("ERROR".to_owned());
    }
    let mut rows = vec![header];
    for node in seen.nodes() {
        let mut row = match &node.read {
            Ok(held) => {
                // Longest-lived last, as the nodes keep them.
                let tokens: Vec<String> =
                    held.readers.iter().map(|(t, _)| prefix(t, whole)).collect();
                vec![
                    node.node.clone(),
                    "yes".to_owned(),
                    held.writer
                        .holder
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |h| shown(h, held.writer.holds, whole)),
                    pttl_text(held.writer.time_left),
                    match tokens.len() {
                        0 => "-".to_owned(),
                        count => format!("{count} ({})", tokens.join(",")),
                    },
                    pttl_text(held.intent.as_ref().map(|(_, left)| *left)),
                ]
            }
            Err(_) => {
                let mut row = vec![node.node.clone(), "no".to_owned()];
                row.extend(["?"; 4].map(str::to_owned));
                row
            }
        };
        if any_error {
            row.push(error_text(node));
        }
        rows.push(row);
    }
    print_rows(&rows);
    let line = verdict_line(writer, whole);
    println!("{}", line.replacen(": ", ": writer ", 1));
    println!("{resource}: {readers} readers hold it on a quorum of nodes (quorum {quorum})");
    if intent > 0 {
        println!("{resource}: a writer is waiting (intent on {intent}/{n} nodes)");
    }
}

/// Prints rows as columns two spaces apart.
fn print_rows(rows: &[Vec<String>]) {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < columns {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        println!("{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(prefix("0123456789abcdef", false), "01234567…");
        assert_eq!(prefix("0123456789abcdef", true), "0123456789abcdef");
        assert_eq!(prefix("short", false), "short");
    }

    #[test]
    fn pttls() {
        let left = Some(TimeLeft::For(Duration::from_millis(1500)));
        assert_eq!(
            (pttl_ms(left), pttl_text(left).as_str()),
            (Some(1500), "1s 500ms")
        );
        let forever = Some(TimeLeft::Forever);
        assert_eq!(
            (pttl_ms(forever), pttl_text(forever).as_str()),
            (Some(-1), "no expiry")
        );
        assert_eq!((pttl_ms(None), pttl_text(None).as_str()), (None, "-"));
    }
}
