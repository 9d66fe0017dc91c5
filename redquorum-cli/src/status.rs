//! `redquorum status`: what every node holds for a resource, read directly
//! (the library has no read-only API), and the quorum verdict.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Client, Value};
use serde_json::json;

use crate::cli::{Global, StatusArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

/// Connecting and reading, per node, unless `--node-timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of a token `status` shows without `--show-token`.
const PREFIX: usize = 8;

/// What one node holds.
#[derive(Debug)]
struct NodeState {
    name: String,
    /// `Err` when the node could not be read.
    read: Result<Held, String>,
}

#[derive(Debug, Default)]
struct Held {
    /// The holder: a token, or for a reentrant lock its owners. `None` when
    /// the lock key is absent.
    holder: Option<Holder>,
    /// The lock key's remaining TTL in ms (`None`: no key; -1: no expiry).
    pttl_ms: Option<i64>,
    /// The fencing counter, when the resource has one.
    fence: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Holder {
    Token(String),
    /// Owner → hold count.
    Reentrant(BTreeMap<String, String>),
    /// A key of another type (not written by redquorum).
    Other(String),
}

impl Holder {
    fn kind(&self) -> &'static str {
        match self {
            Holder::Token(_) => "token",
            Holder::Reentrant(_) => "reentrant",
            Holder::Other(_) => "other",
        }
    }

    /// What identifies the holder, in full.
    fn full(&self) -> String {
        match self {
            Holder::Token(t) => t.clone(),
            Holder::Reentrant(owners) => owners.keys().cloned().collect::<Vec<_>>().join(","),
            Holder::Other(kind) => format!("<{kind}>"),
        }
    }

    fn shown(&self, whole: bool) -> String {
        match self {
            Holder::Token(t) => prefix(t, whole),
            Holder::Reentrant(owners) => {
                let owners: Vec<String> = owners
                    .iter()
                    .map(|(o, n)| format!("{}×{n}", prefix(o, whole)))
                    .collect();
                format!("owners {}", owners.join(","))
            }
            Holder::Other(kind) => format!("<{kind} key>"),
        }
    }
}

fn prefix(s: &str, whole: bool) -> String {
    if whole || s.chars().count() <= PREFIX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(PREFIX).collect::<String>())
    }
}

/// The quorum verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Held,
    Free,
    NotHeld,
    Unknown,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Held => "HELD",
            Verdict::Free => "FREE",
            Verdict::NotHeld => "NOT_HELD",
            Verdict::Unknown => "UNKNOWN",
        }
    }
}

struct Summary {
    verdict: Verdict,
    quorum: usize,
    reachable: usize,
    free: usize,
    /// The holder on the most nodes, and on how many.
    top: Option<(Holder, usize)>,
}

fn summarize(states: &[NodeState]) -> Summary {
    let n = states.len();
    let quorum = redquorum::quorum::quorum(n);
    let reachable = states.iter().filter(|s| s.read.is_ok()).count();
    let unreachable = n - reachable;
    let mut counts: BTreeMap<&Holder, usize> = BTreeMap::new();
    let mut free = 0;
    for state in states {
        match &state.read {
            Ok(Held {
                holder: Some(h), ..
            }) => *counts.entry(h).or_default() += 1,
            Ok(_) => free += 1,
            Err(_) => {}
        }
    }
    let top = counts
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(h, c)| (h.clone(), c));
    let most = top.as_ref().map_or(0, |(_, c)| *c);
    let verdict = if most >= quorum {
        Verdict::Held
    } else if free >= quorum {
        Verdict::Free
    } else if most + unreachable >= quorum || free + unreachable >= quorum {
        // The nodes we cannot see could make it either.
        Verdict::Unknown
    } else {
        Verdict::NotHeld
    };
    Summary {
        verdict,
        quorum,
        reachable,
        free,
        top,
    }
}

