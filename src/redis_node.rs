//! A Redis master as a lock node: one multiplexed connection, kept alive by a
//! background task so that no timed round ever pays for a reconnect.
//!
//! A call asks the node's slot for the current connection. If there is none
//! the node answers [`NodeError::NotConnected`] at once — a down node costs a
//! round nothing — and the background task, woken when a request sees the
//! connection break (or a call outlives its grace: the node is unresponsive),
//! re-establishes it with jittered exponential backoff.
//!
//! Each connection asks the server who it is (`INFO server`'s `run_id`), so
//! that two members that are one server — `localhost:7001` and
//! `127.0.0.1:7001` — never count as two votes ([`Servers`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::RngExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, Value};
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;

use crate::address::Address;
use crate::batch::{self, Batcher, Route};
use crate::error::{ConfigError, NodeError};
use crate::node::{Op, Reply};
use crate::proto::op::{Snapshot, Stored};
use crate::scripts;

/// How long one background connection attempt may take (TCP, TLS, AUTH,
/// PING). A frozen node accepts TCP but never answers, so this bounds it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Backoff between failed connection attempts: from 10 ms, doubling to 1 s.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The current connection, numbered so that a stale failure report cannot
/// discard a newer connection.
#[derive(Debug, Default)]
struct Slot {
    current: Mutex<Current>,
    /// Woken when a request finds the connection broken.
    broken: Notify,
}

#[derive(Debug, Default)]
struct Current {
    generation: u64,
    conn: Option<MultiplexedConnection>,
    /// Why there is no connection, for `NotConnected`.
    last_error: Option<Arc<str>>,
    /// The server and version the last connection reported.
    server: Option<Arc<str>>,
    /// The current connection has the scripts loaded (`EVALSHA`).
    loaded: bool,
}

impl Slot {
    fn get(&self) -> Result<(u64, MultiplexedConnection), NodeError> {
        let cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &cur.conn {
            Some(conn) => Ok((cur.generation, conn.clone())),
            None => Err(NodeError::NotConnected(
                cur.last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".into()),
            )),
        }
    }

    /// [`get`](Self::get), and whether that connection has the library.
    fn get_with_scripts(&self) -> Result<(u64, MultiplexedConnection, bool), NodeError> {
        let cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &cur.conn {
            Some(conn) => Ok((cur.generation, conn.clone(), cur.loaded)),
            None => Err(NodeError::NotConnected(
                cur.last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".into()),
            )),
        }
    }

    /// Connection `generation` (if still current) lost the library.
    fn unload(&self, generation: u64) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if cur.generation == generation {
            cur.loaded = false;
        }
    }

    fn ready(&self) -> Result<(), NodeError> {
        let cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &cur.conn {
            Some(_) => Ok(()),
            None => Err(NodeError::NotConnected(
                cur.last_error
                    .clone()
                    .unwrap_or_else(|| "connecting".into()),
            )),
        }
    }

    fn install(&self, conn: MultiplexedConnection, server: Option<Arc<str>>, loaded: bool) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        cur.generation += 1;
        cur.conn = Some(conn);
        cur.loaded = loaded;
        cur.last_error = None;
        cur.server = server.or(cur.server.take());
    }

    fn server(&self) -> Option<Arc<str>> {
        let cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        cur.server.clone()
    }

    fn failed_to_connect(&self, error: &NodeError) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        cur.last_error = Some(error.to_string().into());
    }

    /// Drops connection `generation` (if still current) and wakes the
    /// reconnector.
    fn mark_broken(&self, generation: u64, error: &NodeError) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if cur.generation == generation && cur.conn.is_some() {
            cur.conn = None;
            cur.last_error = Some(error.to_string().into());
            drop(cur);
            self.broken.notify_one();
        }
    }
}

/// Which server each Redis member is, by the `run_id` it last reported:
/// shared by the members of one client, so that one server never votes
/// twice.
#[derive(Debug)]
pub(crate) struct Servers {
    names: Vec<Arc<str>>,
    run_ids: Mutex<Vec<Option<Box<str>>>>,
}

impl Servers {
    /// For the members named `names`, in order.
    pub(crate) fn new(names: Vec<Arc<str>>) -> Arc<Self> {
        let run_ids = Mutex::new(vec![None; names.len()]);
        Arc::new(Servers { names, run_ids })
    }

    /// Records that member `index` is the server `run_id`, unless another
    /// member already is: then that member's name.
    pub(crate) fn claim(&self, index: usize, run_id: &str) -> Result<(), Arc<str>> {
        let mut ids = self.run_ids.lock().unwrap_or_else(PoisonError::into_inner);
        let other = ids
            .iter()
            .enumerate()
            .find(|(i, id)| *i != index && id.as_deref() == Some(run_id));
        if let Some((other, _)) = other {
            return Err(Arc::clone(&self.names[other]));
        }
        ids[index] = Some(run_id.into());
        Ok(())
    }
}

