//! Wake-ups for waiters: a released lock is handed off at once instead of
//! after a polling delay.
//!
//! Every release reports a nonce of that release (the lock's token, or a
//! reentrant hold's own token — never the owner name, which every hold
//! shares) on a channel named after the lock key, on every node it deletes
//! the key from (Redis: the release scripts publish it; a node of your own:
//! [`Node::listen`](crate::transport::node::Node::listen)). Waiters register interest
//! in that channel; one [`Listener`] per node — shared by every waiter of
//! this client — listens. The hub counts, per channel and per node, the
//! releases that node has reported, and a waiter wakes once a quorum of
//! nodes have each reported some release since its last attempt: a single
//! release wakes it when it has reached a quorum (earlier, the holder's key
//! still stands on too many nodes), and a burst of releases — readers
//! leaving together, each node's reports arriving in a run of its own —
//! wakes it as soon as they have, however many they are. A waiter costs
//! the hub one counter per node, whatever the number of releases.
//!
//! Subscriptions are kept as state, not as a queue of requests: the hub
//! records which channels have waiters and, per node, what that node's
//! connection is subscribed to. Each node's task, when woken, sends the
//! difference in batches of at most [`MAX_BATCH`] channels per command, so a
//! register/unregister pair that cancels out between two syncs is never
//! sent, and the work per sync is bounded whatever the churn. At most
//! [`MAX_CHANNELS`] channels are tracked; a waiter beyond that is not
//! registered and polls.
//!
//! A refused round's undo deletes what the round set, and reports it like
//! any release; but the lock was never held, so it must wake nobody — not
//! the waiter whose round it was (which would try again at once: a spin
//! while nodes are quarantined), nor this client's other waiters of the
//! lock. Before the undo's calls are made, its nonce is **muted** on each
//! of its channels that has waiters ([`Hub::mute`]): each node's first
//! report of it is not counted. A channel keeps at most
//! `max(MUTED_PER_WAITER × waiters, MIN_MUTED)` muted nonces (the oldest
//! forgotten first), each for at most [`MUTE_FOR`] or until every node
//! reported it: a waiter costs at most two nonces and their per-node
//! flags. Another client's undo is not known here: it wakes the waiters,
//! whose retry then meets what the undo left of the lock.
//!
//! Notifications are a hint. A waiter counts on one only once a quorum of
//! nodes has confirmed its channel's subscription ([`Interest::listening`]);
//! until then it sleeps no longer than the retry policy allows. A frozen
//! node, a dropped subscriber connection or a holder that crashed (its keys
//! expire without a release) send nothing; waiters then wake when the
//! holder's reported TTL runs out, as they would without notifications.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use smallvec::SmallVec;

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::transport::node::Listener;

mod interest;
pub(crate) use interest::Interest;
use interest::Released;

/// How a node's listener is opened; `None` when the node reports nothing.
pub(crate) type Open =
    Box<dyn Fn() -> Option<BoxFuture<'static, Result<Box<dyn Listener>, NodeError>>> + Send + Sync>;

/// How long one subscriber connection attempt or command may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The most channels one `SUBSCRIBE` or `UNSUBSCRIBE` names.
pub(crate) const MAX_BATCH: usize = 1024;

/// How long at most an undo's reports are muted ([`Hub::mute`]): a
/// report later than that wakes waiters (a pause cut short, never more).
pub(crate) const MUTE_FOR: Duration = Duration::from_secs(5);

/// Muted nonces a channel keeps per waiter (its last undo and the one
/// before, whose reports may still be on their way)…
const MUTED_PER_WAITER: usize = 2;
/// …and at least.
const MIN_MUTED: usize = 8;

/// The most channels the hub tracks at once (those with waiters, and those
/// still being unsubscribed); a waiter past it polls.
pub(crate) const MAX_CHANNELS: usize = 65_536;

/// One channel's subscription on one node's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    No,
    Subscribing,
    Yes,
    Unsubscribing,
}