pub async fn status(global: &Global, nodes: &[String], args: &StatusArgs, ui: &Ui) -> Code {
    if args.resource.is_empty() {
        ui.usage("resource name is empty");
        return exit::USAGE;
    }
    let tls = match crate::tls_files(global) {
        Ok(tls) => tls,
        Err(e) => {
            ui.usage(&e.to_string());
            return exit::USAGE;
        }
    };
    let mut clients = Vec::with_capacity(nodes.len());
    for url in nodes {
        match redquorum::node::node_name(url).and_then(|name| {
            // node_name has parsed the URL already: opening cannot fail but
            // for the TLS material.
            let client =
                if url.starts_with("rediss://") && (tls.ca.is_some() || tls.client.is_some()) {
                    Client::build_with_tls(
                        url.as_str(),
                        redis::TlsCertificates {
                            client_tls: tls.client.clone().map(|(client_cert, client_key)| {
                                redis::ClientTlsConfig {
                                    client_cert,
                                    client_key,
                                }
                            }),
                            root_cert: tls.ca.clone(),
                        },
                    )
                } else {
                    Client::open(url.as_str())
                };
            client
                .map(|client| (name, client))
                .map_err(|e| redquorum::ConfigError::InvalidUrl {
                    url: String::new(),
                    reason: e.to_string(),
                })
        }) {
            Ok((name, client)) => {
                if clients.iter().any(|(n, _)| *n == name) {
                    ui.usage(&format!("node {name} is listed more than once"));
                    return exit::USAGE;
                }
                clients.push((name, client));
            }
            Err(e) => {
                ui.usage(&e.to_string()); // the URL in it has its password masked
                return exit::USAGE;
            }
        }
    }
    let timeout = global.node_timeout.unwrap_or(DEFAULT_TIMEOUT);
    // The keys as `exec` (without --fence) names them.
    let layout = match redquorum::KeyLayout::new(&global.key_prefix, global.interop_keys) {
        Ok(layout) => layout,
        Err(e) => {
            ui.usage(&e.to_string());
            return exit::USAGE;
        }
    };
    // With --permits: one table (or JSON object) per slot of the
    // semaphore, then how many permits are held.
    let resources: Vec<String> = match args.permits {
        None => vec![args.resource.clone()],
        Some(n) if n == 0 || n > redquorum::semaphore::MAX_PERMITS => {
            ui.usage(&redquorum::ConfigError::InvalidPermits(n).to_string());
            return exit::USAGE;
        }
        Some(n) => (0..n)
            .map(|i| format!("{}:permit:{i}", args.resource))
            .collect(),
    };
    // One connection per node, for every resource read.
    let timeout_text = || format!("no answer within {}", humantime::format_duration(timeout));
    let conns: Vec<(String, Result<MultiplexedConnection, String>)> =
        futures::future::join_all(clients.into_iter().map(|(name, client)| async move {
            let conn = match tokio::time::timeout(
                timeout,
                client.get_multiplexed_async_connection(),
            )
            .await
            {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(timeout_text()),
            };
            (name, conn)
        }))
        .await;
    let (mut held, mut unknown, mut objects) = (0, false, Vec::new());
    for resource in &resources {
        let lock_key = layout.plain_key(resource);
        let fence_key = layout.fence_key(resource);
        let states = futures::future::join_all(conns.iter().map(|(name, conn)| {
            let (lock_key, fence_key) = (&lock_key, &fence_key);
            async move {
                let read = match conn {
                    Err(e) => Err(e.clone()),
                    Ok(conn) => {
                        match tokio::time::timeout(timeout, read(conn.clone(), lock_key, fence_key))
                            .await
                        {
                            Ok(Ok(held)) => Ok(held),
                            Ok(Err(e)) => Err(e.to_string()),
                            Err(_) => Err(timeout_text()),
                        }
                    }
                };
                NodeState {
                    name: name.clone(),
                    read,
                }
            }
        }))
        .await;
        let summary = summarize(&states);
        held += usize::from(summary.verdict == Verdict::Held);
        unknown |= summary.verdict == Verdict::Unknown;
        if args.json {
            objects.push(to_json(resource, &states, &summary, args.show_token));
        } else {
            print_table(resource, &states, &summary, args.show_token);
        }
    }
    match (args.permits, args.json) {
        (None, true) => println!("{}", objects.concat()),
        (Some(n), true) => println!(
            "{{\"resource\":{},\"permits\":{n},\"held\":{held},\"slots\":[{}]}}",
            json!(args.resource),
            objects.join(",")
        ),
        (Some(n), false) => println!("{}: {held} of {n} permits held", args.resource),
        (None, false) => {}
    }
    if unknown { exit::UNAVAILABLE } else { 0 }
}