/// How the first connection attempt went, for [`RedisNode::connect`].
enum First {
    Connected,
    Failed(NodeError),
    /// The server is already a member under this name.
    SameAs(Arc<str>),
}

/// A Redis master, reached through one multiplexed connection.
#[derive(Debug)]
pub(crate) struct RedisNode {
    name: Arc<str>,
    slot: Arc<Slot>,
    /// Calls queued behind the write in flight.
    batch: Arc<Batcher>,
    /// Owns (re)connecting; aborted with the node.
    _reconnector: Background,
    /// Sends what `batch` queues; aborted with the node.
    _sender: Background,
}

/// A background task owned by a node: aborted when the node is dropped.
#[derive(Debug)]
pub(crate) struct Background(AbortHandle);

impl Background {
    /// Spawns `task`, owned by the returned handle.
    pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Background(tokio::spawn(task).abort_handle())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl RedisNode {
    /// Starts connecting to `address` (member `index` of `servers`) in the
    /// background and waits at most `wait` for the first attempt. A node that
    /// is down or frozen is not an error here (it may come back); credentials
    /// it rejects are, and so is a server that is already a member.
    ///
    /// `max_in_flight` sizes the connection's request queue so that a call
    /// never waits for room in it: a call that did could be overtaken by a
    /// later one.
    ///
    /// Returns the node and how its first attempt failed, if it did within
    /// `wait` (a node that fails TLS like every other is a configuration
    /// error; see `Builder::build`).
    pub(crate) async fn connect(
        address: Address,
        index: usize,
        servers: Arc<Servers>,
        wait: Duration,
        max_in_flight: usize,
        batching: bool,
    ) -> Result<(Self, Option<NodeError>), ConfigError> {
        let slot = Arc::new(Slot::default());
        let (first_tx, first_rx) = oneshot::channel();
        let name = Arc::clone(address.name());
        let member = Member {
            index,
            servers,
            name: Arc::clone(&name),
            queue: max_in_flight.saturating_add(1),
            tls: matches!(
                address.client().get_connection_info().addr(),
                redis::ConnectionAddr::TcpTls { .. }
            ),
        };
        let reconnector = Background::spawn(reconnect(
            address.client().clone(),
            member,
            slot.clone(),
            first_tx,
        ));
        let batch = Arc::new(Batcher::new(batching));
        let sender = {
            let (current, broken) = (Arc::clone(&slot), Arc::clone(&slot));
            Background::spawn(batch::send_queued(
                Arc::clone(&name),
                Arc::clone(&batch),
                move || {
                    current.get().map_err(|e| {
                        RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::NotConnected,
                            e.to_string(),
                        ))
                    })
                },
                Arc::new(move |generation| broken.mark_broken(generation, &NodeError::TimedOut)),
            ))
        };
        let node = RedisNode {
            name,
            slot,
            batch,
            _reconnector: reconnector,
            _sender: sender,
        };
        match tokio::time::timeout(wait, first_rx).await {
            Ok(Ok(First::Failed(NodeError::Auth(message)))) => Err(ConfigError::Auth {
                node: node.name.to_string(),
                message: message.to_string(),
            }),
            Ok(Ok(First::SameAs(first))) => Err(ConfigError::SameServer {
                first: first.to_string(),
                second: node.name.to_string(),
            }),
            Ok(Ok(First::Failed(error))) => Ok((node, Some(error))),
            _ => Ok((node, None)),
        }
    }

    /// The node's display name (passwords masked).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// `Ok` while a connection is up; otherwise why not.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        self.slot.ready()
    }

    /// The server and version its last connection reported.
    pub(crate) fn server(&self) -> Option<Arc<str>> {
        self.slot.server()
    }

    /// One `PING` on the current connection (for readiness probes; the
    /// caller bounds it).
    pub(crate) async fn ping(&self) -> Result<(), NodeError> {
        self.query(&redis::cmd("PING")).await.map(drop)
    }

    /// One command on the current connection, outside any lock round (the
    /// caller bounds it).
    pub(crate) async fn query(&self, command: &Cmd) -> Result<Value, NodeError> {
        let (_, mut conn) = self.slot.get()?;
        conn.send_packed_command(command)
            .await
            .and_then(Value::extract_error)
            .map_err(|e| classify(&e))
    }

    /// Performs `op` on the node: its script, or a native command where one
    /// is atomic enough — one message, written in the order calls are made.
    /// Waits at most `grace` for the answer; a node that takes longer is
    /// unresponsive, and its connection is dropped (freeing whatever is
    /// queued on it) and re-established in the background.
    pub(crate) async fn run(&self, op: Op<'_>, grace: Duration) -> Result<Reply, NodeError> {
        let value = self
            .exchange(&op, false, grace)
            .await
            .map_err(|failure| match failure {
                Failure::Node(error) => error,
                Failure::Redirect { text, .. } => NodeError::Server(
                    format!(
                        "{text} (this node is in cluster mode: name its member \
                         redis+cluster://host:port)"
                    )
                    .into(),
                ),
            })?;
        parse_reply(&op, value)
    }

    /// Sends the command for `op` (after `ASKING`, if `asking`: the answer to
    /// an `ASK` redirection) and waits at most `grace` for the answer, as
    /// [`run`](Self::run) does. The first poll writes it. The command is
    /// built for the connection it goes on (`FCALL` where that connection
    /// has the library, else `EVAL`).
    pub(crate) async fn exchange(
        &self,
        op: &Op<'_>,
        asking: bool,
        grace: Duration,
    ) -> Result<Value, Failure> {
        let (generation, mut conn, loaded) = self.slot.get_with_scripts()?;
        let command = &*scripts::command(op, loaded);
        let exchange = async {
            // Routed at the first poll, which also writes a call sent now:
            // a later call finds the node busy and queues behind it.
            match self.batch.route(generation, command, asking, grace) {
                Route::Now(_busy) if asking => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").add_command(command.clone());
                    conn.send_packed_commands(&pipe, 1, 1)
                        .await
                        .and_then(|mut values| values.pop().ok_or_else(no_answer))
                        .and_then(Value::extract_error)
                }
                Route::Now(_busy) => conn
                    .send_packed_command(command)
                    .await
                    .and_then(Value::extract_error),
                Route::Queued(answer) => answer.await.unwrap_or_else(|_| Err(no_answer())),
            }
        };
        let Ok(result) = tokio::time::timeout(grace, exchange).await else {
            let error = NodeError::TimedOut;
            tracing::debug!(node = %self.name, ?grace, "no answer within the grace: dropping the connection");
            self.slot.mark_broken(generation, &error);
            return Err(Failure::Node(error));
        };
        result.map_err(|e| {
            if let (Some(code @ ("MOVED" | "ASK")), Some((to, slot))) =
                (e.code(), e.redirect_node())
            {
                return Failure::Redirect {
                    ask: code == "ASK",
                    slot,
                    to: to.to_owned(),
                    text: e.to_string(),
                };
            }
            let error = classify(&e);
            // The library was deleted (`FUNCTION FLUSH`): this connection
            // sends `EVAL` from now on, in order; the next one loads the
            // library again. The call itself is not retried (see `scripts`).
            if e.to_string().contains("Function not found") {
                self.slot.unload(generation);
            }
            if e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error() {
                self.slot.mark_broken(generation, &error);
            }
            Failure::Node(error)
        })
    }
}

