//! Redis pub/sub as a [`Listener`]: how a Redis node reports releases.
//!
//! The release scripts publish the released token on the channel named
//! after the lock key (`src/transport/scripts/notify.lua`: `SPUBLISH` where the
//! server has sharded pub/sub, `PUBLISH` elsewhere); a listener is one
//! connection in subscribed mode (`SSUBSCRIBE` or `SUBSCRIBE` to match) — opened as a lock connection is (TLS, the
//! client's own crypto provider, credentials), shared by every waiter of the
//! client on that node. A listener idle for [`IDLE_PING`] sends a `PING`; one
//! unanswered within [`PONG_WITHIN`] is dead (a silently dropped
//! connection), and the hub opens a new one.
//!
//! # Listeners
//!
//! A listener is one connection per node per client, in subscribed mode, opened as a
//! lock connection is (TLS with the client's provider, credentials; no function library)
//! and shared by every waiter of the client on that node. Where the server has sharded
//! pub/sub (Redis 7+, Valkey; read from `INFO` at connect) it subscribes with
//! `SSUBSCRIBE`, one command per channel, to match the scripts' `SPUBLISH`; elsewhere
//! `SUBSCRIBE`, at most 1024 channels per command. Either waits for the node's
//! confirmations; a confirmation the listener did not ask for (the server dropped a
//! shard subscription whose slot moved) ends it. A cluster member's listener
//! (`src/transport/cluster/listen.rs`) subscribes each channel on the master the member's map
//! names for the channel's slot, over one connection per master it needs: the release,
//! published on that shard only, reaches it, and no other shard hears it (a
//! cluster-wide `PUBLISH` costs every other node a cluster-bus message). One master's
//! connection gone ends the member's listener, and the hub opens a new one. A listener silent for 1 s sends a `PING`; one
//! unanswered within 1 s is dead, and the hub opens a new one (each attempt bounded by
//! 1 s, full-jitter backoff from 10 ms to 1 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::transport::address::Address;
use crate::transport::link::open::{self, Stream};
use crate::transport::link::{IDLE_PING, tls};
use crate::transport::node::{Listener, Notice};
use crate::transport::resp::{self, Frame};

/// How long a listener's `PING` may wait for its answer.
pub(crate) const PONG_WITHIN: Duration = Duration::from_secs(1);

/// One subscribed connection: its write half, and the task that reads it.
pub(crate) struct Subscribed {
    writer: Arc<Mutex<WriteHalf<Stream>>>,
    /// Subscription changes the node has confirmed, one per channel.
    confirmed: watch::Receiver<u64>,
    /// How many this connection has asked for (shared with the reader,
    /// which takes a confirmation beyond it for the node's own doing).
    asked: Arc<AtomicU64>,
    /// The server has sharded pub/sub (Redis 7+, Valkey): the scripts
    /// publish with `SPUBLISH`, so this connection subscribes with
    /// `SSUBSCRIBE`. Elsewhere they fall back to `PUBLISH`, and so does
    /// this to `SUBSCRIBE`.
    sharded: bool,
    reader: tokio::task::AbortHandle,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A Redis node's listener: one subscribed connection.
struct RedisListener {
    conn: Subscribed,
    /// Releases read, in order; closed when the connection is gone.
    notices: Mutex<mpsc::UnboundedReceiver<Notice>>,
}

/// Opens a listener on the node at `address`.
pub(crate) fn listen(
    address: Address,
    tls: tls::Configs,
) -> BoxFuture<'static, Result<Box<dyn Listener>, NodeError>> {
    Box::pin(async move {
        let (notices_tx, notices) = mpsc::unbounded_channel();
        let (ended, _) = watch::channel(false);
        let conn = subscribe_at(&address, &tls, notices_tx, Arc::new(ended)).await?;
        Ok(Box::new(RedisListener {
            conn,
            notices: Mutex::new(notices),
        }) as Box<dyn Listener>)
    })
}

/// Opens a subscribed connection to `address` whose releases go to
/// `notices`; `ended` is set when it is gone.
pub(crate) async fn subscribe_at(
    address: &Address,
    tls: &tls::Configs,
    notices: mpsc::UnboundedSender<Notice>,
    ended: Arc<watch::Sender<bool>>,
) -> Result<Subscribed, NodeError> {
    let endpoint = address.endpoint();
    let mut stream = open::dial(endpoint, tls).await?;
    let hello = open::handshake(&mut stream, endpoint, None, None, None).await?;
    let sharded = hello.server.as_deref().is_some_and(has_sharded_pubsub);
    let (half, writer) = tokio::io::split(stream);
    let writer = Arc::new(Mutex::new(writer));
    let (confirmed_tx, confirmed) = watch::channel(0);
    let asked = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(read(
        half,
        Arc::clone(&writer),
        notices,
        confirmed_tx,
        Arc::clone(&asked),
        ended,
    ))
    .abort_handle();
    Ok(Subscribed {
        writer,
        confirmed,
        asked,
        sharded,
        reader,
    })
}

/// Whether a server (`INFO`'s name and version: `redis 7.0.15`, `valkey
/// 8.1.8`) has `SPUBLISH` and `SSUBSCRIBE`: Redis from 7, every Valkey.
fn has_sharded_pubsub(server: &str) -> bool {
    let mut words = server.split_whitespace();
    let (name, version) = (words.next(), words.next().unwrap_or_default());
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    match name {
        Some("valkey") => true,
        Some("redis") => major >= 7,
        _ => false,
    }
}

