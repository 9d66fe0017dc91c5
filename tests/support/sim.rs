//! Simulated lock nodes for deterministic schedules on virtual time.
//!
//! A schedule runs on a current-thread tokio runtime with a paused clock, so
//! `tokio::time::Instant` is the simulation's *true time* and every delay is
//! virtual. All randomness comes from one seeded [`StdRng`] per schedule
//! ([`World`]); with tokio's deterministic current-thread scheduler, the same
//! seed replays the same schedule.
//!
//! The model, as close to a Redis master behind a multiplexed connection as
//! matters to Redlock:
//!
//! - A [`SimNode`] holds keys with an expiry in true time. Its clock runs at
//!   `rate` (1.0 = true time): a TTL of `t` ms lasts `(t − 1) / rate` ms of
//!   true time — a fast clock expires keys early, and the `− 1` is Redis'
//!   1 ms expiry precision, taken adversarially.
//! - A [`SimLink`] is one client's connection to one node, and implements the
//!   public [`Node`] trait. Every message (request and reply) gets a random
//!   delay, but a link never reorders: a message is delivered at
//!   `max(previous delivery on this link, now + delay)`. A request is on the
//!   wire as soon as `call` is made, so dropping the reply future does not
//!   unsend it (the coordinator relies on a release queued behind an acquire).
//! - A reply may be lost: the operation is applied, the reply never arrives.
//! - A frozen node (SIGSTOP) holds every request until thawed, then applies
//!   them in order. Keys keep expiring by the clock meanwhile.
//! - A crashed node drops every request not yet applied (the connection is
//!   reset: the caller gets `Connection`), refuses calls while down
//!   (`NotConnected`), and comes back with its keys (AOF with `appendfsync
//!   always`) or, for a negative control, without them.
//!
//! - Read/write locks keep, per resource, a writer key (a plain lock key),
//!   a readers set (each reader's token with its own expiry, on the node's
//!   clock; the set's key lives until its last reader) and a writer-intent
//!   key, with the semantics of the read/write scripts
//!   (`src/scripts/acquire_read.lua` and the others).
//! - A node reports every release that deletes a key (as Redis' release
//!   scripts publish it), and every reader it removes (on the writer key's
//!   channel), to the listeners ([`Node::listen`]) subscribed to
//!   the key's channel. A notice takes a message delay, in order per
//!   listener, and may be lost like a reply; subscribing takes a round trip
//!   and waits for a frozen node; a crash ends every listener (the client
//!   opens a new one).
//!
//! Each node also keeps a ledger per token, for the leftover check: a key an
//! acquire set must later see a release for the same token applied on that
//! node, unless a crash dropped one of that token's operations there (the
//! documented limit: such a key lives until its TTL).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::RngExt;
use rand::rngs::StdRng;
use redquorum::NodeError;
use redquorum::node::{Listener, Node, Notice, Op, Reply};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

/// Message delays and losses on every link of a schedule.
#[derive(Debug, Clone, Copy)]
pub struct Net {
    /// Most messages take a uniform `[0, fast_us]` µs.
    pub fast_us: u64,
    /// With this probability a message is slow instead…
    pub slow_p: f64,
    /// …taking a uniform `[fast_us, slow_us]` µs.
    pub slow_us: u64,
    /// Probability that a reply is lost (the operation was applied).
    pub loss_p: f64,
    /// Probability that a *request* is lost, never applied (a negative
    /// control only: a transport that breaks delivery).
    pub request_loss_p: f64,
}

/// Counters of one schedule, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub messages: u64,
    pub lost_replies: u64,
    pub dropped_by_crash: u64,
    pub refused_while_down: u64,
    /// Release notices a listener handed to its client.
    pub notices: u64,
}

/// The per-schedule context: the seeded RNG, the network model, a digest of
/// everything that happened (to check that a seed replays exactly) and, when
/// verbose, a readable trace.
pub struct World {
    rng: Mutex<StdRng>,
    pub net: Net,
    start: Instant,
    digest: Mutex<u64>,
    trace: Option<Mutex<String>>,
    counts: Mutex<Counts>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl World {
    pub fn new(rng: StdRng, net: Net, verbose: bool) -> Arc<World> {
        Arc::new(World {
            rng: Mutex::new(rng),
            net,
            start: Instant::now(),
            digest: Mutex::new(0xcbf2_9ce4_8422_2325),
            trace: verbose.then(|| Mutex::new(String::new())),
            counts: Mutex::default(),
        })
    }

    /// Runs `f` with the schedule's RNG.
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        f(&mut lock(&self.rng))
    }

    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.with_rng(|r| r.random_bool(p.min(1.0)))
    }

    /// A uniform duration in `[lo, hi]`.
    pub fn between(&self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_micros() as u64, hi.as_micros() as u64);
        Duration::from_micros(self.with_rng(|r| r.random_range(lo..=hi.max(lo))))
    }

    /// One message's delay.
    fn delay(&self) -> Duration {
        let net = self.net;
        let us = self.with_rng(|r| {
            if net.slow_p > 0.0 && r.random_bool(net.slow_p) {
                r.random_range(net.fast_us..=net.slow_us.max(net.fast_us))
            } else {
                r.random_range(0..=net.fast_us)
            }
        });
        lock(&self.counts).messages += 1;
        Duration::from_micros(us)
    }

    /// Virtual time since the schedule started.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.start
    }

    /// Records an event in the digest (and the trace, when verbose).
    pub fn note(&self, what: &str, a: u64, b: u64, detail: impl FnOnce() -> String) {
        let t = self.elapsed().as_nanos() as u64;
        {
            let mut d = lock(&self.digest);
            for x in what
                .bytes()
                .map(u64::from)
                .chain([t, a, b, u64::from(u8::MAX)])
            {
                *d = (*d ^ x).wrapping_mul(0x0100_0000_01b3);
            }
        }
        if let Some(trace) = &self.trace {
            let _ = writeln!(
                lock(trace),
                "{:>12.3} ms  {what:<14} {}",
                t as f64 / 1e6,
                detail()
            );
        }
    }

    pub fn digest(&self) -> u64 {
        *lock(&self.digest)
    }

    pub fn take_trace(&self) -> String {
        self.trace
            .as_ref()
            .map(|t| std::mem::take(&mut *lock(t)))
            .unwrap_or_default()
    }

    pub fn counts(&self) -> Counts {
        *lock(&self.counts)
    }
}

