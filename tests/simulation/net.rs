//! The simulated network: the per-schedule [`World`] and a client's
//! connections to the simulated nodes ([`SimLink`], [`SimListener`]).
//!
//! A schedule runs on a current-thread tokio runtime with a paused clock, so
//! `tokio::time::Instant` is the simulation's *true time* and every delay is
//! virtual. All randomness comes from one seeded [`StdRng`] per schedule
//! ([`World`]); with tokio's deterministic current-thread scheduler, the same
//! seed replays the same schedule.
//!
//! The model, as close to a Redis master behind a multiplexed connection as
//! matters to Redlock (the nodes themselves are in `node.rs`):
//!
//! - A [`SimLink`] is one client's connection to one node, and implements the
//!   public [`Node`] trait. Every message (request and reply) gets a random
//!   delay, but a link never reorders: a message is delivered at
//!   `max(previous delivery on this link, now + delay)`. A request is on the
//!   wire as soon as `call` is made, so dropping the reply future does not
//!   unsend it (the coordinator relies on a release queued behind an acquire).
//! - A reply may be lost: the operation is applied, the reply never arrives.
//! - A [`SimListener`] is one client's listener ([`Node::listen`]) on one
//!   node: a notice takes a message delay, in order per listener;
//!   subscribing takes a round trip and waits for a frozen node.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::RngExt;
use rand::rngs::StdRng;
use redquorum::NodeError;
use redquorum::internals::OwnedOp;
use redquorum::node::{Listener, Node, Notice, Op, Reply};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::node::{SimNode, ledger_token};

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

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
    pub fn delay(&self) -> Duration {
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
pub type Timed = (Instant, Notice);

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
        self.node.remove_listener(self.id);
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

    fn quarantined(&self) -> bool {
        self.node.quarantined()
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
        let Some(epoch) = self.node.connection() else {
            // Like RedisNode: no connection, answered at once.
            self.node.excuse(ledger_token(&op));
            lock(&self.world.counts).refused_while_down += 1;
            return Box::pin(async { Err(NodeError::NotConnected("node is down".into())) });
        };
        // As any node of your own: the request is written when the future
        // is first polled (the client polls each call once as it makes it);
        // a call dropped before that never reaches the node.
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
