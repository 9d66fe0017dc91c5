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
//! - A [`SimNode`] keeps its keys in a `redquorum::testing::Store`, the one
//!   model of what a node does with each operation (checked against Redis
//!   by `tests/model.rs`). Its clock runs at `rate` (1.0 = true time), in
//!   whole milliseconds: a TTL of `t` ms lasts `t / rate` ms of true time,
//!   to within a millisecond — a fast clock expires keys early.
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
use redquorum::testing::{OwnedOp, Store};
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
struct State {
    up: bool,
    frozen: bool,
    /// Bumped by every crash: requests sent before it are never applied.
    epoch: u64,
    /// The keys, and what each operation does to them.
    store: Store,
    ledger: BTreeMap<String, Ledger>,
    /// Open listeners, by id.
    listeners: BTreeMap<u64, Listening>,
    next_listener: u64,
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
    /// When its clock read 0, in true time.
    epoch: Instant,
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

/// The token an operation's ledger entry follows: a reentrant hold is
/// acquired and released once, so its hold is what the ledger follows.
fn ledger_token<'a>(op: &Op<'a>) -> &'a str {
    match *op {
        Op::AcquireReentrant { hold, .. } | Op::ReleaseReentrant { hold, .. } => hold,
        Op::ExtendReentrant { owner, .. } => owner,
        Op::Acquire { token, .. }
        | Op::Extend { token, .. }
        | Op::Release { token, .. }
        | Op::AcquireFenced { token, .. }
        | Op::FenceWriteBack { token, .. }
        | Op::AcquireMany { token, .. }
        | Op::ExtendMany { token, .. }
        | Op::ReleaseMany { token, .. }
        | Op::AcquireRead { token, .. }
        | Op::ExtendRead { token, .. }
        | Op::ReleaseRead { token, .. }
        | Op::AcquireWrite { token, .. }
        | Op::ReleaseWrite { token, .. }
        | Op::AcquirePermit { token, .. }
        | Op::ExtendPermit { token, .. }
        | Op::ReleasePermit { token, .. } => token,
        _ => "",
    }
}

impl SimNode {
    pub fn new(index: usize, rate: f64) -> Arc<SimNode> {
        Arc::new(SimNode {
            index,
            rate,
            epoch: Instant::now(),
            state: Mutex::new(State {
                up: true,
                frozen: false,
                epoch: 0,
                store: Store::new(),
                ledger: BTreeMap::new(),
                listeners: BTreeMap::new(),
                next_listener: 0,
            }),
            double_release: std::sync::atomic::AtomicBool::new(false),
            partial_many: std::sync::atomic::AtomicBool::new(false),
            deaf: std::sync::atomic::AtomicBool::new(false),
            writer_ignores_readers: std::sync::atomic::AtomicBool::new(false),
            thawed: Notify::new(),
        })
    }

