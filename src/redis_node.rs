//! A Redis master as a lock [`Node`]: one multiplexed connection, kept alive
//! by a background task so that no timed round ever pays for a reconnect.
//!
//! A round asks the node's slot for the current connection. If there is none
//! the node answers [`NodeError::NotConnected`] at once — a down node costs a
//! round nothing — and the background task, woken when a request sees the
//! connection break, re-establishes it with jittered exponential backoff.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::RngExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;

use crate::error::{ConfigError, NodeError};
use crate::node::{Op, Reply};
use crate::scripts::{self, Call};

/// How long one background connection attempt may take (TCP, TLS, AUTH,
/// PING). A frozen node accepts TCP but never answers, so this bounds it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Backoff between failed connection attempts: from 10 ms, doubling to 1 s.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A parsed, not yet connected node address.
#[derive(Debug, Clone)]
pub(crate) struct Address {
    client: redis::Client,
    name: Arc<str>,
}

impl Address {
    /// Parses `url`; the error masks any password in it.
    pub(crate) fn parse(url: &str) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| ConfigError::InvalidUrl {
            url: mask_password(url),
            reason: e.to_string(),
        })?;
        let info = client.get_connection_info();
        let scheme = match info.addr() {
            redis::ConnectionAddr::Tcp(..) => "redis://",
            redis::ConnectionAddr::TcpTls { .. } => "rediss://",
            _ => "unix:",
        };
        let db = info.redis_settings().db();
        let name = if db == 0 {
            format!("{scheme}{}", info.addr())
        } else {
            format!("{scheme}{}/{db}", info.addr())
        };
        Ok(Address {
            client,
            name: name.into(),
        })
    }

    /// The client for this address (for other connections to the node).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The node's display name: scheme, address and database, never a
    /// password. Two addresses with one name are the same node.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }
}

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

    fn install(&self, conn: MultiplexedConnection) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        cur.generation += 1;
        cur.conn = Some(conn);
        cur.last_error = None;
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

/// A Redis master, reached through one multiplexed connection.
#[derive(Debug)]
pub(crate) struct RedisNode {
    name: Arc<str>,
    slot: Arc<Slot>,
    reconnector: AbortHandle,
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.reconnector.abort();
    }
}

impl RedisNode {
    /// Starts connecting to `address` in the background and waits at most
    /// `wait` for the first attempt. A node that is down or frozen is not an
    /// error here (it may come back); credentials it rejects are.
    pub(crate) async fn connect(address: Address, wait: Duration) -> Result<Self, ConfigError> {
        let slot = Arc::new(Slot::default());
        let (first_tx, first_rx) = oneshot::channel();
        let reconnector = tokio::spawn(reconnect(address.client, slot.clone(), first_tx));
        let node = RedisNode {
            name: address.name,
            slot,
            reconnector: reconnector.abort_handle(),
        };
        if let Ok(Ok(Err(NodeError::Auth(message)))) = tokio::time::timeout(wait, first_rx).await {
            return Err(ConfigError::Auth {
                node: node.name.to_string(),
                message: message.to_string(),
            });
        }
        Ok(node)
    }

    /// The node's display name (passwords masked).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Performs `op` on the node: its script by SHA (by source after
    /// `NOSCRIPT`), or a native command where one is atomic enough.
    pub(crate) async fn run(&self, op: Op<'_>) -> Result<Reply, NodeError> {
        let (generation, mut conn) = self.slot.get()?;
        let first = scripts::command(&op, Call::Sha);
        let mut result = conn
            .send_packed_command(&first)
            .await
            .and_then(Value::extract_error);
        if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // Flushed or restarted node: EVAL runs the script and caches it again.
            let source = scripts::command(&op, Call::Source);
            result = conn
                .send_packed_command(&source)
                .await
                .and_then(Value::extract_error);
        }
        let value = result.map_err(|e| {
            let error = classify(&e);
            if e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error() {
                self.slot.mark_broken(generation, &error);
            }
            error
        })?;
        parse_reply(&op, value)
    }
}

/// The background task that owns (re)connecting. It lives as long as the
/// node and is aborted with it.
async fn reconnect(
    client: redis::Client,
    slot: Arc<Slot>,
    first: oneshot::Sender<Result<(), NodeError>>,
) {
    let mut first = Some(first);
    let mut backoff = BACKOFF_MIN;
    loop {
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, open(&client))
            .await
            .unwrap_or(Err(NodeError::TimedOut));
        let outcome = match attempt {
            Ok(conn) => {
                slot.install(conn);
                Ok(())
            }
            Err(e) => {
                slot.failed_to_connect(&e);
                Err(e)
            }
        };
        let connected = outcome.is_ok();
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

/// One connection attempt, including a PING so that missing or wrong
/// credentials show up here rather than in the first lock round.
async fn open(client: &redis::Client) -> Result<MultiplexedConnection, NodeError> {
    // Timeouts are the coordinator's business: it bounds every call itself.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| classify(&e))?;
    conn.send_packed_command(&redis::cmd("PING"))
        .await
        .and_then(Value::extract_error)
        .map_err(|e| classify(&e))?;
    Ok(conn)
}

/// Maps a redis-rs error onto what the coordinator needs to know.
fn classify(e: &RedisError) -> NodeError {
    let text: Arc<str> = e.to_string().into();
    if e.kind() == ErrorKind::AuthenticationFailed
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

fn parse_reply(op: &Op<'_>, value: Value) -> Result<Reply, NodeError> {
    let acquire = matches!(
        op,
        Op::Acquire { .. } | Op::AcquireReentrant { .. } | Op::AcquireMany { .. }
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

/// A refusal with the holder's PTTL as Redis reports it (negative: no expiry).
fn held(pttl_ms: i64) -> Reply {
    Reply::Held {
        pttl_ms: u64::try_from(pttl_ms).ok(),
    }
}

/// `url` with the password part of its user info replaced by `***`.
pub(crate) fn mask_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = userinfo.split_once(':').map_or("", |(user, _)| user);
    format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(mask_password("redis://:secret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(
            mask_password("redis://user:secret@h:1"),
            "redis://user:***@h:1"
        );
        assert_eq!(mask_password("redis://secret@h:1"), "redis://:***@h:1");
        assert_eq!(mask_password("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(mask_password("not a url"), "not a url");
        assert_eq!(mask_password("redis://h:1/a@b"), "redis://h:1/a@b");
    }

    #[test]
    fn names_hide_passwords() {
        let t = Address::parse("redis://:pw@127.0.0.1:7001/2").unwrap();
        assert_eq!(&**t.name(), "redis://127.0.0.1:7001/2");
        let t = Address::parse("redis://127.0.0.1:7001").unwrap();
        assert_eq!(&**t.name(), "redis://127.0.0.1:7001");
    }

    #[test]
    fn rejects_malformed_urls() {
        for url in [
            "",
            "http://h:1",
            "redis://:pw@",
            "redis://h:notaport",
            "garbage",
        ] {
            assert!(
                matches!(Address::parse(url), Err(ConfigError::InvalidUrl { .. })),
                "{url}"
            );
        }
    }
}
