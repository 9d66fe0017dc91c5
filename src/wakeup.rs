//! Wake-ups for waiters: a released lock is handed off at once instead of
//! after a polling delay.
//!
//! Every release script publishes the released token on a channel named
//! after the lock key, on every node it deletes the key from. Waiters
//! register interest in that channel; one subscriber connection per node —
//! shared by every waiter of this client — listens. A release wakes each
//! waiter once, when a quorum of nodes has reported it: only then can a new
//! round win (earlier, the holder's key still stands on too many nodes), and
//! a release costs every waiter at most one round.
//!
//! Notifications are a hint. A frozen node, a dropped subscriber connection
//! or a holder that crashed (its keys expire without a release) send
//! nothing; waiters then wake when the holder's reported TTL runs out, as
//! they would without notifications.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use rand::RngExt;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

/// How long one subscriber connection attempt or command may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The channels waited on, shared by the per-node subscribers.
#[derive(Debug)]
pub(crate) struct Hub {
    clients: Vec<redis::Client>,
    /// Node reports of one release that make it count.
    quorum: usize,
    channels: Mutex<HashMap<Arc<str>, Channel>>,
    /// Per node: where to send (un)subscribe requests; started on first use.
    subscribers: OnceLock<Vec<Subscriber>>,
    /// Subscriber connections currently up.
    connected: AtomicUsize,
}

#[derive(Debug)]
struct Channel {
    waiters: usize,
    /// Bumped once per release, when a quorum of nodes has reported it.
    released: watch::Sender<u64>,
    /// The release being reported, and by which nodes.
    token: Vec<u8>,
    reported: Vec<bool>,
}

#[derive(Debug)]
struct Subscriber {
    requests: mpsc::UnboundedSender<Request>,
    task: AbortHandle,
}

#[derive(Debug)]
enum Request {
    Subscribe(Arc<str>),
    Unsubscribe(Arc<str>),
}

impl Drop for Hub {
    fn drop(&mut self) {
        for s in self.subscribers.get().into_iter().flatten() {
            s.task.abort();
        }
    }
}

impl Hub {
    /// A hub for the Redis nodes behind `clients`; no connection is opened
    /// until a waiter registers.
    pub(crate) fn new(clients: Vec<redis::Client>, quorum: usize) -> Arc<Self> {
        Arc::new(Hub {
            clients,
            quorum,
            channels: Mutex::default(),
            subscribers: OnceLock::new(),
            connected: AtomicUsize::new(0),
        })
    }

    /// Whether any subscriber connection is up: if none is, a waiter must
    /// not count on being woken.
    pub(crate) fn listening(&self) -> bool {
        self.connected.load(Ordering::Relaxed) > 0
    }

    /// Registers a waiter on the channel of `key` (the lock key), for as long
    /// as the returned interest lives. Needs a tokio runtime.
    pub(crate) fn register(self: &Arc<Self>, key: &str) -> Interest {
        let subscribers = self.subscribers.get_or_init(|| self.start());
        let mut channels = self.lock_channels();
        let channel: Arc<str> = key.into();
        let entry = channels
            .entry(Arc::clone(&channel))
            .or_insert_with(|| Channel {
                waiters: 0,
                released: watch::channel(0).0,
                token: Vec::new(),
                reported: vec![false; self.clients.len()],
            });
        entry.waiters += 1;
        if entry.waiters == 1 {
            for s in subscribers {
                let _ = s.requests.send(Request::Subscribe(Arc::clone(&channel)));
            }
        }
        Interest {
            released: entry.released.subscribe(),
            hub: Arc::clone(self),
            channel,
        }
    }

    fn unregister(&self, channel: &Arc<str>) {
        let mut channels = self.lock_channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        entry.waiters -= 1;
        if entry.waiters == 0 {
            channels.remove(channel);
            for s in self.subscribers.get().into_iter().flatten() {
                let _ = s.requests.send(Request::Unsubscribe(Arc::clone(channel)));
            }
        }
    }

    /// Node `node` published a release of `token` on `channel`.
    fn released(&self, channel: &str, token: &[u8], node: usize) {
        let mut channels = self.lock_channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        if entry.token != token {
            entry.token = token.to_vec();
            entry.reported.fill(false);
        }
        if !std::mem::replace(&mut entry.reported[node], true)
            && entry.reported.iter().filter(|r| **r).count() == self.quorum
        {
            entry.released.send_modify(|n| *n += 1);
        }
    }

    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(self: &Arc<Self>) -> Vec<Subscriber> {
        self.clients
            .iter()
            .enumerate()
            .map(|(node, client)| {
                let (requests, rx) = mpsc::unbounded_channel();
                let hub = Arc::downgrade(self);
                let task = tokio::spawn(subscribe_loop(client.clone(), node, hub, rx));
                Subscriber {
                    requests,
                    task: task.abort_handle(),
                }
            })
            .collect()
    }

    fn channel_names(&self) -> Vec<Arc<str>> {
        self.lock_channels().keys().cloned().collect()
    }
}

/// One node's subscriber: connects (and reconnects, with backoff),
/// subscribes to every channel with waiters, and forwards releases.
async fn subscribe_loop(
    client: redis::Client,
    node: usize,
    hub: Weak<Hub>,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let mut backoff = Duration::from_millis(10);
    let mut first = true;
    loop {
        if !first {
            // Full jitter spreads the reconnects of many clients.
            let nanos = rand::rng().random_range(0..=backoff.as_nanos() as u64);
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        first = false;
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            continue;
        };
        let (mut sink, mut stream) = pubsub.split();
        // Requests queued while disconnected are covered by this snapshot.
        while requests.try_recv().is_ok() {}
        let Some(names) = hub.upgrade().map(|hub| hub.channel_names()) else {
            return;
        };
        let mut ok = true;
        for name in names {
            ok &= matches!(
                tokio::time::timeout(CONNECT_TIMEOUT, sink.subscribe(&*name)).await,
                Ok(Ok(()))
            );
        }
        if !ok {
            continue;
        }
        backoff = Duration::from_millis(10);
        let Some(h) = hub.upgrade() else { return };
        h.connected.fetch_add(1, Ordering::Relaxed);
        drop(h);
        loop {
            tokio::select! {
                request = requests.recv() => {
                    let sent = match request {
                        None => return,
                        Some(Request::Subscribe(c)) => sink.subscribe(&*c).await,
                        Some(Request::Unsubscribe(c)) => sink.unsubscribe(&*c).await,
                    };
                    if sent.is_err() {
                        break;
                    }
                }
                message = stream.next() => {
                    let Some(message) = message else { break };
                    let Some(hub) = hub.upgrade() else { return };
                    hub.released(message.get_channel_name(), message.get_payload_bytes(), node);
                }
            }
        }
        if let Some(hub) = hub.upgrade() {
            hub.connected.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A waiter's registration on one channel; unregisters when dropped.
#[derive(Debug)]
pub(crate) struct Interest {
    hub: Arc<Hub>,
    channel: Arc<str>,
    released: watch::Receiver<u64>,
}

impl Interest {
    /// Forgets releases seen so far: call before each attempt.
    pub(crate) fn mark_seen(&mut self) {
        self.released.borrow_and_update();
    }

    /// Resolves at the first release since [`mark_seen`](Self::mark_seen).
    pub(crate) async fn released(&mut self) {
        if self.released.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether a wake-up can be expected at all.
    pub(crate) fn listening(&self) -> bool {
        self.hub.listening()
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        self.hub.unregister(&self.channel);
    }
}