/// Why an [`exchange`](RedisNode::exchange) brought no value.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The node failed, or answered with an error.
    Node(NodeError),
    /// A cluster node sent the command elsewhere (`MOVED`, or `ASK` while
    /// `slot` migrates); it did nothing.
    Redirect {
        ask: bool,
        slot: u16,
        /// `host:port`.
        to: String,
        /// The error as the node gave it.
        text: String,
    },
}

impl From<NodeError> for Failure {
    fn from(error: NodeError) -> Self {
        Failure::Node(error)
    }
}

fn no_answer() -> RedisError {
    RedisError::from((ErrorKind::Parse, "no answer in the pipeline"))
}

/// Who a node is among the members, for its reconnector.
struct Member {
    index: usize,
    servers: Arc<Servers>,
    name: Arc<str>,
    /// The connection's request queue: room for every call in flight.
    queue: usize,
    /// Whether the address is `rediss://`, to name a handshake that never
    /// completes.
    tls: bool,
}

/// The background task that owns (re)connecting. It lives as long as the
/// node and is aborted with it.
async fn reconnect(
    client: redis::Client,
    member: Member,
    slot: Arc<Slot>,
    first: oneshot::Sender<First>,
) {
    let mut first = Some(first);
    let mut backoff = BACKOFF_MIN;
    // Logged once per duplicate, not once per attempt.
    let mut reported: Option<Arc<str>> = None;
    loop {
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, open(&client, member.queue))
            .await
            .unwrap_or(Err(NodeError::TimedOut))
            .map_err(|e| match e {
                // A plain-text port never answers a ClientHello.
                NodeError::TimedOut | NodeError::Connection(_)
                    if member.tls && e.to_string().contains("timed out") =>
                {
                    NodeError::Connection(
                        "no answer to the TLS handshake within 1 s: a plain-text port, or a frozen node"
                            .into(),
                    )
                }
                e => e,
            });
        let outcome = match attempt {
            Ok((conn, run_id, server, loaded)) => match run_id
                .map(|id| member.servers.claim(member.index, &id))
            {
                Some(Err(other)) => {
                    let error = NodeError::Server(format!("same server as member {other}").into());
                    if reported.as_ref() != Some(&other) {
                        tracing::error!(node = %member.name, same_as = %other, "two members are one server; this one gets no vote");
                        reported = Some(Arc::clone(&other));
                    }
                    slot.failed_to_connect(&error);
                    First::SameAs(other)
                }
                _ => {
                    slot.install(conn, server.map(Arc::from), loaded);
                    First::Connected
                }
            },
            Err(e) => {
                slot.failed_to_connect(&e);
                First::Failed(e)
            }
        };
        let connected = matches!(outcome, First::Connected);
        if let Some(first) = first.take() {
            let _ = first.send(outcome);
        }
        if connected {
            backoff = BACKOFF_MIN;
            slot.broken.notified().await;
        } else {
            // Full jitter spreads the reconnects of many clients.
            let nanos = rand::rng().random_range(0..=backoff.as_nanos() as u64);
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// What a connection attempt found: the connection, the server's `run_id`
/// and name, and whether the scripts are loaded on it.
type Opened = (MultiplexedConnection, Option<String>, Option<String>, bool);

/// One connection attempt, including a PING so that missing or wrong
/// credentials show up here rather than in the first lock round, the
/// server's `run_id` (`None` where `INFO` is not allowed), and the scripts
/// loaded as a function library (`false` where the server has no functions
/// or `FUNCTION LOAD` is not allowed: `EVAL` then).
async fn open(client: &redis::Client, queue: usize) -> Result<Opened, NodeError> {
    // Timeouts are the dispatcher's business: it bounds every call itself.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None)
        .set_pipeline_buffer_size(queue);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| classify(&e))?;
    conn.send_packed_command(&redis::cmd("PING"))
        .await
        .and_then(Value::extract_error)
        .map_err(|e| classify(&e))?;
    let info = conn
        .send_packed_command(redis::cmd("INFO").arg("server"))
        .await
        .and_then(Value::extract_error);
    let info = match info {
        Ok(Value::BulkString(text)) => String::from_utf8_lossy(&text).into_owned(),
        Ok(Value::VerbatimString { text, .. }) => text,
        _ => String::new(),
    };
    // The library, once per server and version; "already exists" is this
    // version, loaded before. Any other refusal (an older server, no
    // rights): `EVAL` on this connection.
    let loaded = match conn
        .send_packed_command(
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg(scripts::LIBRARY.as_str()),
        )
        .await
        .and_then(Value::extract_error)
    {
        Ok(_) => true,
        Err(e) => e.to_string().contains("already exists"),
    };
    Ok((conn, run_id(&info), server(&info), loaded))
}

/// The server and version from `INFO server`: `valkey 8.1.8` (Valkey also
/// reports a `redis_version` for compatibility), else `redis 7.0.15`.
fn server(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    match (field("valkey_version:"), field("redis_version:")) {
        (Some(v), _) => Some(format!("valkey {v}")),
        (None, Some(v)) => Some(format!("redis {v}")),
        _ => None,
    }
}

/// The `run_id` line of `INFO server`.
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// Maps a redis-rs error onto what the coordinator needs to know.
fn classify(e: &RedisError) -> NodeError {
    let text: Arc<str> = e.to_string().into();
    if is_tls(&text) {
        NodeError::Tls(text)
    } else if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        NodeError::Auth(text)
    } else if e.code().is_some() {
        NodeError::Server(text)
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        NodeError::Connection(text)
    } else {
        NodeError::Protocol(text)
    }
}