/// The channels waited on, shared by the per-node subscribers.
pub(crate) struct Hub {
    /// Per node (in the order of the client's nodes): how to open its
    /// listener.
    sources: Vec<Open>,
    /// Seeds the reconnect backoff's draws (`Builder::jitter_seed`).
    seed: Option<u64>,
    /// Node reports of one release that make it count; also the number of
    /// confirmed subscriptions a waiter needs before it relies on them.
    quorum: usize,
    channels: Mutex<HashMap<Arc<str>, Channel>>,
    /// Per node: its task's wake-up; started on first use.
    subscribers: OnceLock<Vec<Subscriber>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("nodes", &self.sources.len())
            .field("quorum", &self.quorum)
            .field("channels", &self.lock().len())
            .finish()
    }
}

#[derive(Debug)]
struct Channel {
    waiters: usize,
    /// The releases each node reported, shared with the waiters.
    released: Arc<Released>,
    /// The waiters in line, by their names in it (`w…` or `r…`): the
    /// releases that name one, per node, each its own.
    named: HashMap<Box<str>, Arc<Released>>,
    /// Per node: the subscription's state on its connection.
    subs: SmallVec<[Sub; 5]>,
    /// Undos whose reports wake nobody, oldest first ([`Hub::mute`]).
    muted: Vec<Muted>,
}

/// One refused round's undo, muted on one channel.
#[derive(Debug)]
struct Muted {
    nonce: Box<[u8]>,
    /// Per node: whether it reported the undo already (its next report of
    /// the same nonce counts).
    heard: SmallVec<[bool; 5]>,
    until: Instant,
}

impl Channel {
    fn unused(&self) -> bool {
        self.waiters == 0 && self.subs.iter().all(|s| *s == Sub::No)
    }
}

#[derive(Debug)]
struct Subscriber {
    wake: Arc<Notify>,
    task: AbortHandle,
}

impl Drop for Hub {
    fn drop(&mut self) {
        for s in self.subscribers.get().into_iter().flatten() {
            s.task.abort();
        }
    }
}

impl Hub {
    /// A hub for the nodes that `sources` open listeners on; nothing is
    /// opened until a waiter registers.
    pub(crate) fn new(sources: Vec<Open>, quorum: usize, seed: Option<u64>) -> Arc<Self> {
        Arc::new(Hub {
            sources,
            seed,
            quorum,
            channels: Mutex::default(),
            subscribers: OnceLock::new(),
        })
    }

    /// Registers a waiter on the channel of `key` (the lock key), for as long
    /// as the returned interest lives; a waiter in line gives its name in it
    /// (`me`), and a release that keeps the lock for a waiter wakes that one
    /// only. Needs a tokio runtime.
    pub(crate) fn register(self: &Arc<Self>, key: &str, me: Option<&str>) -> Interest {
        let subscribers = self.subscribers.get_or_init(|| self.start());
        let mut channels = self.lock();
        let n = self.sources.len();
        let full = channels.len() >= MAX_CHANNELS;
        let entry = match channels.get_mut(key) {
            Some(entry) => entry,
            None if full => return Interest::unregistered(),
            None => channels.entry(key.into()).or_insert_with(|| Channel {
                waiters: 0,
                released: Arc::new(Released::new(n, self.quorum)),
                named: HashMap::new(),
                subs: SmallVec::from_elem(Sub::No, n),
                muted: Vec::new(),
            }),
        };
        entry.waiters += 1;
        let released = Arc::clone(&entry.released);
        let mine = me.map(|me| {
            let mine = Arc::new(Released::new(n, self.quorum));
            entry.named.insert(me.into(), Arc::clone(&mine));
            (me.into(), mine)
        });
        if entry.waiters == 1 {
            for s in subscribers {
                s.wake.notify_one();
            }
        }
        let seen = released.snapshot();
        let seen_mine = mine.as_ref().map(|(_, m)| m.snapshot()).unwrap_or_default();
        Interest {
            registered: Some((Arc::clone(self), key.into())),
            released,
            seen,
            mine,
            seen_mine,
        }
    }