fn broken(e: std::io::Error) -> NodeError {
    NodeError::Connection(e.to_string().into())
}

/// The listener's reader: hands out releases, counts confirmations, and
/// `PING`s an idle connection; ends when the connection is gone (or a
/// `PING` went unanswered), closing the notices.
///
/// Unbounded in type, the notices are bounded by the hub, which takes them
/// as they come (a release is one small message per node).
async fn read(
    half: ReadHalf<Stream>,
    writer: Arc<Mutex<WriteHalf<Stream>>>,
    notices: mpsc::UnboundedSender<Notice>,
    confirmed: watch::Sender<u64>,
    asked: Arc<AtomicU64>,
    ended: Arc<watch::Sender<bool>>,
) {
    read_until_gone(half, writer, notices, confirmed, asked).await;
    ended.send_replace(true);
}

async fn read_until_gone(
    mut half: ReadHalf<Stream>,
    writer: Arc<Mutex<WriteHalf<Stream>>>,
    notices: mpsc::UnboundedSender<Notice>,
    confirmed: watch::Sender<u64>,
    asked: Arc<AtomicU64>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 4096];
    let mut pinged: Option<Instant> = None;
    let mut heard = Instant::now();
    loop {
        while let Ok(Some((frame, used))) = resp::parse(&buf) {
            buf.drain(..used);
            let Frame::Array(items) = frame else { continue };
            let text = |i: usize| items.get(i).and_then(Frame::bytes);
            match text(0) {
                Some(b"message" | b"smessage") => {
                    if let (Some(channel), Some(nonce)) = (text(1), text(2)) {
                        let notice = Notice {
                            channel: String::from_utf8_lossy(channel).into_owned(),
                            nonce: nonce.to_vec(),
                        };
                        if notices.send(notice).is_err() {
                            return; // the listener is gone
                        }
                    }
                }
                Some(b"subscribe" | b"unsubscribe" | b"ssubscribe" | b"sunsubscribe") => {
                    // More than asked: the node dropped a subscription of its
                    // own accord (a shard channel whose slot moved away). The
                    // connection is no longer what the hub thinks: gone.
                    if *confirmed.borrow() >= asked.load(Ordering::Acquire) {
                        return;
                    }
                    confirmed.send_modify(|n| *n += 1);
                }
                _ => {} // a PING's "pong"
            }
        }
        let due = match pinged {
            Some(pinged) => pinged + PONG_WITHIN,
            None => heard + IDLE_PING,
        };
        tokio::select! {
            biased;
            n = half.read(&mut chunk) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    heard = Instant::now();
                    pinged = None;
                }
            },
            () = tokio::time::sleep_until(due) => {
                if pinged.is_some() {
                    return; // no answer to our PING: the connection is dead
                }
                pinged = Some(Instant::now());
                let mut writer = writer.lock().await;
                if writer.write_all(b"*1\r\n$4\r\nPING\r\n").await.is_err()
                    || writer.flush().await.is_err()
                {
                    return;
                }
            }
        }
    }
}

impl Subscribed {
    /// Subscribes to `channels` (`subscribe`) or unsubscribes from them, and
    /// waits until the node has confirmed each. Sharded, one command per
    /// channel: a cluster shard refuses channels of several slots in one.
    pub(crate) async fn change(&self, subscribe: bool, channels: &[&str]) -> Result<(), NodeError> {
        let command: &[u8] = match (subscribe, self.sharded) {
            (true, true) => b"SSUBSCRIBE",
            (true, false) => b"SUBSCRIBE",
            (false, true) => b"SUNSUBSCRIBE",
            (false, false) => b"UNSUBSCRIBE",
        };
        let n = channels.len() as u64;
        let target = self.asked.fetch_add(n, Ordering::AcqRel) + n;
        let mut out = Vec::new();
        if self.sharded {
            for channel in channels {
                out.extend(resp::encode(&[command, channel.as_bytes()]));
            }
        } else {
            let mut args: Vec<&[u8]> = vec![command];
            args.extend(channels.iter().map(|c| c.as_bytes()));
            out.extend(resp::encode(&args));
        }
        {
            let mut writer = self.writer.lock().await;
            writer.write_all(&out).await.map_err(broken)?;
            writer.flush().await.map_err(broken)?;
        }
        let mut confirmed = self.confirmed.clone();
        confirmed
            .wait_for(|n| *n >= target)
            .await
            .map(drop)
            .map_err(|_| NodeError::Connection("the connection is gone".into()))
    }
}

impl Listener for RedisListener {
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.conn.change(true, channels))
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.conn.change(false, channels))
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        // Cancel safe: a release not yet taken stays in the channel.
        Box::pin(async move { self.notices.lock().await.recv().await })
    }
}

#[cfg(test)]
mod tests {
    use super::has_sharded_pubsub;

    #[test]
    fn sharded_pub_sub_from_redis_7_and_every_valkey() {
        assert!(has_sharded_pubsub("redis 7.0.15"));
        assert!(has_sharded_pubsub("redis 8.2.1"));
        assert!(has_sharded_pubsub("valkey 8.1.8"));
        assert!(!has_sharded_pubsub("redis 6.2.14"));
        assert!(!has_sharded_pubsub("redis"));
        assert!(!has_sharded_pubsub("keydb 6.3.4"));
    }
}
