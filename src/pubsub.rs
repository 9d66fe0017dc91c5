//! Redis pub/sub as a [`Listener`]: how a Redis node reports releases.
//!
//! The release scripts publish the released token on the channel named
//! after the lock key (see `src/scripts/release.lua`); a listener is one
//! connection in subscribed mode — opened as a lock connection is (TLS, the
//! client's own crypto provider, credentials), shared by every waiter of the
//! client on that node. A listener idle for [`IDLE_PING`] sends a `PING`; one
//! unanswered within [`PONG_WITHIN`] is dead (a silently dropped
//! connection), and the hub opens a new one.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;

use crate::address::Address;
use crate::error::NodeError;
use crate::link::open::{self, Stream};
use crate::link::{IDLE_PING, tls};
use crate::node::{Listener, Notice};
use crate::resp::{self, Frame};

/// How long a listener's `PING` may wait for its answer.
pub(crate) const PONG_WITHIN: Duration = Duration::from_secs(1);

/// One subscribed connection: its write half, and the task that reads it.
struct RedisListener {
    writer: Arc<Mutex<WriteHalf<Stream>>>,
    /// Releases read, in order; closed when the connection is gone.
    notices: Mutex<mpsc::UnboundedReceiver<Notice>>,
    /// Subscription changes the node has confirmed, one per channel.
    confirmed: watch::Receiver<u64>,
    /// How many this listener has asked for.
    asked: std::sync::atomic::AtomicU64,
    reader: tokio::task::AbortHandle,
}

impl Drop for RedisListener {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Opens a listener on the node at `address`.
pub(crate) fn listen(
    address: Address,
    tls: tls::Configs,
) -> BoxFuture<'static, Result<Box<dyn Listener>, NodeError>> {
    Box::pin(async move {
        let endpoint = address.endpoint();
        let mut stream = open::dial(endpoint, &tls).await?;
        open::handshake(&mut stream, endpoint, None).await?;
        let (half, writer) = tokio::io::split(stream);
        let writer = Arc::new(Mutex::new(writer));
        let (notices_tx, notices) = mpsc::unbounded_channel();
        let (confirmed_tx, confirmed) = watch::channel(0);
        let reader =
            tokio::spawn(read(half, Arc::clone(&writer), notices_tx, confirmed_tx)).abort_handle();
        Ok(Box::new(RedisListener {
            writer,
            notices: Mutex::new(notices),
            confirmed,
            asked: std::sync::atomic::AtomicU64::new(0),
            reader,
        }) as Box<dyn Listener>)
    })
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
    mut half: ReadHalf<Stream>,
    writer: Arc<Mutex<WriteHalf<Stream>>>,
    notices: mpsc::UnboundedSender<Notice>,
    confirmed: watch::Sender<u64>,
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

impl RedisListener {
    /// Sends `command` on `channels` and waits until the node has confirmed
    /// each.
    async fn change(&self, command: &[u8], channels: &[&str]) -> Result<(), NodeError> {
        let n = channels.len() as u64;
        let target = self.asked.fetch_add(n, std::sync::atomic::Ordering::AcqRel) + n;
        let mut args: Vec<&[u8]> = vec![command];
        args.extend(channels.iter().map(|c| c.as_bytes()));
        {
            let mut writer = self.writer.lock().await;
            writer
                .write_all(&resp::encode(&args))
                .await
                .map_err(broken)?;
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
        Box::pin(self.change(b"SUBSCRIBE", channels))
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.change(b"UNSUBSCRIBE", channels))
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        // Cancel safe: a release not yet taken stays in the channel.
        Box::pin(async move { self.notices.lock().await.recv().await })
    }
}
