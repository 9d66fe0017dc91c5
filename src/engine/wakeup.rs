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
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::transport::node::Listener;

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

/// The releases reported on one channel, per node, and the waiters'
/// wake-up.
#[derive(Debug)]
struct Released {
    /// Per node: how many releases it has reported on the channel.
    reported: Box<[AtomicU64]>,
    /// Nodes that must have reported since a waiter's last attempt.
    quorum: usize,
    notify: Notify,
}

impl Released {
    fn new(nodes: usize, quorum: usize) -> Self {
        Released {
            reported: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            quorum,
            notify: Notify::new(),
        }
    }

    fn snapshot(&self) -> SmallVec<[u64; 5]> {
        self.reported
            .iter()
            .map(|n| n.load(Ordering::Acquire))
            .collect()
    }

    /// Node `node` reported a release: its waiters check their quorum.
    /// Woken in the order they started waiting (a `watch` would wake them
    /// in a random order, which a seeded simulation could not replay).
    fn report(&self, node: usize) {
        self.reported[node].fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// The nodes whose count passed `seen`'s.
    fn advanced<'a>(&'a self, seen: &'a [u64]) -> impl Iterator<Item = bool> + 'a {
        self.reported
            .iter()
            .zip(seen)
            .map(|(now, seen)| now.load(Ordering::Acquire) > *seen)
    }
}

/// A waiter's registration on one channel; unregisters when dropped.
#[derive(Debug)]
pub(crate) struct Interest {
    /// `None` when the hub was full: no wake-up will come.
    registered: Option<(Arc<Hub>, Arc<str>)>,
    released: Arc<Released>,
    /// Per node: the releases it had reported when last marked seen.
    seen: SmallVec<[u64; 5]>,
    /// A waiter in line: its name, and the releases that named it.
    mine: Option<(Box<str>, Arc<Released>)>,
    seen_mine: SmallVec<[u64; 5]>,
}

impl Interest {
    fn unregistered() -> Self {
        Interest {
            registered: None,
            released: Arc::new(Released::new(0, 1)),
            seen: SmallVec::new(),
            mine: None,
            seen_mine: SmallVec::new(),
        }
    }

    /// Forgets releases seen so far: call before each attempt.
    pub(crate) fn mark_seen(&mut self) {
        self.seen = self.released.snapshot();
        if let Some((_, mine)) = &self.mine {
            self.seen_mine = mine.snapshot();
        }
    }