/// Reads the lock and fence keys of one node.
async fn read(
    mut conn: MultiplexedConnection,
    lock_key: &str,
    fence_key: &str,
) -> redis::RedisResult<Held> {
    let (kind, pttl, fence): (String, i64, Option<String>) = redis::pipe()
        .atomic()
        .cmd("TYPE")
        .arg(lock_key)
        .cmd("PTTL")
        .arg(lock_key)
        .cmd("GET")
        .arg(fence_key)
        .query_async(&mut conn)
        .await?;
    // The key may change between the two reads; what it holds now wins.
    let holder = match kind.as_str() {
        "none" => None,
        "string" => {
            let value: Option<Value> = redis::cmd("GET")
                .arg(lock_key)
                .query_async(&mut conn)
                .await?;
            match value {
                Some(Value::BulkString(bytes)) => {
                    Some(Holder::Token(String::from_utf8_lossy(&bytes).into_owned()))
                }
                Some(Value::Nil) | None => None,
                Some(other) => Some(Holder::Other(format!("{other:?}"))),
            }
        }
        "hash" => {
            let owners: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(lock_key)
                .query_async(&mut conn)
                .await?;
            (!owners.is_empty()).then_some(Holder::Reentrant(owners))
        }
        other => Some(Holder::Other(other.to_owned())),
    };
    Ok(Held {
        pttl_ms: holder.as_ref().map(|_| pttl),
        holder,
        fence,
    })
}

fn pttl_text(pttl_ms: Option<i64>) -> String {
    match pttl_ms {
        None => "-".to_owned(),
        Some(ms) if ms < 0 => "no expiry".to_owned(),
        Some(ms) => {
            let ms = u64::try_from(ms).unwrap_or_default();
            humantime::format_duration(Duration::from_millis(ms)).to_string()
        }
    }
}

fn verdict_line(resource: &str, summary: &Summary, n: usize, whole: bool) -> String {
    let q = summary.quorum;
    match (summary.verdict, &summary.top) {
        (Verdict::Held, Some((holder, count))) => format!(
            "{resource}: held by {} on {count}/{n} nodes, quorum {q}: HELD",
            holder.shown(whole)
        ),
        (Verdict::Free, _) => format!(
            "{resource}: free on {}/{n} nodes, quorum {q}: FREE",
            summary.free
        ),
        (Verdict::Unknown, _) => format!(
            "{resource}: {} of {n} nodes reachable, not enough to decide (quorum {q}): UNKNOWN",
            summary.reachable
        ),
        _ => format!(
            "{resource}: no holder on a quorum and only {}/{n} nodes free (quorum {q}); \
             the keys left expire at their PTTL: NOT_HELD",
            summary.free
        ),
    }
}

