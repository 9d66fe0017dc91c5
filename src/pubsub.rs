//! Redis pub/sub as a [`Listener`]: how a Redis node reports releases.
//!
//! The release scripts publish the released token on the channel named after
//! the lock key (see `src/scripts/release.lua`); a listener is one pub/sub
//! connection, shared by every waiter of the client on that node.

use futures::StreamExt;
use futures::future::BoxFuture;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::Mutex;

use crate::error::NodeError;
use crate::node::{Listener, Notice};

/// One pub/sub connection: its command half and its message half, each
/// behind its own lock so that a pending [`next`](Listener::next) never
/// holds up a subscription change.
struct RedisListener {
    sink: Mutex<PubSubSink>,
    stream: Mutex<PubSubStream>,
}

/// Opens a pub/sub connection to the node behind `client`.
pub(crate) fn listen(
    client: redis::Client,
) -> BoxFuture<'static, Result<Box<dyn Listener>, NodeError>> {
    Box::pin(async move {
        let pubsub = client
            .get_async_pubsub()
            .await
            .map_err(|e| NodeError::Connection(e.to_string().into()))?;
        let (sink, stream) = pubsub.split();
        Ok(Box::new(RedisListener {
            sink: Mutex::new(sink),
            stream: Mutex::new(stream),
        }) as Box<dyn Listener>)
    })
}

fn failed(e: redis::RedisError) -> NodeError {
    NodeError::Connection(e.to_string().into())
}

impl Listener for RedisListener {
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(async move {
            self.sink
                .lock()
                .await
                .subscribe(channels)
                .await
                .map_err(failed)
        })
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(async move {
            self.sink
                .lock()
                .await
                .unsubscribe(channels)
                .await
                .map_err(failed)
        })
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        // `StreamExt::next` on redis-rs' channel-backed stream is cancel
        // safe: a dropped call loses no message.
        Box::pin(async move {
            let message = self.stream.lock().await.next().await?;
            Some(Notice {
                channel: message.get_channel_name().to_owned(),
                nonce: message.get_payload_bytes().to_owned(),
            })
        })
    }
}