/// What one node has done with one token, for the leftover check.
#[derive(Debug, Default, Clone, Copy)]
struct Ledger {
    /// An acquire with this token set the key here.
    set: bool,
    /// An acquire with this token reached this node (and was applied,
    /// whatever it answered).
    arrived: bool,
    /// Extensions with this token that reached this node.
    extensions: u32,
    /// A release with this token was applied here.
    released: bool,
    /// A crash dropped one of this token's operations here, or one was
    /// refused while the node was down.
    excused: bool,
}

#[derive(Debug)]
struct Entry {
    /// The token, or the owner of a reentrant lock.
    token: String,
    expires: Instant,
    /// A reentrant lock's hold tokens (its count is their number).
    holds: Option<BTreeSet<String>>,
}

/// A read/write lock's readers key (a sorted set in Redis).
#[derive(Debug)]
struct Readers {
    /// Each reader's token and when it expires, in true time.
    members: BTreeMap<String, Instant>,
    /// When the key itself expires (never before its last reader).
    expires: Instant,
}

#[derive(Debug)]
struct State {
    up: bool,
    frozen: bool,
    /// Bumped by every crash: requests sent before it are never applied.
    epoch: u64,
    keys: BTreeMap<String, Entry>,
    /// Read/write locks' readers keys, by key.
    readers: BTreeMap<String, Readers>,
    /// Fencing counters (no TTL).
    counters: BTreeMap<String, u64>,
    ledger: BTreeMap<String, Ledger>,
    /// Open listeners, by id.
    listeners: BTreeMap<u64, Listening>,
    next_listener: u64,
    /// Releases applied and not yet sent to listeners: (key, nonce).
    published: Vec<(String, String)>,
}

/// One listener's end on its node.
#[derive(Debug)]
struct Listening {
    channels: BTreeSet<String>,
    notices: mpsc::UnboundedSender<(Instant, Notice)>,
    /// When its last notice is delivered (no reordering on a connection).
    last_due: Instant,
}

/// One simulated lock node (a Redis master).
#[derive(Debug)]
pub struct SimNode {
    pub index: usize,
    /// The node clock's rate relative to true time.
    pub rate: f64,
    state: Mutex<State>,
    /// A negative control: a reentrant release gives back two holds.
    pub double_release: std::sync::atomic::AtomicBool,
    /// A negative control: a multi-resource acquire sets the keys that are
    /// free and answers done, not all-or-nothing.
    pub partial_many: std::sync::atomic::AtomicBool,
    /// A negative control: listeners confirm subscriptions and never
    /// report a release.
    pub deaf: std::sync::atomic::AtomicBool,
    /// A negative control: a write acquire ignores live readers (sets the
    /// writer key whenever no writer stands).
    pub writer_ignores_readers: std::sync::atomic::AtomicBool,
    /// Woken when the node is thawed or killed. (Not a `watch`: its wake-up
    /// order is random, and a schedule must replay exactly.)
    thawed: Notify,
}

/// An operation as it travels on a link.
#[derive(Debug, Clone)]
enum Owned {
    Acquire {
        key: String,
        token: String,
        ttl: u64,
    },
    Extend {
        key: String,
        token: String,
        ttl: u64,
    },
    Release {
        key: String,
        token: String,
    },
    AcquireFenced {
        key: String,
        fence_key: String,
        token: String,
        ttl: u64,
    },
    FenceWriteBack {
        key: String,
        fence_key: String,
        token: String,
        fence: u64,
    },
    AcquireReentrant {
        key: String,
        owner: String,
        hold: String,
        ttl: u64,
    },
    ExtendReentrant {
        key: String,
        owner: String,
        ttl: u64,
    },
    ReleaseReentrant {
        key: String,
        owner: String,
        hold: String,
    },
    AcquireMany {
        keys: Vec<String>,
        token: String,
        ttl: u64,
    },
    ExtendMany {
        keys: Vec<String>,
        token: String,
        ttl: u64,
    },
    ReleaseMany {
        keys: Vec<String>,
        token: String,
    },
    /// A read/write lock's ops: `keys` are `[writer, readers, intent]`.
    AcquireRead {
        keys: Vec<String>,
        token: String,
        ttl: u64,
    },
    ExtendRead {
        keys: Vec<String>,
        token: String,
        ttl: u64,
    },
    ReleaseRead {
        keys: Vec<String>,
        token: String,
    },
    AcquireWrite {
        keys: Vec<String>,
        token: String,
        ttl: u64,
    },
    ReleaseWrite {
        keys: Vec<String>,
        token: String,
    },
}

