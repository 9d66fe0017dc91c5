//! In-memory lock nodes (feature `testing`), for your tests and examples: a
//! [`Redlock`] over them behaves as over Redis masters, without Redis.
//!
//! A [`MemoryNode`] has the semantics of redquorum's Redis scripts for every
//! operation. Like a Redis connection, it applies operations strictly in
//! the order they were sent, even when the caller has stopped waiting for
//! the reply; a [frozen](MemoryNode::freeze) node holds every operation back
//! until [thawed](MemoryNode::thaw), then applies the queue in order (a
//! SIGSTOPped Redis). Keys expire by tokio's clock, so a test on a paused
//! runtime controls time. It reports no releases (`Node::listen`, waiters
//! poll) unless told to ([`MemoryNode::report_releases`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! use std::time::Duration;
//! use redquorum::testing::{self, MemoryNode};
//!
//! let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
//! let redlock = testing::redlock_over(&nodes).await;
//! nodes[0].freeze(); // a minority frozen: locks go on
//! let lock = redlock.try_lock("orders:42", Duration::from_secs(10)).await?;
//! assert_eq!(nodes[1].holder("{orders:42}:lock").as_deref(), Some(lock.token()));
//! lock.release().await?;
//! nodes[0].thaw();
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::api::redlock::Redlock;
use crate::proto::error::NodeError;
use crate::proto::op::{Op, Reply};
use crate::transport::node::{Listener, Node, Notice};

// Reached from outside through `internals` only (this repository's tests).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub(crate) mod owned;
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub(crate) mod redis;
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub(crate) mod store;

use owned::OwnedOp;
use store::Store;

/// A client over `n` new in-memory nodes (`memory://0` …), with default
/// settings. Needs a tokio runtime.
///
/// # Cancel safety
///
/// Dropping this future leaves nothing behind: the nodes are in memory.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let redlock = redquorum::testing::redlock(5).await;
/// assert_eq!(redlock.nodes().quorum(), 3);
/// # }
/// ```
pub async fn redlock(n: usize) -> Redlock {
    let nodes: Vec<Arc<MemoryNode>> = (0..n).map(MemoryNode::new).collect();
    redlock_over(&nodes).await
}

/// A client over `nodes`, with default settings (see the
/// [module example](self)).
///
/// # Cancel safety
///
/// Dropping this future leaves nothing behind: the nodes are in memory.
pub async fn redlock_over(nodes: &[Arc<MemoryNode>]) -> Redlock {
    Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| Arc::clone(n) as Arc<dyn Node>))
        .build()
        .await
        .expect("in-memory nodes always build")
}

/// One in-memory lock node; see the [module docs](self).
#[derive(Debug)]
pub struct MemoryNode {
    name: Arc<str>,
    queue: mpsc::UnboundedSender<(OwnedOp, oneshot::Sender<Result<Reply, NodeError>>)>,
    gate: watch::Sender<bool>,
    store: Arc<Mutex<Store>>,
    /// Reports itself quarantined ([`Node::quarantined`]).
    quarantined: std::sync::atomic::AtomicBool,
    /// Bumped after every applied operation, so tests can wait for state.
    applied: watch::Sender<u64>,
    /// Whether it opens listeners ([`report_releases`](Self::report_releases)).
    reports: std::sync::atomic::AtomicBool,
    /// Its open listeners: what each is subscribed to, where its notices go.
    taps: Arc<Mutex<Vec<Tap>>>,
}

/// One open listener of an in-memory node, as the node sees it.
#[derive(Debug)]
struct Tap {
    channels: Arc<Mutex<std::collections::HashSet<String>>>,
    notices: mpsc::Sender<Notice>,
}

/// The most notices an in-memory listener holds unread; past it a notice
/// is dropped, as a hint may be (its waiter comes back within its
/// patience all the same).
const MAX_NOTICES: usize = 1024;

/// A listener on an in-memory node ([`MemoryNode::report_releases`]).
struct MemoryListener {
    channels: Arc<Mutex<std::collections::HashSet<String>>>,
    notices: tokio::sync::Mutex<mpsc::Receiver<Notice>>,
}