    fn unregister(&self, key: &str, me: Option<&str>) {
        let mut channels = self.lock();
        let Some(entry) = channels.get_mut(key) else {
            return;
        };
        entry.waiters -= 1;
        if let Some(me) = me {
            entry.named.remove(me);
        }
        if entry.unused() {
            channels.remove(key);
        } else if entry.waiters == 0 {
            for s in self.subscribers.get().into_iter().flatten() {
                s.wake.notify_one();
            }
        }
    }

    /// Whether `key`'s channel is subscribed on a quorum of nodes.
    fn confirmed(&self, key: &str) -> bool {
        self.lock().get(key).is_some_and(|entry| {
            entry.subs.iter().filter(|s| **s == Sub::Yes).count() >= self.quorum
        })
    }

    /// A refused round's undo is about to delete what it set under
    /// `nonce` (its token): on each of `channels` that has waiters, each
    /// node's first report of it wakes nobody, for at most [`MUTE_FOR`].
    pub(crate) fn mute(&self, channels: &[String], nonce: &str) {
        let now = Instant::now();
        let nodes = self.sources.len();
        let mut tracked = self.lock();
        for channel in channels {
            let Some(entry) = tracked.get_mut(channel.as_str()) else {
                continue;
            };
            if entry.waiters == 0 {
                continue;
            }
            entry.muted.retain(|m| m.until > now);
            let most = (entry.waiters * MUTED_PER_WAITER).max(MIN_MUTED);
            if entry.muted.len() >= most {
                entry.muted.remove(0);
            }
            entry.muted.push(Muted {
                nonce: nonce.as_bytes().into(),
                heard: SmallVec::from_elem(false, nodes),
                until: now + MUTE_FOR,
            });
        }
    }

    /// Node `node` reported a release on `channel`, named by `message`: its
    /// nonce, and after a newline whom the lock is kept for, if anyone. It
    /// counts unless it is a muted undo's first report from that node (a
    /// waiter counts nodes, not releases): for every waiter, or where it
    /// names whom the lock is kept for, for that waiter only (`r`: every
    /// reader in line).
    fn released(&self, channel: &str, message: &[u8], node: usize) {
        let (nonce, kept) = match message.iter().position(|b| *b == b'\n') {
            Some(at) => (&message[..at], Some(&message[at + 1..])),
            None => (message, None),
        };
        let mut channels = self.lock();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        if let Some(i) = entry
            .muted
            .iter()
            .position(|m| *m.nonce == *nonce && !m.heard[node])
        {
            let muted = &mut entry.muted[i];
            if muted.until > Instant::now() {
                muted.heard[node] = true;
                if muted.heard.iter().all(|h| *h) {
                    entry.muted.remove(i);
                }
                tracing::trace!(channel, node, nonce = %String::from_utf8_lossy(nonce), "undo reported, muted");
                return;
            }
            entry.muted.remove(i);
        }
        tracing::trace!(channel, node, nonce = %String::from_utf8_lossy(nonce), "release reported");
        match kept {
            None => entry.released.report(node),
            Some(b"r") => {
                for (name, mine) in &entry.named {
                    if name.starts_with('r') {
                        mine.report(node);
                    }
                }
            }
            Some(name) => {
                let name = std::str::from_utf8(name).unwrap_or_default();
                if let Some(mine) = entry.named.get(name) {
                    mine.report(node);
                }
            }
        }
    }