/// Whether an error's text is rustls' (a handshake, certificate or record
/// failure) rather than the network's.
fn is_tls(text: &str) -> bool {
    const MARKS: [&str; 5] = [
        "certificate",
        "received fatal alert",
        "corrupt message",
        "handshake",
        "InvalidContentType",
    ];
    MARKS.iter().any(|mark| text.contains(mark))
}

pub(crate) fn parse_reply(op: &Op<'_>, value: Value) -> Result<Reply, NodeError> {
    if let Op::Inspect { keys } = op {
        return parse_snapshot(&value, keys.len())
            .map(Reply::Snapshot)
            .ok_or_else(|| NodeError::Protocol(format!("{value:?}").into()));
    }
    let acquire = matches!(
        op,
        Op::Acquire { .. }
            | Op::AcquireReentrant { .. }
            | Op::AcquireMany { .. }
            | Op::AcquireRead { .. }
            | Op::AcquireWrite { .. }
    );
    let reply = match (&value, op) {
        (Value::Okay, _) if acquire => Some(Reply::Done),
        (Value::SimpleString(s), _) if acquire && s == "OK" => Some(Reply::Done),
        // A script's PTTL (-1: no expiry), or a native `SET NX` refused.
        (Value::Int(pttl_ms), _) if acquire => Some(held(*pttl_ms)),
        (Value::Nil, Op::Acquire { .. }) => Some(Reply::Held { pttl_ms: None }),
        (Value::Array(pair), Op::AcquireFenced { .. }) => match pair.as_slice() {
            [Value::Int(1), Value::Int(fence)] => u64::try_from(*fence).ok().map(Reply::Fence),
            [Value::Int(0), Value::Int(pttl_ms)] => Some(held(*pttl_ms)),
            _ => None,
        },
        (Value::Int(1), _) if !acquire => Some(Reply::Done),
        (Value::Int(0), _) if !acquire => Some(Reply::NotHeld),
        _ => None,
    };
    reply.ok_or_else(|| NodeError::Protocol(format!("{value:?}").into()))
}