impl Owned {
    fn from_op(op: Op<'_>) -> Option<Owned> {
        Some(match op {
            Op::Acquire {
                key, token, ttl_ms, ..
            } => Owned::Acquire {
                key: key.into(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::Extend { key, token, ttl_ms } => Owned::Extend {
                key: key.into(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::Release { key, token } => Owned::Release {
                key: key.into(),
                token: token.into(),
            },
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
            } => Owned::AcquireFenced {
                key: key.into(),
                fence_key: fence_key.into(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => Owned::FenceWriteBack {
                key: key.into(),
                fence_key: fence_key.into(),
                token: token.into(),
                fence,
            },
            Op::AcquireReentrant {
                key,
                owner,
                hold,
                ttl_ms,
            } => Owned::AcquireReentrant {
                key: key.into(),
                owner: owner.into(),
                hold: hold.into(),
                ttl: ttl_ms,
            },
            Op::ExtendReentrant { key, owner, ttl_ms } => Owned::ExtendReentrant {
                key: key.into(),
                owner: owner.into(),
                ttl: ttl_ms,
            },
            Op::ReleaseReentrant { key, owner, hold } => Owned::ReleaseReentrant {
                key: key.into(),
                owner: owner.into(),
                hold: hold.into(),
            },
            Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            } => Owned::AcquireMany {
                keys: keys.to_vec(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            } => Owned::ExtendMany {
                keys: keys.to_vec(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::ReleaseMany { keys, token } => Owned::ReleaseMany {
                keys: keys.to_vec(),
                token: token.into(),
            },
            Op::AcquireRead {
                keys,
                token,
                ttl_ms,
            } if keys.len() == 3 => Owned::AcquireRead {
                keys: keys.to_vec(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } if keys.len() == 3 => Owned::ExtendRead {
                keys: keys.to_vec(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::ReleaseRead { keys, token } if keys.len() == 3 => Owned::ReleaseRead {
                keys: keys.to_vec(),
                token: token.into(),
            },
            Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            } if keys.len() == 3 => Owned::AcquireWrite {
                keys: keys.to_vec(),
                token: token.into(),
                ttl: ttl_ms,
            },
            Op::ReleaseWrite { keys, token } if keys.len() == 3 => Owned::ReleaseWrite {
                keys: keys.to_vec(),
                token: token.into(),
            },
            _ => return None,
        })
    }

    fn token(&self) -> &str {
        match self {
            Owned::Acquire { token, .. }
            | Owned::Extend { token, .. }
            | Owned::Release { token, .. }
            | Owned::AcquireFenced { token, .. }
            | Owned::FenceWriteBack { token, .. } => token,
            // A reentrant hold is acquired and released once: the hold is
            // what the ledger follows.
            Owned::AcquireReentrant { hold, .. } | Owned::ReleaseReentrant { hold, .. } => hold,
            Owned::ExtendReentrant { owner, .. } => owner,
            Owned::AcquireMany { token, .. }
            | Owned::ExtendMany { token, .. }
            | Owned::ReleaseMany { token, .. }
            | Owned::AcquireRead { token, .. }
            | Owned::ExtendRead { token, .. }
            | Owned::ReleaseRead { token, .. }
            | Owned::AcquireWrite { token, .. }
            | Owned::ReleaseWrite { token, .. } => token,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Owned::Acquire { .. } => "acquire",
            Owned::Extend { .. } => "extend",
            Owned::Release { .. } => "release",
            Owned::AcquireFenced { .. } => "acquire-fenced",
            Owned::FenceWriteBack { .. } => "fence-write-back",
            Owned::AcquireReentrant { .. } => "acquire-reentrant",
            Owned::ExtendReentrant { .. } => "extend-reentrant",
            Owned::ReleaseReentrant { .. } => "release-reentrant",
            Owned::AcquireMany { .. } => "acquire-many",
            Owned::ExtendMany { .. } => "extend-many",
            Owned::ReleaseMany { .. } => "release-many",
            Owned::AcquireRead { .. } => "acquire-read",
            Owned::ExtendRead { .. } => "extend-read",
            Owned::ReleaseRead { .. } => "release-read",
            Owned::AcquireWrite { .. } => "acquire-write",
            Owned::ReleaseWrite { .. } => "release-write",
        }
    }
}

impl SimNode {
    pub fn new(index: usize, rate: f64) -> Arc<SimNode> {
        Arc::new(SimNode {
            index,
            rate,
            state: Mutex::new(State {
                up: true,
                frozen: false,
                epoch: 0,
                keys: BTreeMap::new(),
                readers: BTreeMap::new(),
                counters: BTreeMap::new(),
                ledger: BTreeMap::new(),
                listeners: BTreeMap::new(),
                next_listener: 0,
                published: Vec::new(),
            }),
            double_release: std::sync::atomic::AtomicBool::new(false),
            partial_many: std::sync::atomic::AtomicBool::new(false),
            deaf: std::sync::atomic::AtomicBool::new(false),
            writer_ignores_readers: std::sync::atomic::AtomicBool::new(false),
            thawed: Notify::new(),
        })
    }

    /// When a key set now with `ttl_ms` expires, in true time.
    fn expiry(&self, now: Instant, ttl_ms: u64) -> Instant {
        let node_ms = ttl_ms.saturating_sub(1) as f64;
        let true_ns = (node_ms * 1e6 / self.rate).floor();
        now + Duration::from_nanos(true_ns.min(1e18) as u64)
    }

    /// `d` of true time in this node's milliseconds (what `PTTL` answers).
    fn node_ms(&self, d: Duration) -> u64 {
        (d.as_nanos() as f64 * self.rate / 1e6) as u64
    }

    /// Holds every request until [`thaw`](Self::thaw) (SIGSTOP).
    pub fn freeze(&self) {
        lock(&self.state).frozen = true;
    }

    pub fn thaw(&self) {
        lock(&self.state).frozen = false;
        self.thawed.notify_waiters();
    }

    /// Returns once the node is not frozen.
    async fn not_frozen(&self) {
        loop {
            let thawed = self.thawed.notified();
            tokio::pin!(thawed);
            thawed.as_mut().enable();
            if !lock(&self.state).frozen {
                return;
            }
            thawed.await;
        }
    }

    pub fn is_up(&self) -> bool {
        lock(&self.state).up
    }

    /// Kills the node: requests not yet applied are dropped, calls are
    /// refused until [`start`](Self::start). With `wipe`, its keys are gone
    /// (no persistence); otherwise they survive (AOF, `appendfsync always`).
    pub fn crash(&self, wipe: bool) {
        let mut st = lock(&self.state);
        st.up = false;
        st.epoch += 1;
        if wipe {
            st.keys.clear();
            st.readers.clear();
            st.counters.clear();
        }
        // A killed process is no longer stopped, and its connections are
        // gone.
        st.frozen = false;
        st.listeners.clear();
        st.published.clear();
        drop(st);
        self.thawed.notify_waiters();
    }

    /// Loses the fencing counters and nothing else (a negative control:
    /// counters that are not durable).
    pub fn forget_counters(&self) {
        lock(&self.state).counters.clear();
    }

    pub fn start(&self) {
        lock(&self.state).up = true;
    }

    fn excuse(&self, token: &str) {
        lock(&self.state)
            .ledger
            .entry(token.to_owned())
            .or_default()
            .excused = true;
    }

    /// Applies `op` if the connection it came on (`epoch`) is still alive.
    fn apply(&self, epoch: u64, op: &Owned) -> Result<Reply, NodeError> {
        let now = Instant::now();
        let mut st = lock(&self.state);
        if !st.up || st.epoch != epoch {
            st.ledger.entry(op.token().to_owned()).or_default().excused = true;
            return Err(NodeError::Connection("connection reset by restart".into()));
        }
        st.keys.retain(|_, e| e.expires > now);
        st.readers.retain(|_, r| r.expires > now);
        if matches!(
            op,
            Owned::Extend { .. } | Owned::ExtendMany { .. } | Owned::ExtendRead { .. }
        ) {
            st.ledger
                .entry(op.token().to_owned())
                .or_default()
                .extensions += 1;
        }
        if matches!(
            op,
            Owned::Acquire { .. }
                | Owned::AcquireFenced { .. }
                | Owned::AcquireReentrant { .. }
                | Owned::AcquireMany { .. }
                | Owned::AcquireRead { .. }
                | Owned::AcquireWrite { .. }
        ) {
            st.ledger.entry(op.token().to_owned()).or_default().arrived = true;
        }
        let reply = match op {
            Owned::Acquire { key, token, ttl } => match st.keys.get(key) {
                Some(e) => Reply::Held {
                    pttl_ms: Some(((e.expires - now).as_nanos() as f64 * self.rate / 1e6) as u64),
                },
                None => {
                    let expires = self.expiry(now, *ttl);
                    st.keys.insert(
                        key.clone(),
                        Entry {
                            token: token.clone(),
                            expires,
                            holds: None,
                        },
                    );
                    st.ledger.entry(token.clone()).or_default().set = true;
                    Reply::Done
                }
            },
            Owned::Extend { key, token, ttl } => {
                let expires = self.expiry(now, *ttl);
                match st.keys.get_mut(key) {
                    Some(e) if e.token == *token && e.holds.is_none() => {
                        e.expires = e.expires.max(expires);
                        Reply::Done
                    }
                    _ => Reply::NotHeld,
                }
            }
            Owned::AcquireFenced {
                key,
                fence_key,
                token,
                ttl,
            } => match st.keys.get(key) {
                Some(e) => Reply::Held {
                    pttl_ms: Some(((e.expires - now).as_nanos() as f64 * self.rate / 1e6) as u64),
                },
                None => {
                    let counter = st.counters.entry(fence_key.clone()).or_default();
                    *counter += 1;
                    let fence = *counter;
                    let expires = self.expiry(now, *ttl);
                    st.keys.insert(
                        key.clone(),
                        Entry {
                            token: token.clone(),
                            expires,
                            holds: None,
                        },
                    );
                    st.ledger.entry(token.clone()).or_default().set = true;
                    Reply::Fence(fence)
                }
            },
            Owned::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => match st.keys.get(key) {
                Some(e) if e.token == *token => {
                    let counter = st.counters.entry(fence_key.clone()).or_default();
                    *counter = (*counter).max(*fence);
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            Owned::AcquireReentrant {
                key,
                owner,
                hold,
                ttl,
            } => {
                let expires = self.expiry(now, *ttl);
                match st.keys.get_mut(key) {
                    None => {
                        st.keys.insert(
                            key.clone(),
                            Entry {
                                token: owner.clone(),
                                expires,
                                holds: Some(BTreeSet::from([hold.clone()])),
                            },
                        );
                        st.ledger.entry(hold.clone()).or_default().set = true;
                        Reply::Done
                    }
                    Some(Entry {
                        token,
                        expires: current,
                        holds: Some(holds),
                    }) if token == owner => {
                        let new = holds.insert(hold.clone());
                        *current = (*current).max(expires);
                        if new {
                            st.ledger.entry(hold.clone()).or_default().set = true;
                        }
                        Reply::Done
                    }
                    Some(e) => Reply::Held {
                        pttl_ms: Some(
                            ((e.expires - now).as_nanos() as f64 * self.rate / 1e6) as u64,
                        ),
                    },
                }
            }
            Owned::ExtendReentrant { key, owner, ttl } => {
                let expires = self.expiry(now, *ttl);
                match st.keys.get_mut(key) {
                    Some(e) if e.holds.is_some() && e.token == *owner => {
                        e.expires = e.expires.max(expires);
                        Reply::Done
                    }
                    _ => Reply::NotHeld,
                }
            }
            Owned::ReleaseReentrant { key, owner, hold } => {
                st.ledger.entry(hold.clone()).or_default().released = true;
                let twice = self
                    .double_release
                    .load(std::sync::atomic::Ordering::Relaxed);
                let given_back = match st.keys.get_mut(key) {
                    Some(Entry {
                        token,
                        holds: Some(holds),
                        ..
                    }) if token == owner => holds.remove(hold).then(|| {
                        if twice && let Some(other) = holds.iter().next().cloned() {
                            holds.remove(&other);
                        }
                        holds.is_empty()
                    }),
                    _ => None,
                };
                match given_back {
                    Some(last) => {
                        if last {
                            st.keys.remove(key);
                            st.published.push((key.clone(), hold.clone()));
                        }
                        Reply::Done
                    }
                    None => Reply::NotHeld,
                }
            }
            Owned::AcquireMany { keys, token, ttl } => {
                let pttl = keys
                    .iter()
                    .filter_map(|k| st.keys.get(k))
                    .map(|e| ((e.expires - now).as_nanos() as f64 * self.rate / 1e6) as u64)
                    .min();
                let partial = self.partial_many.load(std::sync::atomic::Ordering::Relaxed);
                let some_free = keys.iter().any(|k| !st.keys.contains_key(k));
                let pttl = if partial && some_free { None } else { pttl };
                match pttl {
                    Some(pttl_ms) => Reply::Held {
                        pttl_ms: Some(pttl_ms),
                    },
                    None => {
                        let expires = self.expiry(now, *ttl);
                        for key in keys {
                            if st.keys.contains_key(key) {
                                continue; // only under the negative control
                            }
                            st.keys.insert(
                                key.clone(),
                                Entry {
                                    token: token.clone(),
                                    expires,
                                    holds: None,
                                },
                            );
                        }
                        st.ledger.entry(token.clone()).or_default().set = true;
                        Reply::Done
                    }
                }
            }
            Owned::ExtendMany { keys, token, ttl } => {
                let ours = keys.iter().all(|k| {
                    st.keys
                        .get(k)
                        .is_some_and(|e| e.token == *token && e.holds.is_none())
                });
                if ours {
                    let expires = self.expiry(now, *ttl);
                    for key in keys {
                        if let Some(e) = st.keys.get_mut(key) {
                            e.expires = e.expires.max(expires);
                        }
                    }
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Owned::ReleaseMany { keys, token } => {
                st.ledger.entry(token.clone()).or_default().released = true;
                let mut deleted = false;
                for key in keys {
                    if st
                        .keys
                        .get(key)
                        .is_some_and(|e| e.token == *token && e.holds.is_none())
                    {
                        st.keys.remove(key);
                        deleted = true;
                    }
                }
                if deleted { Reply::Done } else { Reply::NotHeld }
            }
            Owned::AcquireRead { keys, token, ttl } => {
                self.acquire_read(&mut st, now, keys, token, *ttl)
            }
            Owned::ExtendRead { keys, token, ttl } => {
                let expires = self.expiry(now, *ttl);
                let set = st.readers.get_mut(&keys[1]);
                match set.and_then(|set| Some((set.members.get_mut(token)?, &mut set.expires))) {
                    // A live reader (never re-created).
                    Some((mine, key_expires)) if *mine > now => {
                        *mine = (*mine).max(expires);
                        *key_expires = (*key_expires).max(expires);
                        Reply::Done
                    }
                    _ => Reply::NotHeld,
                }
            }
            Owned::ReleaseRead { keys, token } => {
                st.ledger.entry(token.clone()).or_default().released = true;
                // ZREM: an expired reader not yet pruned is removed too.
                let removed = st
                    .readers
                    .get_mut(&keys[1])
                    .is_some_and(|set| set.members.remove(token).is_some());
                if removed {
                    if st.readers[&keys[1]].members.is_empty() {
                        st.readers.remove(&keys[1]);
                    }
                    st.published.push((keys[0].clone(), token.clone()));
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Owned::AcquireWrite { keys, token, ttl } => {
                self.acquire_write(&mut st, now, keys, token, *ttl)
            }
            Owned::ReleaseWrite { keys, token } => {
                st.ledger.entry(token.clone()).or_default().released = true;
                // `release_write.lua`: the writer key and the intent, each
                // only if it holds the token.
                let mut deleted = false;
                for key in [&keys[0], &keys[2]] {
                    if st
                        .keys
                        .get(key)
                        .is_some_and(|e| e.token == *token && e.holds.is_none())
                    {
                        st.keys.remove(key);
                        deleted = true;
                    }
                }
                if deleted {
                    st.published.push((keys[0].clone(), token.clone()));
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Owned::Release { key, token } => {
                st.ledger.entry(token.clone()).or_default().released = true;
                match st.keys.get(key) {
                    Some(e) if e.token == *token && e.holds.is_none() => {
                        st.keys.remove(key);
                        st.published.push((key.clone(), token.clone()));
                        Reply::Done
                    }
                    _ => Reply::NotHeld,
                }
            }
        };
        Ok(reply)
    }

    /// `acquire_read.lua`: refused with the writer's (or else the intent's)
    /// TTL while either stands; else expired readers are pruned and `token`
    /// is added until `ttl` from now, the set's key living at least as long.
    fn acquire_read(
        &self,
        st: &mut State,
        now: Instant,
        keys: &[String],
        token: &str,
        ttl: u64,
    ) -> Reply {
        let (writer, readers, intent) = (&keys[0], &keys[1], &keys[2]);
        if let Some(e) = st.keys.get(writer).or_else(|| st.keys.get(intent)) {
            return Reply::Held {
                pttl_ms: Some(self.node_ms(e.expires - now)),
            };
        }
        let expires = self.expiry(now, ttl);
        let set = st
            .readers
            .entry(readers.clone())
            .or_insert_with(|| Readers {
                members: BTreeMap::new(),
                expires,
            });
        set.members.retain(|_, e| *e > now);
        if set.members.is_empty() {
            // Pruned to nothing: Redis deleted the key, ZADD made a new one.
            set.expires = expires;
        }
        set.members.insert(token.to_owned(), expires);
        set.expires = set.expires.max(expires);
        st.ledger.entry(token.to_owned()).or_default().set = true;
        Reply::Done
    }

    /// `acquire_write.lua`: refused with the writer's TTL while one stands;
    /// else expired readers are pruned, and while live ones remain the
    /// writer's intent is marked with `token` (for their longest time left
    /// plus `ttl`, never shortened) and the write refused with that time left;
    /// otherwise the writer key is set for `ttl` and the intent cleared.
    /// Under the negative control, live readers are ignored.
    fn acquire_write(
        &self,
        st: &mut State,
        now: Instant,
        keys: &[String],
        token: &str,
        ttl: u64,
    ) -> Reply {
        let (writer, readers, intent) = (&keys[0], &keys[1], &keys[2]);
        if let Some(e) = st.keys.get(writer) {
            return Reply::Held {
                pttl_ms: Some(self.node_ms(e.expires - now)),
            };
        }
        let mut last = None;
        if let Some(set) = st.readers.get_mut(readers) {
            set.members.retain(|_, e| *e > now);
            last = set.members.values().max().copied();
            if set.members.is_empty() {
                st.readers.remove(readers);
            }
        }
        let ignore = self
            .writer_ignores_readers
            .load(std::sync::atomic::Ordering::Relaxed);
        match last {
            Some(last) if !ignore => {
                let left = self.node_ms(last - now);
                let until = self.expiry(now, left + ttl);
                match st.keys.get_mut(intent) {
                    Some(e) => {
                        e.token = token.to_owned();
                        e.expires = e.expires.max(until);
                    }
                    None => {
                        st.keys.insert(
                            intent.clone(),
                            Entry {
                                token: token.to_owned(),
                                expires: until,
                                holds: None,
                            },
                        );
                    }
                }
                Reply::Held {
                    pttl_ms: Some(left),
                }
            }
            _ => {
                st.keys.insert(
                    writer.clone(),
                    Entry {
                        token: token.to_owned(),
                        expires: self.expiry(now, ttl),
                        holds: None,
                    },
                );
                st.keys.remove(intent);
                st.ledger.entry(token.to_owned()).or_default().set = true;
                Reply::Done
            }
        }
    }

    /// Sends the releases just applied to the listeners subscribed to their
    /// channels, each after a message delay (or lost, like a reply).
    fn publish(&self, world: &World) {
        let mut st = lock(&self.state);
        let published = std::mem::take(&mut st.published);
        if self.deaf.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        for (key, nonce) in published {
            for listening in st.listeners.values_mut() {
                if !listening.channels.contains(&key) || world.chance(world.net.loss_p) {
                    continue;
                }
                let due = listening.last_due.max(Instant::now() + world.delay());
                listening.last_due = due;
                let notice = Notice {
                    channel: key.clone(),
                    nonce: nonce.clone().into_bytes(),
                };
                let _ = listening.notices.send((due, notice));
            }
        }
    }

    /// Opens a listener on this node (its connection, once it arrived).
    fn add_listener(&self) -> Result<(u64, mpsc::UnboundedReceiver<(Instant, Notice)>), NodeError> {
        let mut st = lock(&self.state);
        if !st.up {
            return Err(NodeError::NotConnected("node is down".into()));
        }
        let (notices, rx) = mpsc::unbounded_channel();
        let id = st.next_listener;
        st.next_listener += 1;
        st.listeners.insert(
            id,
            Listening {
                channels: BTreeSet::new(),
                notices,
                last_due: Instant::now(),
            },
        );
        Ok((id, rx))
    }

    /// Subscribes (or unsubscribes) listener `id`; an error when a crash
    /// ended it.
    fn change(&self, id: u64, channels: &[&str], on: bool) -> Result<(), NodeError> {
        let mut st = lock(&self.state);
        let Some(listening) = st.listeners.get_mut(&id) else {
            return Err(NodeError::Connection("connection reset by restart".into()));
        };
        for channel in channels {
            if on {
                listening.channels.insert((*channel).to_owned());
            } else {
                listening.channels.remove(*channel);
            }
        }
        Ok(())
    }

    /// Keys set by an acquire and never released here, except those a crash
    /// excuses: the leftovers the coordinator is responsible for.
    pub fn leftovers(&self) -> usize {
        lock(&self.state)
            .ledger
            .values()
            .filter(|l| l.set && !l.released && !l.excused)
            .count()
    }

    /// Of `granted` (each acquisition's token and how many extensions were
    /// granted to it), those whose acquire, or one of whose extensions,
    /// never reached this node, though no crash or refusal excuses it.
    pub fn undelivered<'t>(&self, granted: &'t [(String, u32)]) -> Vec<&'t str> {
        let st = lock(&self.state);
        granted
            .iter()
            .filter(|(token, extended)| {
                st.ledger
                    .get(token)
                    .is_none_or(|l| !l.excused && (!l.arrived || l.extensions < *extended))
            })
            .map(|(token, _)| token.as_str())
            .collect()
    }

    /// How many holds `owner` has on the reentrant lock `key` here now.
    pub fn holds(&self, key: &str, owner: &str) -> usize {
        let now = Instant::now();
        lock(&self.state)
            .keys
            .get(key)
            .map_or(0, |e| match &e.holds {
                Some(holds) if e.token == owner && e.expires > now => holds.len(),
                _ => 0,
            })
    }

    /// Keys still live now (whoever's; a readers key while a reader lives).
    pub fn live_keys(&self) -> usize {
        let now = Instant::now();
        let st = lock(&self.state);
        let keys = st.keys.values().filter(|e| e.expires > now).count();
        let readers = st
            .readers
            .values()
            .filter(|r| r.members.values().any(|e| *e > now))
            .count();
        keys + readers
    }
}

struct Request {
    op: Owned,
    due: Instant,
    epoch: u64,
    reply: oneshot::Sender<Result<Reply, NodeError>>,
}

type Delivery = (
    Instant,
    Result<Reply, NodeError>,
    oneshot::Sender<Result<Reply, NodeError>>,
);

/// One client's connection to one node; what the coordinator sees as a
/// [`Node`].
pub struct SimLink {
    name: Arc<str>,
    client: usize,
    node: Arc<SimNode>,
    world: Arc<World>,
    requests: mpsc::UnboundedSender<Request>,
    /// When the last request sent on this link is delivered.
    last_due: Mutex<Instant>,
    /// Requests written and not yet answered (or given up), and the most
    /// there ever were.
    in_flight: Arc<Mutex<(usize, usize)>>,
}

impl std::fmt::Debug for SimLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimLink").field("name", &self.name).finish()
    }
}

impl SimLink {
    /// A link from client `client` to `node`. Spawns its delivery tasks, so
    /// it needs a tokio runtime.
    pub fn new(client: usize, node: Arc<SimNode>, world: Arc<World>) -> Arc<SimLink> {
        let (requests, rx) = mpsc::unbounded_channel();
        let (replies, replies_rx) = mpsc::unbounded_channel();
        tokio::spawn(deliver_requests(
            client,
            node.clone(),
            world.clone(),
            rx,
            replies,
        ));
        tokio::spawn(deliver_replies(replies_rx));
        Arc::new(SimLink {
            name: format!("sim://node{}", node.index + 1).into(),
            client,
            node,
            world,
            requests,
            last_due: Mutex::new(Instant::now()),
            in_flight: Arc::new(Mutex::new((0, 0))),
        })
    }

    /// The most requests this link ever had written and unanswered.
    pub fn max_in_flight(&self) -> usize {
        lock(&self.in_flight).1
    }
}

/// Counts one request in flight on a link for as long as it lives.
struct InFlight(Arc<Mutex<(usize, usize)>>);

impl InFlight {
    fn new(count: &Arc<Mutex<(usize, usize)>>) -> Self {
        let mut c = lock(count);
        c.0 += 1;
        c.1 = c.1.max(c.0);
        InFlight(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.0).0 -= 1;
    }
}

/// Applies one link's requests in order, each at its delivery time, and
/// passes the replies on (or loses them).
async fn deliver_requests(
    client: usize,
    node: Arc<SimNode>,
    world: Arc<World>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    replies: mpsc::UnboundedSender<Delivery>,
) {
    let mut last_reply = Instant::now();
    while let Some(req) = rx.recv().await {
        if world.chance(world.net.request_loss_p) {
            world.note(
                "request-lost",
                (client as u64) << 8 | node.index as u64,
                0,
                || {
                    format!(
                        "client {client} node {}: {} never arrives",
                        node.index + 1,
                        req.op.name()
                    )
                },
            );
            continue; // the caller waits forever
        }
        tokio::time::sleep_until(req.due).await;
        // A frozen node holds this request and everything behind it.
        node.not_frozen().await;
        let result = node.apply(req.epoch, &req.op);
        node.publish(&world);
        let lost = result.is_ok() && world.chance(world.net.loss_p);
        world.note(
            req.op.name(),
            (client as u64) << 8 | node.index as u64,
            u64::from(lost),
            || {
                format!(
                    "client {client} node {}: {result:?}{}",
                    node.index + 1,
                    if lost { " (reply lost)" } else { "" }
                )
            },
        );
        if matches!(result, Err(NodeError::Connection(_))) {
            lock(&world.counts).dropped_by_crash += 1;
        }
        if lost {
            lock(&world.counts).lost_replies += 1;
            continue; // the sender is dropped: the caller waits forever
        }
        let due = last_reply.max(Instant::now() + world.delay());
        last_reply = due;
        let _ = replies.send((due, result, req.reply));
    }
}

async fn deliver_replies(mut rx: mpsc::UnboundedReceiver<Delivery>) {
    while let Some((due, result, reply)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        let _ = reply.send(result);
    }
}

/// A notice and when it is delivered.
type Timed = (Instant, Notice);

/// A client's listener on one node: notices arrive in order, each at its
/// delivery time.
struct SimListener {
    id: u64,
    node: Arc<SimNode>,
    world: Arc<World>,
    /// The notices, and the next one once received (kept while its
    /// delivery time has not come, so a dropped `next` loses nothing).
    notices: tokio::sync::Mutex<(mpsc::UnboundedReceiver<Timed>, Option<Timed>)>,
}

impl SimListener {
    /// One subscription change: a round trip, held by a frozen node.
    async fn change(&self, channels: &[&str], on: bool) -> Result<(), NodeError> {
        tokio::time::sleep(self.world.delay()).await;
        self.node.not_frozen().await;
        self.node.change(self.id, channels, on)?;
        tokio::time::sleep(self.world.delay()).await;
        Ok(())
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        lock(&self.node.state).listeners.remove(&self.id);
    }
}

impl Listener for SimListener {
    fn subscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.change(channels, true))
    }

    fn unsubscribe<'a>(&'a self, channels: &'a [&'a str]) -> BoxFuture<'a, Result<(), NodeError>> {
        Box::pin(self.change(channels, false))
    }

    fn next(&self) -> BoxFuture<'_, Option<Notice>> {
        Box::pin(async move {
            let mut notices = self.notices.lock().await;
            let (rx, next) = &mut *notices;
            if next.is_none() {
                *next = Some(rx.recv().await?);
            }
            let due = next.as_ref().map(|(due, _)| *due)?;
            tokio::time::sleep_until(due).await;
            let (_, notice) = next.take()?;
            lock(&self.world.counts).notices += 1;
            self.world
                .note("notice", self.node.index as u64, self.id, || {
                    format!(
                        "node {} -> listener {}: {notice:?}",
                        self.node.index + 1,
                        self.id
                    )
                });
            Some(notice)
        })
    }
}

impl Node for SimLink {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn listen(&self) -> Option<BoxFuture<'static, Result<Box<dyn Listener>, NodeError>>> {
        let (node, world) = (self.node.clone(), self.world.clone());
        Some(Box::pin(async move {
            // The connection takes a round trip; a frozen node holds it.
            tokio::time::sleep(world.delay()).await;
            node.not_frozen().await;
            let (id, rx) = node.add_listener()?;
            tokio::time::sleep(world.delay()).await;
            Ok(Box::new(SimListener {
                id,
                node,
                world,
                notices: tokio::sync::Mutex::new((rx, None)),
            }) as Box<dyn Listener>)
        }))
    }

    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>> {
        let Some(op) = Owned::from_op(op) else {
            return Box::pin(async { Err(NodeError::Protocol("operation not simulated".into())) });
        };
        let epoch = {
            let st = lock(&self.node.state);
            if st.up { Some(st.epoch) } else { None }
        };
        let Some(epoch) = epoch else {
            // Like RedisNode: no connection, answered at once.
            self.node.excuse(op.token());
            lock(&self.world.counts).refused_while_down += 1;
            return Box::pin(async { Err(NodeError::NotConnected("node is down".into())) });
        };
        // Like redis-rs, the request is written when the future is first
        // polled: a call dropped before that never reaches the node.
        Box::pin(async move {
            let due = {
                let mut last = lock(&self.last_due);
                let due = (*last).max(Instant::now() + self.world.delay());
                *last = due;
                due
            };
            let (reply, rx) = oneshot::channel();
            let _ = self.requests.send(Request {
                op,
                due,
                epoch,
                reply,
            });
            // Until answered, or given up (dropped).
            let _in_flight = InFlight::new(&self.in_flight);
            match rx.await {
                Ok(result) => result,
                // A lost reply: it never comes.
                Err(_) => std::future::pending().await,
            }
        })
    }
}
