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

#[derive(Debug, Default, Clone)]
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
    if args.rw {
        let conns = connect(clients, timeout).await;
        return rw_status(&conns, &layout, args, timeout).await;
    }
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
    let conns = connect(clients, timeout).await;
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
                        within(timeout, read(conn.clone(), lock_key, Some(fence_key))).await
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
            objects.push(to_json(resource, &states, &summary, args.show_token).to_string());
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

/// Connected clients, one connection per node, each opened within `timeout`.
type Conns = Vec<(String, Result<MultiplexedConnection, String>)>;

async fn connect(clients: Vec<(String, Client)>, timeout: Duration) -> Conns {
    futures::future::join_all(clients.into_iter().map(|(name, client)| async move {
        let conn = within(timeout, client.get_multiplexed_async_connection()).await;
        (name, conn)
    }))
    .await
}

/// `read` within `timeout`, its error as text.
async fn within<T>(
    timeout: Duration,
    read: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// Reads the lock key (and the fence key, if any) of one node.
async fn read(
    mut conn: MultiplexedConnection,
    lock_key: &str,
    fence_key: Option<&str>,
) -> redis::RedisResult<Held> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("TYPE")
        .arg(lock_key)
        .cmd("PTTL")
        .arg(lock_key);
    let (kind, pttl, fence): (String, i64, Option<String>) = match fence_key {
        Some(fence_key) => {
            pipe.cmd("GET")
                .arg(fence_key)
                .query_async(&mut conn)
                .await?
        }
        None => {
            let (kind, pttl): (String, i64) = pipe.query_async(&mut conn).await?;
            (kind, pttl, None)
        }
    };
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
    print_rows(&rows);
    println!("{}", verdict_line(resource, summary, states.len(), whole));
}

fn to_json(
    resource: &str,
    states: &[NodeState],
    summary: &Summary,
    whole: bool,
) -> serde_json::Value {
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
}

/// One node's readers of a read/write lock.
#[derive(Debug, Default)]
struct Readers {
    /// The live readers: token → what is left of it by the node's clock, ms.
    live: BTreeMap<String, u64>,
    /// A waiting writer's intent: its PTTL in ms (-1: no expiry).
    intent_ms: Option<i64>,
}