impl Listener for MemoryListener {
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        let mut set = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        set.extend(channels.iter().map(|c| (*c).to_owned()));
        Box::pin(std::future::ready(Ok(())))
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        let mut set = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        for c in channels {
            set.remove(*c);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        // `recv` is cancel safe: a dropped call loses no notice.
        Box::pin(async move { self.notices.lock().await.recv().await })
    }
}

/// The in-memory nodes' clock: milliseconds since the first node was made,
/// by tokio's clock.
fn clock_ms(at: Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    at.saturating_duration_since(epoch).as_millis() as u64
}

fn now_ms() -> u64 {
    clock_ms(Instant::now())
}

impl MemoryNode {
    /// Node `i` of a set, named `memory://i`. Needs a tokio runtime (it
    /// spawns its queue).
    pub fn new(i: usize) -> Arc<Self> {
        Self::named(&format!("memory://{i}"))
    }

    /// A node named `name` (in logs, votes and metric labels). Needs a
    /// tokio runtime.
    pub fn named(name: &str) -> Arc<Self> {
        now_ms(); // the epoch is at or before every key
        let (queue, mut rx) =
            mpsc::unbounded_channel::<(OwnedOp, oneshot::Sender<Result<Reply, NodeError>>)>();
        let (gate, _) = watch::channel(true);
        let (applied, _) = watch::channel(0u64);
        let store: Arc<Mutex<Store>> = Arc::default();
        let taps: Arc<Mutex<Vec<Tap>>> = Arc::default();
        let node = Arc::new(MemoryNode {
            name: name.into(),
            queue,
            gate: gate.clone(),
            store: store.clone(),
            quarantined: std::sync::atomic::AtomicBool::new(false),
            applied: applied.clone(),
            reports: std::sync::atomic::AtomicBool::new(false),
            taps: Arc::clone(&taps),
        });
        let mut gate_rx = gate.subscribe();
        tokio::spawn(async move {
            while let Some((op, reply)) = rx.recv().await {
                if gate_rx.wait_for(|open| *open).await.is_err() {
                    return;
                }
                let answer = {
                    let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
                    let answer = store.apply(op.op(), now_ms());
                    // To the listeners subscribed to their channels, if any.
                    let published = store.take_published();
                    if !published.is_empty() {
                        let mut taps = taps.lock().unwrap_or_else(PoisonError::into_inner);
                        taps.retain(|tap| !tap.notices.is_closed());
                        for notice in published {
                            for tap in taps.iter() {
                                let on = tap
                                    .channels
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .contains(&notice.channel);
                                if on {
                                    let _ = tap.notices.try_send(notice.clone());
                                }
                            }
                        }
                    }
                    answer
                };
                applied.send_modify(|n| *n += 1);
                let _ = reply.send(answer);
            }
        });
        node
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds every operation back until [`thaw`](Self::thaw), as a
    /// SIGSTOPped server would; keys keep expiring meanwhile.
    pub fn freeze(&self) {
        self.gate.send_replace(false);
    }

    /// Applies the operations held back, in order, and every later one.
    pub fn thaw(&self) {
        self.gate.send_replace(true);
    }

    /// Forgets every key now, as a node restarted without persistence
    /// would (operations held back by [`freeze`](Self::freeze) still apply
    /// after).
    pub fn wipe(&self) {
        self.store().clear();
    }

    /// Reports the node quarantined, or no longer
    /// ([`Node::quarantined`]): its yes then counts toward no new grant, as
    /// a Redis node's that restarted without persistence within the
    /// longest TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use redquorum::{Answer, LockError, testing::{self, MemoryNode}};
    /// let nodes: Vec<_> = (0..3).map(MemoryNode::new).collect();
    /// let redlock = testing::redlock_over(&nodes).await;
    /// nodes[0].quarantine(true);
    /// nodes[1].quarantine(true);
    /// let refused = redlock.try_lock("job", Duration::from_secs(5)).await.unwrap_err();
    /// let votes = refused.votes().unwrap();
    /// assert_eq!(votes.count(|a| *a == Answer::Quarantined), 2);
    /// # }
    /// ```
    pub fn quarantine(&self, on: bool) {
        self.quarantined
            .store(on, std::sync::atomic::Ordering::Release);
    }

    /// Reports releases to listeners ([`Node::listen`]), as a Redis node's
    /// release scripts publish them, or no longer: waiters of a client over
    /// it then wake on a release instead of polling. Off by default; a
    /// client opens its listeners when its first waiter waits, so turn it on
    /// before that.
    pub fn report_releases(&self, on: bool) {
        self.reports.store(on, std::sync::atomic::Ordering::Release);
        if !on {
            self.taps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }

    /// The token (or reentrant owner) under `key`, if it is set and not
    /// expired.
    pub fn holder(&self, key: &str) -> Option<String> {
        self.store().holder(key, now_ms()).map(str::to_owned)
    }

    /// How many live readers the readers key `key` of a read/write lock
    /// counts ([`KeyLayout::rw_keys`](crate::KeyLayout::rw_keys)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// use redquorum::testing::{self, MemoryNode};
    /// let nodes: Vec<_> = (0..3).map(MemoryNode::new).collect();
    /// let redlock = testing::redlock_over(&nodes).await;
    /// let reader = redquorum::RwLock::new(&redlock, "doc")?.read(Duration::from_secs(5)).await?;
    /// assert_eq!(nodes[0].readers("{doc}:readers"), 1);
    /// reader.release().await?;
    /// assert_eq!(nodes[0].readers("{doc}:readers"), 0);
    /// # Ok(()) }
    /// ```
    pub fn readers(&self, key: &str) -> usize {
        self.store().readers(key, now_ms())
    }

    /// How many holds the reentrant owner of `key` has counted (0: none).
    pub fn holds(&self, key: &str) -> usize {
        self.store().holds(key, now_ms()).len()
    }

    /// Sets a fencing counter, as `SET {R}:fence n` would.
    pub fn set_counter(&self, fence_key: &str, n: u64) {
        self.store().set_text(fence_key, &n.to_string());
    }

    /// How many keys with a time to live the node holds now: every key a
    /// lock, permit, read/write hold or leadership sets (fencing counters
    /// have none and are not counted).
    pub fn live_keys(&self) -> usize {
        self.store().live_keys(now_ms())
    }

    /// How many live waiters the line `line_key` holds (fair waiting: a
    /// lock's line, `{R}:line`; a semaphore's, `{name}:permits:line`).
    pub fn waiting(&self, line_key: &str) -> usize {
        self.store().waiting(line_key, now_ms())
    }

    /// How many operations the node has applied so far.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Resolves once `f` holds of this node, checked now and after every
    /// operation it applies. Bound it with `tokio::time::timeout`.
    ///
    /// # Cancel safety
    ///
    /// It only reads the node: dropping this future changes nothing.
    pub async fn wait_until(&self, f: impl Fn(&Self) -> bool) {
        let mut applied = self.applied.subscribe();
        while !f(self) {
            if applied.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

impl Node for MemoryNode {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>> {
        // Queued at call time, as a multiplexed connection writes at once.
        let (tx, rx) = oneshot::channel();
        let sent = self.queue.send((OwnedOp::new(op), tx));
        Box::pin(async move {
            sent.map_err(|_| NodeError::Connection("node stopped".into()))?;
            rx.await
                .map_err(|_| NodeError::Connection("node stopped".into()))?
        })
    }

    fn quarantined(&self) -> bool {
        self.quarantined.load(std::sync::atomic::Ordering::Acquire)
    }

    fn listen(&self) -> Option<BoxFuture<'static, Result<Box<dyn Listener>, NodeError>>> {
        if !self.reports.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let channels: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
        let (tx, rx) = mpsc::channel(MAX_NOTICES);
        self.taps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Tap {
                channels: Arc::clone(&channels),
                notices: tx,
            });
        let listener: Box<dyn Listener> = Box::new(MemoryListener {
            channels,
            notices: tokio::sync::Mutex::new(rx),
        });
        Some(Box::pin(std::future::ready(Ok(listener))))
    }
}