/// What `inspect.lua` returns for `keys` keys: the node's `TIME`, then one
/// entry per key.
fn parse_snapshot(value: &Value, keys: usize) -> Option<Snapshot> {
    let Value::Array(items) = value else {
        return None;
    };
    if items.len() != keys + 2 {
        return None;
    }
    let secs: u64 = number(&items[0])?;
    let micros: u64 = number(&items[1])?;
    let stored = items[2..]
        .iter()
        .map(|entry| {
            let Value::Array(entry) = entry else {
                return None;
            };
            let kind = text(entry.first()?)?;
            let pttl: i64 = number(entry.get(1)?)?;
            let pttl_ms = u64::try_from(pttl).ok();
            let rest = &entry[2..];
            Some(match kind.as_str() {
                "none" => Stored::Absent,
                "string" => Stored::Text {
                    value: bytes(rest.first()?)?,
                    pttl_ms,
                },
                "hash" => Stored::Hash {
                    fields: rest
                        .chunks(2)
                        .map(|pair| Some((bytes(pair.first()?)?, bytes(pair.get(1)?)?)))
                        .collect::<Option<_>>()?,
                    pttl_ms,
                },
                "zset" => Stored::Scored {
                    members: rest
                        .chunks(2)
                        .map(|pair| Some((bytes(pair.first()?)?, number(pair.get(1)?)?)))
                        .collect::<Option<_>>()?,
                    pttl_ms,
                },
                _ => Stored::Other { kind },
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Snapshot::new(secs * 1000 + micros / 1000, stored))
}

/// A string or bulk value's bytes.
fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) => Some(text.clone().into_bytes()),
        Value::Okay => Some(b"OK".to_vec()),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    bytes(value).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// An integer, or a string holding one (a score, a `TIME` field).
fn number<T: std::str::FromStr + TryFrom<i64>>(value: &Value) -> Option<T> {
    match value {
        Value::Int(n) => T::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// A refusal with the holder's PTTL as Redis reports it (negative: no expiry).
fn held(pttl_ms: i64) -> Reply {
    Reply::Held {
        pttl_ms: u64::try_from(pttl_ms).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_run_id() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:ab12\r\ntcp_port:6379\r\n";
        assert_eq!(run_id(info).as_deref(), Some("ab12"));
        assert_eq!(run_id("# Server\r\n"), None);
    }

    #[test]
    fn reads_the_server() {
        let redis = "redis_version:7.0.15\r\nrun_id:x\r\n";
        assert_eq!(server(redis).as_deref(), Some("redis 7.0.15"));
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        assert_eq!(server(valkey).as_deref(), Some("valkey 8.1.8"));
        assert_eq!(server(""), None);
    }

    #[test]
    fn one_server_one_member() {
        let servers = Servers::new(vec!["a".into(), "b".into()]);
        assert_eq!(servers.claim(0, "x"), Ok(()));
        assert_eq!(servers.claim(0, "x"), Ok(())); // a reconnect
        assert_eq!(servers.claim(1, "x"), Err("a".into()));
        assert_eq!(servers.claim(1, "y"), Ok(()));
    }
}