/// Reads the readers and intent keys of one node, with its time.
async fn read_readers(
    mut conn: MultiplexedConnection,
    readers_key: &str,
    intent_key: &str,
) -> redis::RedisResult<Readers> {
    let ((secs, micros), entries, intent): ((u64, u64), Vec<(String, f64)>, i64) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("ZRANGE")
        .arg(readers_key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("PTTL")
        .arg(intent_key)
        .query_async(&mut conn)
        .await?;
    // As acquire_read.lua: a reader lives while its expiry >= the node's time.
    let now = secs * 1000 + micros / 1000;
    let live = entries
        .into_iter()
        .filter(|(_, expiry)| *expiry >= now as f64)
        .map(|(token, expiry)| (token, expiry as u64 - now))
        .collect();
    Ok(Readers {
        live,
        intent_ms: (intent != -2).then_some(intent),
    })
}

/// `status --rw`: the writer key as a plain lock's, then each node's live
/// readers and intent. Exit 69 when the unreachable nodes could change the
/// writer's verdict or the readers' count.
async fn rw_status(
    conns: &Conns,
    layout: &redquorum::KeyLayout,
    args: &StatusArgs,
    timeout: Duration,
) -> Code {
    let [writer_key, readers_key, intent_key] = layout.rw_keys(&args.resource);
    let (writer_key, readers_key, intent_key) = (&writer_key, &readers_key, &intent_key);
    let reads = futures::future::join_all(conns.iter().map(|(name, conn)| async move {
        let read = match conn {
            Err(e) => Err(e.clone()),
            Ok(conn) => {
                let writer = within(timeout, read(conn.clone(), writer_key, None));
                let readers = within(timeout, read_readers(conn.clone(), readers_key, intent_key));
                match tokio::join!(writer, readers) {
                    (Ok(writer), Ok(readers)) => Ok((writer, readers)),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
        };
        (name.clone(), read)
    }))
    .await;
    let writer: Vec<NodeState> = reads
        .iter()
        .map(|(name, read)| NodeState {
            name: name.clone(),
            read: read
                .as_ref()
                .map(|(held, _)| held.clone())
                .map_err(Clone::clone),
        })
        .collect();
    let summary = summarize(&writer);
    let (n, quorum) = (reads.len(), summary.quorum);
    let unreachable = n - summary.reachable;
    // A reader holds the lock where its token lives on a quorum of nodes.
    let mut on: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, read) in &reads {
        for token in read.iter().flat_map(|(_, r)| r.live.keys()) {
            *on.entry(token).or_default() += 1;
        }
    }
    let readers = on.values().filter(|&&count| count >= quorum).count();
    let uncertain = on
        .values()
        .any(|&count| count < quorum && count + unreachable >= quorum);
    let intent = reads
        .iter()
        .filter(|(_, r)| matches!(r, Ok((_, r)) if r.intent_ms.is_some()))
        .count();
    let whole = args.show_token;
    if args.json {
        let nodes: Vec<serde_json::Value> = reads
            .iter()
            .map(|(name, read)| match read {
                Ok((_, r)) => {
                    let live: Vec<serde_json::Value> = r
                        .live
                        .iter()
                        .map(|(token, left)| {
                            let mut reader = json!({
                                "token_prefix": prefix(token, false),
                                "pttl_ms": left,
                            });
                            if whole {
                                reader["token"] = json!(token);
                            }
                            reader
                        })
                        .collect();
                    json!({
                        "node": name,
                        "reachable": true,
                        "error": null,
                        "readers": live,
                        "intent_pttl_ms": r.intent_ms,
                    })
                }
                Err(e) => json!({
                    "node": name,
                    "reachable": false,
                    "error": e,
                    "readers": null,
                    "intent_pttl_ms": null,
                }),
            })
            .collect();
        let object = json!({
            "resource": args.resource,
            "quorum": quorum,
            "reachable": summary.reachable,
            "writer": to_json(&args.resource, &writer, &summary, whole),
            "readers": readers,
            "intent_nodes": intent,
            "nodes": nodes,
        });
        println!("{object}");
    } else {
        print_rw_table(&reads, whole);
        let resource = &args.resource;
        let line = verdict_line(resource, &summary, n, whole);
        println!("{}", line.replacen(": ", ": writer ", 1));
        println!("{resource}: {readers} readers hold it on a quorum of nodes (quorum {quorum})");
        if intent > 0 {
            println!("{resource}: a writer is waiting (intent on {intent}/{n} nodes)");
        }
    }
    if summary.verdict == Verdict::Unknown || uncertain {
        exit::UNAVAILABLE
    } else {
        0
    }
}

type RwRead = (String, Result<(Held, Readers), String>);

fn print_rw_table(reads: &[RwRead], whole: bool) {
    let any_error = reads.iter().any(|(_, r)| r.is_err());
    let mut header = ["NODE", "REACHABLE", "WRITER", "PTTL", "READERS", "INTENT"]
        .map(str::to_owned)
        .to_vec();
    if any_error {
        header.push("ERROR".to_owned());
    }
    let mut rows = vec![header];
    for (name, read) in reads {
        let mut row = match read {
            Ok((held, readers)) => {
                let tokens: Vec<String> = readers.live.keys().map(|t| prefix(t, whole)).collect();
                vec![
                    name.clone(),
                    "yes".to_owned(),
                    held.holder
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |h| h.shown(whole)),
                    pttl_text(held.pttl_ms),
                    match tokens.len() {
                        0 => "-".to_owned(),
                        count => format!("{count} ({})", tokens.join(",")),
                    },
                    pttl_text(readers.intent_ms),
                ]
            }
            Err(_) => {
                let mut row = vec![name.clone(), "no".to_owned()];
                row.extend(["?"; 4].map(str::to_owned));
                row
            }
        };
        if any_error {
            row.push(read.as_ref().err().cloned().unwrap_or_default());
        }
        rows.push(row);
    }
    print_rows(&rows);
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