fn print_table(resource: &str, states: &[NodeState], summary: &Summary, whole: bool) {
    let any_error = states.iter().any(|s| s.read.is_err());
    let mut rows = vec![vec![
        "NODE".to_owned(),
        "REACHABLE".to_owned(),
        "HELD".to_owned(),
        "HOLDER".to_owned(),
        "PTTL".to_owned(),
        "FENCE".to_owned(),
    ]];
    if any_error {
        rows[0].push("ERROR".to_owned());
    }
    for state in states {
        let mut row = match &state.read {
            Ok(held) => vec![
                state.name.clone(),
                "yes".to_owned(),
                if held.holder.is_some() { "yes" } else { "no" }.to_owned(),
                held.holder
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |h| h.shown(whole)),
                pttl_text(held.pttl_ms),
                held.fence.clone().unwrap_or_else(|| "-".to_owned()),
            ],
            Err(_) => vec![
                state.name.clone(),
                "no".to_owned(),
                "?".to_owned(),
                "?".to_owned(),
                "?".to_owned(),
                "?".to_owned(),
            ],
        };
        if any_error {
            row.push(state.read.as_ref().err().cloned().unwrap_or_default());
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < columns {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        println!("{}", line.trim_end());
    }
    println!("{}", verdict_line(resource, summary, states.len(), whole));
}

fn to_json(resource: &str, states: &[NodeState], summary: &Summary, whole: bool) -> String {
    let nodes: Vec<serde_json::Value> = states
        .iter()
        .map(|state| match &state.read {
            Ok(held) => {
                let holder = held.holder.as_ref();
                let mut node = json!({
                    "node": state.name,
                    "reachable": true,
                    "error": null,
                    "held": holder.is_some(),
                    "kind": holder.map(Holder::kind),
                    "token_prefix": holder.map(|h| prefix(&h.full(), false)),
                    "pttl_ms": held.pttl_ms,
                    "fence": held.fence.as_deref().and_then(|f| f.parse::<u64>().ok()),
                });
                if let Some(Holder::Reentrant(owners)) = holder {
                    let owners: BTreeMap<String, u64> = owners
                        .iter()
                        .map(|(o, n)| (prefix(o, whole), n.parse().unwrap_or(0)))
                        .collect();
                    node["owners"] = json!(owners);
                }
                if whole {
                    node["token"] = json!(holder.map(Holder::full));
                }
                node
            }
            Err(e) => json!({
                "node": state.name,
                "reachable": false,
                "error": e,
                "held": null,
                "kind": null,
                "token_prefix": null,
                "pttl_ms": null,
                "fence": null,
            }),
        })
        .collect();
    let holder = match (&summary.verdict, &summary.top) {
        (Verdict::Held, Some((holder, count))) => {
            let mut h = json!({
                "kind": holder.kind(),
                "token_prefix": prefix(&holder.full(), false),
                "nodes": count,
            });
            if whole {
                h["token"] = json!(holder.full());
            }
            h
        }
        _ => serde_json::Value::Null,
    };
    json!({
        "resource": resource,
        "nodes": nodes,
        "quorum": summary.quorum,
        "reachable": summary.reachable,
        "free": summary.free,
        "verdict": summary.verdict.as_str(),
        "holder": holder,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(holder: Option<&str>) -> NodeState {
        NodeState {
            name: "n".into(),
            read: Ok(Held {
                holder: holder.map(|t| Holder::Token(t.into())),
                pttl_ms: holder.map(|_| 1000),
                fence: None,
            }),
        }
    }

    fn down() -> NodeState {
        NodeState {
            name: "n".into(),
            read: Err("down".into()),
        }
    }

    #[test]
    fn verdicts() {
        let v = |s: Vec<NodeState>| summarize(&s).verdict;
        let a = || node(Some("a"));
        let b = || node(Some("b"));
        let f = || node(None);
        assert_eq!(v(vec![a(), a(), a(), f(), f()]), Verdict::Held);
        assert_eq!(v(vec![a(), a(), a(), down(), down()]), Verdict::Held);
        assert_eq!(v(vec![f(), f(), f(), a(), a()]), Verdict::Free);
        assert_eq!(v(vec![a(), a(), b(), b(), f()]), Verdict::NotHeld);
        assert_eq!(v(vec![a(), a(), f(), f(), down()]), Verdict::Unknown);
        assert_eq!(v(vec![a(), b(), f(), down(), down()]), Verdict::Unknown);
        assert_eq!(v(vec![a(), b(), down()]), Verdict::Unknown);
        assert_eq!(v(vec![a(), b(), f()]), Verdict::NotHeld);
    }

    #[test]
    fn prefixes() {
        assert_eq!(prefix("0123456789abcdef", false), "01234567…");
        assert_eq!(prefix("0123456789abcdef", true), "0123456789abcdef");
        assert_eq!(prefix("short", false), "short");
    }
}