    /// The node's clock at `now` (true time), in its milliseconds: it runs
    /// at `rate` from the simulation's start.
    fn clock(&self, now: Instant) -> u64 {
        let true_ns = now.saturating_duration_since(self.epoch).as_nanos() as f64;
        (true_ns * self.rate / 1e6) as u64
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
            st.store.clear();
        }
        // A killed process is no longer stopped, and its connections are
        // gone.
        st.frozen = false;
        st.listeners.clear();
        st.store.take_published();
        drop(st);
        self.thawed.notify_waiters();
    }

    /// Loses the fencing counters and nothing else (a negative control:
    /// counters that are not durable).
    pub fn forget_counters(&self) {
        lock(&self.state).store.forget_persistent();
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
    fn apply(&self, epoch: u64, op: Op<'_>) -> Result<Reply, NodeError> {
        let now = self.clock(Instant::now());
        let mut st = lock(&self.state);
        let token = ledger_token(&op);
        if !st.up || st.epoch != epoch {
            st.ledger.entry(token.to_owned()).or_default().excused = true;
            return Err(NodeError::Connection("connection reset by restart".into()));
        }
        let ledger = st.ledger.entry(token.to_owned()).or_default();
        match op {
            Op::Extend { .. }
            | Op::ExtendMany { .. }
            | Op::ExtendRead { .. }
            | Op::ExtendPermit { .. } => ledger.extensions += 1,
            Op::Acquire { .. }
            | Op::AcquireFenced { .. }
            | Op::AcquireReentrant { .. }
            | Op::AcquireMany { .. }
            | Op::AcquireRead { .. }
            | Op::AcquireWrite { .. }
            | Op::AcquirePermit { .. } => ledger.arrived = true,
            Op::Release { .. }
            | Op::ReleaseReentrant { .. }
            | Op::ReleaseMany { .. }
            | Op::ReleaseRead { .. }
            | Op::ReleaseWrite { .. }
            | Op::ReleasePermit { .. } => ledger.released = true,
            _ => {}
        }
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let reply = match op {
            // Negative control: the keys that are free are set, and the
            // acquire answers done.
            Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            } if self.partial_many.load(relaxed)
                && keys.iter().any(|k| st.store.holder(k, now).is_none()) =>
            {
                for key in keys {
                    let one = Op::Acquire {
                        key,
                        token,
                        ttl_ms,
                        holder_ttl: false,
                        line: &[],
                        waiter: None,
                    };
                    st.store.apply(one, now)?;
                }
                Reply::Done
            }
            // Negative control: live readers are not seen.
            Op::AcquireWrite { keys, .. } if self.writer_ignores_readers.load(relaxed) => {
                let readers = st.store.take(&keys[1]);
                let reply = st.store.apply(op, now);
                if let Some(readers) = readers {
                    st.store.put_back(readers);
                }
                reply?
            }
            Op::ReleaseReentrant { key, owner, .. } => {
                let reply = st.store.apply(op, now)?;
                // Negative control: a second hold goes with this one.
                let other = st.store.holds(key, now).first().cloned();
                if reply == Reply::Done
                    && self.double_release.load(relaxed)
                    && let Some(hold) = other.as_deref()
                {
                    st.store
                        .apply(Op::ReleaseReentrant { key, owner, hold }, now)?;
                }
                reply
            }
            _ => st.store.apply(op, now)?,
        };
        let acquire = matches!(
            op,
            Op::Acquire { .. }
                | Op::AcquireFenced { .. }
                | Op::AcquireReentrant { .. }
                | Op::AcquireMany { .. }
                | Op::AcquireRead { .. }
                | Op::AcquireWrite { .. }
                | Op::AcquirePermit { .. }
        );
        if acquire && matches!(reply, Reply::Done | Reply::Fence(_)) {
            st.ledger.entry(token.to_owned()).or_default().set = true;
        }
        Ok(reply)
    }

    /// Sends the releases just applied to the listeners subscribed to their
    /// channels, each after a message delay (or lost, like a reply).
    fn publish(&self, world: &World) {
        let mut st = lock(&self.state);
        let published = st.store.take_published();
        if self.deaf.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        for notice in published {
            for listening in st.listeners.values_mut() {
                if !listening.channels.contains(&notice.channel) || world.chance(world.net.loss_p) {
                    continue;
                }
                let due = listening.last_due.max(Instant::now() + world.delay());
                listening.last_due = due;
                let _ = listening.notices.send((due, notice.clone()));
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
        let now = self.clock(Instant::now());
        let st = lock(&self.state);
        if st.store.holder(key, now) == Some(owner) {
            st.store.holds(key, now).len()
        } else {
            0
        }
    }

    /// Keys still live now (whoever's; a readers key while a reader lives).
    pub fn live_keys(&self) -> usize {
        let now = self.clock(Instant::now());
        lock(&self.state).store.live_keys(now)
    }
}

struct Request {
    op: OwnedOp,
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
                        req.op.op().name()
                    )
                },
            );
            continue; // the caller waits forever
        }
        tokio::time::sleep_until(req.due).await;
        // A frozen node holds this request and everything behind it.
        node.not_frozen().await;
        let result = node.apply(req.epoch, req.op.op());
        node.publish(&world);
        let lost = result.is_ok() && world.chance(world.net.loss_p);
        world.note(
            req.op.op().name(),
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
        let epoch = {
            let st = lock(&self.node.state);
            if st.up { Some(st.epoch) } else { None }
        };
        let Some(epoch) = epoch else {
            // Like RedisNode: no connection, answered at once.
            self.node.excuse(ledger_token(&op));
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
                op: OwnedOp::new(op),
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
