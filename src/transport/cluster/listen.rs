//! A cluster member's listener: a release is published on the shard that
//! serves its key's slot (`SPUBLISH`, `src/transport/scripts/notify.lua`), so each
//! channel is subscribed (`SSUBSCRIBE`) on the master the map names for
//! its slot, over one subscribed connection per master, opened when a
//! channel first needs it. No other shard hears the release: a release
//! through a member of `k` shards costs one shard's fan-out, not `k`
//! (cluster-wide `PUBLISH` reaches every node).
//!
//! A master whose connection is gone, or that drops a subscription of its
//! own accord (its slot moved), ends the whole listener: the hub opens a
//! new one and subscribes every channel again, where the map says now. On
//! a server without sharded pub/sub the scripts `PUBLISH` cluster-wide and
//! the per-master connection `SUBSCRIBE`s: the same listener still hears it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc, watch};

use super::{MAX_MASTERS, NONE, Shared, split_host_port};
use crate::proto::error::NodeError;
use crate::proto::slot::slot;
use crate::transport::node::{Listener, Notice};
use crate::transport::pubsub::{Subscribed, subscribe_at};

/// Subscribed connections to a member's masters.
pub(super) struct ClusterListener {
    shared: Arc<Shared>,
    /// One per master subscribed on, by `host:port` (at most
    /// [`MAX_MASTERS`]).
    masters: Mutex<HashMap<String, Subscribed>>,
    /// Each channel subscribed, and the master it is subscribed on.
    channels: std::sync::Mutex<HashMap<String, String>>,
    notices_tx: mpsc::UnboundedSender<Notice>,
    notices: Mutex<mpsc::UnboundedReceiver<Notice>>,
    ended_tx: Arc<watch::Sender<bool>>,
    ended: watch::Receiver<bool>,
}

/// Opens a member's listener: nothing is connected until a channel is
/// subscribed.
pub(super) fn listen(
    shared: Arc<Shared>,
) -> BoxFuture<'static, Result<Box<dyn Listener>, NodeError>> {
    let (notices_tx, notices) = mpsc::unbounded_channel();
    let (ended_tx, ended) = watch::channel(false);
    Box::pin(async move {
        Ok(Box::new(ClusterListener {
            shared,
            masters: Mutex::new(HashMap::new()),
            channels: std::sync::Mutex::new(HashMap::new()),
            notices_tx,
            notices: Mutex::new(notices),
            ended_tx: Arc::new(ended_tx),
            ended,
        }) as Box<dyn Listener>)
    })
}

impl ClusterListener {
    /// The master (`host:port`) the map names for `channel`'s slot.
    fn master_of(&self, channel: &str) -> Result<String, NodeError> {
        let map = self.shared.map();
        let owner = map.owners[usize::from(slot(channel.as_bytes()))];
        if owner == NONE {
            return Err(NodeError::NotConnected(
                format!("no master serves the slot of {channel}").into(),
            ));
        }
        Ok(map.masters[usize::from(owner)].0.clone())
    }

    async fn subscribe_all(&self, channels: &[&str]) -> Result<(), NodeError> {
        let mut masters = self.masters.lock().await;
        for &channel in channels {
            let at = self.master_of(channel)?;
            if !masters.contains_key(&at) {
                if masters.len() >= MAX_MASTERS {
                    return Err(NodeError::Server(
                        format!("more than {MAX_MASTERS} masters").into(),
                    ));
                }
                let (host, port) = split_host_port(&at)?;
                let address = self.shared.address.node_at(host, port);
                let conn = subscribe_at(
                    &address,
                    &self.shared.tls,
                    self.notices_tx.clone(),
                    Arc::clone(&self.ended_tx),
                )
                .await?;
                masters.insert(at.clone(), conn);
            }
            masters[&at].change(true, &[channel]).await?;
            let mut subscribed = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            subscribed.insert(channel.to_owned(), at);
        }
        Ok(())
    }

    async fn unsubscribe_all(&self, channels: &[&str]) -> Result<(), NodeError> {
        let masters = self.masters.lock().await;
        for &channel in channels {
            let at = {
                let mut subscribed = self.channels.lock().unwrap_or_else(|e| e.into_inner());
                subscribed.remove(channel)
            };
            if let Some(conn) = at.as_ref().and_then(|at| masters.get(at)) {
                conn.change(false, &[channel]).await?;
            }
        }
        Ok(())
    }
}

impl Listener for ClusterListener {
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.subscribe_all(channels))
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.unsubscribe_all(channels))
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        // Cancel safe: a release not yet taken stays in the channel. Once a
        // master's connection is gone, the listener is.
        Box::pin(async move {
            let mut notices = self.notices.lock().await;
            let mut ended = self.ended.clone();
            tokio::select! {
                biased;
                notice = notices.recv() => notice,
                _ = ended.wait_for(|gone| *gone) => None,
            }
        })
    }
}