    /// What node `node`'s connection must change next, at most
    /// [`MAX_BATCH`] channels each way, marked as under way.
    fn next_batch(&self, node: usize) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        let mut channels = self.lock();
        let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
        for (name, entry) in channels.iter_mut() {
            let sub = &mut entry.subs[node];
            match *sub {
                Sub::No if entry.waiters > 0 && subscribe.len() < MAX_BATCH => {
                    *sub = Sub::Subscribing;
                    subscribe.push(Arc::clone(name));
                }
                Sub::Yes if entry.waiters == 0 && unsubscribe.len() < MAX_BATCH => {
                    *sub = Sub::Unsubscribing;
                    unsubscribe.push(Arc::clone(name));
                }
                _ => {}
            }
            if subscribe.len() == MAX_BATCH && unsubscribe.len() == MAX_BATCH {
                break;
            }
        }
        (subscribe, unsubscribe)
    }

    /// Node `node` confirmed a batch from [`next_batch`](Self::next_batch).
    fn confirm(&self, node: usize, subscribed: &[Arc<str>], unsubscribed: &[Arc<str>]) {
        let mut channels = self.lock();
        for name in subscribed {
            if let Some(entry) = channels.get_mut(name) {
                entry.subs[node] = Sub::Yes;
            }
        }
        for name in unsubscribed {
            if let Some(entry) = channels.get_mut(name) {
                entry.subs[node] = Sub::No;
                if entry.unused() {
                    channels.remove(name);
                }
            }
        }
    }

    /// Node `node`'s connection is new or gone: it is subscribed to nothing.
    fn reset(&self, node: usize) {
        let mut channels = self.lock();
        channels.retain(|_, entry| {
            entry.subs[node] = Sub::No;
            !entry.unused()
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(self: &Arc<Self>) -> Vec<Subscriber> {
        (0..self.sources.len())
            .map(|node| {
                let wake = Arc::new(Notify::new());
                let hub = Arc::downgrade(self);
                let rng = match self.seed {
                    Some(seed) => StdRng::seed_from_u64(seed ^ node as u64),
                    None => rand::make_rng(),
                };
                let task = tokio::spawn(subscribe_loop(node, hub, wake.clone(), rng));
                Subscriber {
                    wake,
                    task: task.abort_handle(),
                }
            })
            .collect()
    }
}

/// One node's subscriber: opens its listener (again, with backoff, when it
/// is lost), keeps its subscriptions equal to the channels with waiters, and
/// forwards releases.
async fn subscribe_loop(node: usize, hub: Weak<Hub>, wake: Arc<Notify>, mut rng: StdRng) {
    let mut backoff = BACKOFF_MIN;
    let mut first = true;
    loop {
        if !first {
            // Full jitter spreads the reconnects of many clients.
            let nanos = rng.random_range(0..=backoff.as_nanos() as u64);
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        first = false;
        let opening = {
            let Some(h) = hub.upgrade() else { return };
            let Some(opening) = (h.sources[node])() else {
                return; // this node reports nothing
            };
            opening
        };
        let Ok(Ok(listener)) = tokio::time::timeout(CONNECT_TIMEOUT, opening).await else {
            continue;
        };
        backoff = BACKOFF_MIN;
        // Sync until the connection fails.
        loop {
            let Some(h) = hub.upgrade() else { return };
            let (subscribe, unsubscribe) = h.next_batch(node);
            drop(h);
            if subscribe.is_empty() && unsubscribe.is_empty() {
                tokio::select! {
                    biased;
                    () = wake.notified() => continue,
                    notice = listener.next() => {
                        let Some(notice) = notice else { break };
                        let Some(hub) = hub.upgrade() else { return };
                        hub.released(&notice.channel, &notice.nonce, node);
                        continue;
                    }
                }
            }
            let send = async {
                if !subscribe.is_empty() {
                    let names: Vec<&str> = subscribe.iter().map(|c| &**c).collect();
                    listener.subscribe(&names).await?;
                }
                if !unsubscribe.is_empty() {
                    let names: Vec<&str> = unsubscribe.iter().map(|c| &**c).collect();
                    listener.unsubscribe(&names).await?;
                }
                Ok::<(), NodeError>(())
            };
            let send = tokio::time::timeout(CONNECT_TIMEOUT, send);
            tokio::pin!(send);
            // Releases keep arriving while the batch is confirmed.
            let sent = loop {
                tokio::select! {
                    biased;
                    sent = &mut send => break matches!(sent, Ok(Ok(()))),
                    notice = listener.next() => {
                        let Some(notice) = notice else { break false };
                        let Some(hub) = hub.upgrade() else { return };
                        hub.released(&notice.channel, &notice.nonce, node);
                    }
                }
            };
            let Some(h) = hub.upgrade() else { return };
            if !sent {
                break;
            }
            h.confirm(node, &subscribe, &unsubscribe);
        }
        let Some(h) = hub.upgrade() else { return };
        h.reset(node);
    }
}

#[cfg(test)]
mod tests;