    /// Resolves at the first release since [`mark_seen`](Self::mark_seen):
    /// `true` when a quorum of nodes named this waiter (the lock is kept for
    /// it), `false` for releases that named no one.
    pub(crate) async fn released(&mut self) -> bool {
        if self.registered.is_none() {
            std::future::pending::<()>().await;
        }
        loop {
            let notified = self.released.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let named = self.mine.as_ref().map(|(_, mine)| mine.notify.notified());
            let mut named = std::pin::pin!(named);
            if let Some(named) = named.as_mut().as_pin_mut() {
                named.enable();
            }
            if let Some(for_me) = self.has_changed() {
                return for_me;
            }
            match named.as_pin_mut() {
                Some(named) => {
                    tokio::select! {
                        biased;
                        () = notified => {}
                        () = named => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Whether a quorum of nodes have each reported, since
    /// [`mark_seen`](Self::mark_seen), a release that named no one or named
    /// this waiter: `Some(true)` when the nodes that named it alone make a
    /// quorum.
    fn has_changed(&self) -> Option<bool> {
        let any = self.released.advanced(&self.seen);
        let (count, mine) = match &self.mine {
            Some((_, mine)) => {
                let named: SmallVec<[bool; 5]> = mine.advanced(&self.seen_mine).collect();
                let count = any.zip(&named).filter(|(a, n)| *a || **n).count();
                (count, named.iter().filter(|n| **n).count())
            }
            None => (any.filter(|a| *a).count(), 0),
        };
        (count >= self.released.quorum).then_some(mine >= self.released.quorum)
    }

    /// Whether a wake-up can be counted on: the channel is subscribed on a
    /// quorum of nodes.
    pub(crate) fn listening(&self) -> bool {
        self.registered
            .as_ref()
            .is_some_and(|(hub, key)| hub.confirmed(key))
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if let Some((hub, key)) = &self.registered {
            hub.unregister(key, self.mine.as_ref().map(|(me, _)| &**me));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that reports nothing: its subscriber never connects, so the
    /// test alone drives the hub's state.
    fn deaf() -> Open {
        Box::new(|| None)
    }

    fn hub() -> Arc<Hub> {
        Hub::new(vec![deaf()], 1, None)
    }

    #[tokio::test]
    async fn channels_are_bounded_and_a_waiter_past_the_bound_polls() {
        let hub = hub();
        let held: Vec<Interest> = (0..MAX_CHANNELS)
            .map(|i| hub.register(&format!("{{r{i}}}:lock"), None))
            .collect();
        assert!(held.iter().all(|i| i.registered.is_some()));
        let past = hub.register("{one-more}:lock", None);
        assert!(past.registered.is_none(), "registered past the bound");
        assert!(!past.listening());
        // A waiter on a channel already tracked still registers.
        let again = hub.register("{r0}:lock", None);
        assert!(again.registered.is_some());
        assert_eq!(hub.lock().len(), MAX_CHANNELS);
        drop(held);
        drop(again);
        // Never subscribed anywhere: gone as soon as their waiters are.
        assert_eq!(hub.lock().len(), 0);
    }

    #[tokio::test]
    async fn a_sync_names_at_most_a_batch_and_pairs_that_cancel_are_never_sent() {
        let hub = hub();
        // Registered and gone before any sync: nothing to send.
        drop(hub.register("{gone}:lock", None));
        assert_eq!(hub.next_batch(0), (vec![], vec![]));
        let held: Vec<Interest> = (0..MAX_BATCH + 10)
            .map(|i| hub.register(&format!("{{r{i}}}:lock"), None))
            .collect();
        let (subscribe, unsubscribe) = hub.next_batch(0);
        assert_eq!(subscribe.len(), MAX_BATCH);
        assert!(unsubscribe.is_empty());
        hub.confirm(0, &subscribe, &[]);
        let (rest, _) = hub.next_batch(0);
        assert_eq!(rest.len(), 10);
        hub.confirm(0, &rest, &[]);
        assert!(held.iter().all(Interest::listening));
        // Waiters gone: the next sync unsubscribes, in batches too.
        drop(held);
        let (subscribe, unsubscribe) = hub.next_batch(0);
        assert!(subscribe.is_empty());
        assert_eq!(unsubscribe.len(), MAX_BATCH);
        hub.confirm(0, &[], &unsubscribe);
        let (_, rest) = hub.next_batch(0);
        hub.confirm(0, &[], &rest);
        assert_eq!(hub.lock().len(), 0, "entries left after unsubscribing");
    }

    #[tokio::test]
    async fn a_release_wakes_the_waiter_at_its_quorum() {
        let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
        let mut waiter = hub.register("{r}:lock", None);
        waiter.mark_seen();
        hub.released("{r}:lock", b"n1", 0);
        assert!(waiter.has_changed().is_none(), "woken before a quorum");
        hub.released("{r}:lock", b"n1", 1);
        hub.released("{r}:lock", b"n1", 2);
        assert!(waiter.has_changed().is_some());
        waiter.mark_seen();
        // A release reported before the last attempt counts no more.
        assert!(waiter.has_changed().is_none());
        hub.released("{r}:lock", b"n2", 0);
        hub.released("{r}:lock", b"n2", 2);
        assert!(
            waiter.has_changed().is_some(),
            "a second release woke nobody"
        );
    }

    /// An undo's reports wake nobody, each node's first one; a release
    /// of another nonce does, and a second report of the muted nonce from
    /// a node (another release of it) counts.
    #[tokio::test]
    async fn an_undo_wakes_nobody() {
        let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
        let mut waiter = hub.register("{r}:lock", None);
        let mut other = hub.register("{r}:lock", None);
        waiter.mark_seen();
        other.mark_seen();
        hub.mute(&["{r}:lock".into(), "{r}:fence".into()], "undone");
        for node in 0..3 {
            hub.released("{r}:lock", b"undone", node);
        }
        assert!(waiter.has_changed().is_none(), "woken by an undo");
        assert!(
            other.has_changed().is_none(),
            "another waiter woken by an undo"
        );
        // Heard from every node: forgotten.
        assert!(hub.lock()["{r}:lock"].muted.is_empty());
        hub.released("{r}:lock", b"held", 0);
        hub.released("{r}:lock", b"held", 1);
        assert!(waiter.has_changed().is_some(), "a release woke nobody");
        // Bounded per channel, whatever the undos.
        for i in 0..100 {
            hub.mute(&["{r}:lock".into()], &format!("u{i}"));
        }
        assert_eq!(hub.lock()["{r}:lock"].muted.len(), MIN_MUTED);
        // A channel nobody waits on mutes nothing.
        hub.mute(&["{s}:lock".into()], "u");
        assert!(!hub.lock().contains_key("{s}:lock"));
    }

    /// A muted undo heard only after [`MUTE_FOR`] counts.
    #[tokio::test(start_paused = true)]
    async fn a_mute_is_bounded_in_time() {
        let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
        let mut waiter = hub.register("{r}:lock", None);
        waiter.mark_seen();
        hub.mute(&["{r}:lock".into()], "late");
        tokio::time::sleep(MUTE_FOR).await;
        hub.released("{r}:lock", b"late", 0);
        hub.released("{r}:lock", b"late", 1);
        assert!(waiter.has_changed().is_some());
        assert!(hub.lock()["{r}:lock"].muted.is_empty());
    }

    /// Readers release together: their reports reach the nodes
    /// interleaved, and a waiter wakes once a quorum of nodes has each
    /// reported something since its last attempt (before that, no new round
    /// can find a quorum of them free).
    #[tokio::test]
    async fn interleaved_releases_wake_once_a_quorum_of_nodes_reported() {
        let hub = Hub::new(vec![deaf(), deaf(), deaf(), deaf(), deaf()], 3, None);
        let mut waiter = hub.register("{r}:writer", None);
        waiter.mark_seen();
        for node in 0..2 {
            hub.released("{r}:writer", b"a", node);
            hub.released("{r}:writer", b"b", node);
        }
        assert!(waiter.has_changed().is_none(), "woken before a quorum");
        hub.released("{r}:writer", b"a", 2);
        assert!(
            waiter.has_changed().is_some(),
            "three nodes reported: no wake-up"
        );
        waiter.mark_seen();
        hub.released("{r}:writer", b"a", 3);
        hub.released("{r}:writer", b"b", 4);
        assert!(
            waiter.has_changed().is_none(),
            "two nodes since the attempt woke it"
        );
        hub.released("{r}:writer", b"b", 2);
        assert!(
            waiter.has_changed().is_some(),
            "three nodes since the attempt: no wake-up"
        );
    }

    /// However many releases come, and in whatever bursts, a waiter wakes
    /// once a quorum of nodes has reported one: each node's reports
    /// arrive in a run of their own (its subscriber reads them in turn).
    #[tokio::test]
    async fn a_burst_of_any_size_wakes_the_waiter_at_the_quorum() {
        for burst in [1_u32, 8, 9, 64, 1000] {
            let hub = Hub::new(vec![deaf(), deaf(), deaf(), deaf(), deaf()], 3, None);
            let mut waiter = hub.register("{r}:writer", None);
            waiter.mark_seen();
            for node in 0..3 {
                assert!(
                    waiter.has_changed().is_none(),
                    "{burst}: woken before node {node}"
                );
                for i in 0..burst {
                    hub.released("{r}:writer", &i.to_be_bytes(), node);
                }
            }
            assert!(
                waiter.has_changed().is_some(),
                "a burst of {burst} woke nobody"
            );
        }
    }

    /// A release that keeps the lock for one waiter wakes that waiter only,
    /// at a quorum of nodes naming it; one for the readers wakes every
    /// reader; one that names no one wakes everyone.
    #[tokio::test]
    async fn a_release_wakes_the_one_waiter_it_kept_the_lock_for() {
        let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
        let mut head = hub.register("{r}:lock", Some("w300:head"));
        let mut next = hub.register("{r}:lock", Some("w300:next"));
        let mut reader = hub.register("{r}:lock", Some("r300:reader"));
        for w in [&mut head, &mut next, &mut reader] {
            w.mark_seen();
        }
        hub.released("{r}:lock", b"t1\nw300:head", 0);
        assert_eq!(head.has_changed(), None, "woken before a quorum");
        hub.released("{r}:lock", b"t1\nw300:head", 1);
        assert_eq!(head.has_changed(), Some(true));
        assert_eq!(next.has_changed(), None, "a waiter woken for another");
        assert_eq!(reader.has_changed(), None);
        hub.released("{r}:lock", b"t2\nr", 0);
        hub.released("{r}:lock", b"t2\nr", 2);
        assert_eq!(reader.has_changed(), Some(true));
        assert_eq!(next.has_changed(), None, "a writer woken for the readers");
        // A node that named the head and one that named no one: a quorum
        // of releases for `head`, not all of them its own.
        head.mark_seen();
        hub.released("{r}:lock", b"t3\nw300:head", 0);
        hub.released("{r}:lock", b"t3", 1);
        assert_eq!(head.has_changed(), Some(false));
        assert_eq!(next.has_changed(), None, "one node woke `next`");
        hub.released("{r}:lock", b"t3", 2);
        assert_eq!(next.has_changed(), Some(false));
        // Gone with its waiter.
        drop(head);
        assert!(!hub.lock()["{r}:lock"].named.contains_key("w300:head"));
    }
}
