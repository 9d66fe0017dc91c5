//! Delivery to one node: every call a round makes reaches the node whether
//! or not anyone still waits for its answer, and what a node can cost the
//! client is bounded.
//!
//! Making a call is synchronous: it is queued on the node's link (in the
//! order calls are made) and from then on the link's task delivers it and
//! casts its answer into the round's ballot, whatever becomes of the round;
//! or it is refused at once (the node is down, or too many calls are in
//! flight) and the refusal is cast at once. Nothing in between that a
//! cancelled caller could leave half done (docs/design.md §11).
//!
//! The bounds, per node:
//!
//! - at most [`Limits::max_in_flight`] calls are in flight (made and not yet
//!   finished, wherever they are); past it a call is refused at once with
//!   [`NodeError::Overloaded`] — but for a release or a refused round's
//!   undo, which pairs with an acquire that was made (at most two per
//!   acquire), and may take the calls in flight up to [`CLEANUP_ROOM`]
//!   times the bound: refusing it would leave that acquire's key for its
//!   TTL;
//! - a call waits at most [`Limits::grace`] for its answer (a small multiple
//!   of the node timeout). A Redis node that lets one call pass it is
//!   unresponsive: its connection is dropped — which frees everything
//!   written on it — and re-established in the background.
//!
//! So a dead or frozen node costs a fixed amount of memory and no task, at
//! any rate and any TTL. Nodes of your own ([`Node`]) are called through
//! their boxed futures: each is polled once when made and then driven by
//! one delivery task per node.
//!
//! # Delivery and bounds
//!
//! - `Dispatcher::call` is synchronous: it refuses the call at once — the client was shut
//!   down (`NotConnected`), the node's in-flight bound is reached and no place was
//!   reserved for the call (`Overloaded` for a node whose calls pile up: degraded or not
//!   ready; `Saturated` for a healthy one), the link is down (`NotConnected`) — or pushes
//!   it onto the node's queue. From then on the link delivers it and casts its answer,
//!   whatever becomes of the round.
//! - **In flight.** At most `max_in_flight` calls per node (default 1024,
//!   `Builder::max_in_flight`) are queued or awaiting an answer; a call holds its slot
//!   until it ends. A release or a refused round's undo may take the count up to three
//!   times the bound (`CLEANUP_ROOM`): it pairs with an acquire that was made (at most
//!   two per acquire), and refusing it would leave that acquire's key for its TTL.
//!   `NodeStatus::in_flight` (from `Redlock::nodes`) shows the count per node.
//! - **Room** (`Driver::room`; `Dispatcher::room`, `Dispatcher::reserve`). The client's
//!   own bound must not look like a node's failure, and every reachable node must get
//!   every call. An acquire reserves, before its clock starts, a place for its call on
//!   every node at once; where a healthy node (connected, not degraded, not closed) is at
//!   its bound, it gives back every place, waits for one of that node's calls to end and
//!   tries again — no hold-and-wait — for at most the node timeout (the configured one,
//!   else 50 ms). An extension waits likewise, within its lease's validity. A node that
//!   is down, degraded (its calls unanswered) or closed is not waited for: a frozen
//!   node's calls end only at their grace. A healthy node still full by then is not sent
//!   the call and votes `Saturated(limit)`, which does not count against its health; a
//!   round whose yes votes and `Saturated` refusals together reach `Q` fails with `Busy`,
//!   never `Unavailable` (docs/design.md docs/design.md §12). Free when there is room. Releases, write-backs and
//!   inspection take their place when made, without waiting
//!   (`tests/in_memory/backpressure.rs`, `tests/redis_backpressure.rs`).
//! - **Turns** (`src/engine/turns.rs`). One acquire round per resource at a time from one
//!   client, for locks only one holder can have (plain, fenced, multi-resource, writer,
//!   permit; not readers, not a reentrant owner's holds): a round waits, before its clock starts, while another round of the same
//!   client for the same resource (by its first key) is in flight — with its fenced
//!   write-back and a refusal's clean-up. Two rounds of one client for one lock can only
//!   refuse each other (at most one wins; split votes leave neither); in turn, each is
//!   one round trip. Holding is not a turn, only the round. The table has one entry per
//!   resource with a round running or waiting, so it is bounded by the rounds in flight;
//!   uncontended, a turn costs one hash, one lookup and one small allocation.
//! - **Holds** (`src/engine/holds.rs`). The client keeps a table of its live locks: a weak
//!   reference to each lock's claim, added when the lock is made and removed when it is
//!   released or dropped; freed slots are used again, so the table is bounded by the
//!   locks held at once. `shutdown` releases, from it, every lock whose release has not
//!   begun (below).
//! - **Grace.** A call waits at most four node timeouts, and at least 1 s, for its answer
//!   (the node timeout here is the configured one, else 50 ms). A node that lets a call
//!   pass its grace is unresponsive: its connection is dropped and a new attempt starts;
//!   calls queue during that attempt (at most the connect timeout) and are refused at
//!   once once it fails. So a frozen node costs at most three times `max_in_flight`
//!   calls' worth of memory, for at most the grace plus one connect timeout, then only
//!   the releases kept for resending (within that count, each until it is sent or its
//!   key's TTL has passed), at any lock rate and any TTL; no task or round state
//!   outlives its operation (`tests/in_memory/bounds.rs`; figures:
//!   `cargo run --profile bench -p redquorum-bench --bin promises`).
//! - **Nodes of your own** (`Node`): each call's future is polled once on the spot (which
//!   sends it, in the order calls are made), then driven by one delivery task per node,
//!   bounded by the grace.
//! - `Redlock::shutdown` (`Driver::shutdown`) marks the client closing — every lease
//!   (`run`, keep-alive, leadership, permit lease) ends at once as lost: its work sees
//!   `LockError::Lost`, its `lost()` resolves — then releases, on every node, every lock
//!   in the holds table whose release has not begun: dropped keep-alives whose aborted
//!   task has not yet dropped its lock, and locks, permits, read/write holds and
//!   leaderships owned by tasks that run on. Then it refuses every later call and waits
//!   until every call made has ended, or until no call of a node has ended for a whole
//!   node timeout (so at most each node's grace). A `release()` of a lock the shutdown
//!   released returns `Ok`; a lock granted by a round racing the shutdown is released
//!   when dropped, if the nodes still take calls (`tests/in_memory/shutdown.rs`).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::engine::ballot::Ballot;
use crate::engine::claim::Claim;
use crate::proto::error::NodeError;
use crate::proto::op::Reply;
use crate::proto::round::Step;
use crate::telemetry::NodeTelemetry;
use crate::transport::cluster::ClusterNode;
use crate::transport::in_flight::{InFlight, Place};
use crate::transport::link::{Counted, Errand, Limits, Pending, Sink, Work};
use crate::transport::master::RedisNode;
use crate::transport::node::Node;
use crate::transport::scripts::Shape;

/// A node call's outcome.
pub(crate) type Outcome = Result<Reply, NodeError>;

/// Releases and undos may take calls in flight up to this many times the
/// bound (see [`Dispatcher::call`]).
pub(crate) const CLEANUP_ROOM: usize = 3;

/// A configured node: a Redis master, a Redis Cluster, or one of the
/// caller's own behind the [`Node`] trait.
#[derive(Clone)]
pub(crate) enum Member {
    Redis(Arc<RedisNode>),
    /// A Redis Cluster: one vote, many shards.
    Cluster(Arc<ClusterNode>),
    Custom(Arc<dyn Node>),
}

impl Member {
    pub(crate) fn name(&self) -> &Arc<str> {
        match self {
            Member::Redis(node) => node.name(),
            Member::Cluster(node) => node.name(),
            Member::Custom(node) => node.name(),
        }
    }

    /// `Ok` while the member can take calls (for a cluster: every master);
    /// otherwise why not. Nodes of your own are always ready.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        match self {
            Member::Redis(node) => node.ready(),
            Member::Cluster(node) => node.ready(),
            Member::Custom(_) => Ok(()),
        }
    }

    /// Whether no connection attempt has ended yet.
    pub(crate) fn connecting_first(&self) -> bool {
        match self {
            Member::Redis(node) => node.link().connecting_first(),
            Member::Cluster(node) => node.connecting_first(),
            Member::Custom(_) => false,
        }
    }

    /// Connections waiting out a backoff are tried again now (nodes of your
    /// own have none).
    pub(crate) fn kick(&self) {
        match self {
            Member::Redis(node) => node.link().kick(),
            Member::Cluster(node) => node.kick(),
            Member::Custom(_) => {}
        }
    }

    /// Resolves at the member's next change of connection state (`None`:
    /// a node of your own, which has none).
    pub(crate) fn changed(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        match self {
            Member::Redis(node) => Some(node.link().changed()),
            Member::Cluster(node) => Some(node.changed()),
            Member::Custom(_) => None,
        }
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Member::Redis(node) => node.fmt(f),
            Member::Cluster(node) => node.fmt(f),
            Member::Custom(node) => node.fmt(f),
        }
    }
}

/// A custom node's call that did not finish at its first poll, and where its
/// outcome goes.
type Delivery = (Pin<Box<dyn Future<Output = Outcome> + Send>>, Pending);

/// One node's delivery: its member, its bound and instruments.
pub(crate) struct Dispatcher {
    member: Member,
    limits: Limits,
    in_flight: Arc<InFlight>,
    /// Every call's outcome, for metrics and the degradation log.
    telemetry: Arc<NodeTelemetry>,
    /// Set by [`close`](Self::close): every later call is refused.
    closed: AtomicBool,
    /// For a node of your own: the task that drives its unfinished calls.
    custom: Option<mpsc::UnboundedSender<Delivery>>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("member", &self.member)
            .field("limits", &self.limits)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Dispatcher {
    /// The node `member`, counted in `telemetry`. Needs a tokio runtime for
    /// a node of your own (its delivery task).
    pub(crate) fn start(member: Member, limits: Limits, telemetry: Arc<NodeTelemetry>) -> Self {
        let custom = matches!(member, Member::Custom(_)).then(|| {
            // Unbounded in type, bounded in fact: every call in it holds one
            // of the node's `max_in_flight` slots. The task ends once the
            // dispatcher is dropped and its calls are done.
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(deliver(rx, limits, Arc::clone(&telemetry)));
            tx
        });
        Dispatcher {
            member,
            limits,
            in_flight: Arc::default(),
            telemetry,
            closed: AtomicBool::new(false),
            custom,
        }
    }

    /// Whether the node is degraded now: its last calls failed.
    pub(crate) fn degraded(&self) -> bool {
        self.telemetry.degraded()
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        self.member.name()
    }

    pub(crate) fn member(&self) -> &Member {
        &self.member
    }

    /// Calls in flight right now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.calls()
    }

    /// Refuses every call from now on (the client was shut down); the calls
    /// already made go on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Resolves once no call is in flight to the node, or once none of its
    /// calls has ended for a while: a whole node timeout while connected (the
    /// node is unresponsive: its calls are written, and would land only if
    /// it came back before their grace), one connection attempt more while
    /// not (the calls wait for a connection: a link waiting out its backoff
    /// is made to try at once, and a node that refuses it is down). Every
    /// call ends by its grace, which bounds this too.
    pub(crate) async fn drained(&self) {
        loop {
            let ended = self.in_flight.ended();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            let patience = match self.member.ready() {
                Ok(()) => self.limits.late,
                Err(_) => {
                    // Again on every pass: a connection may drop during
                    // the wait.
                    self.member.kick();
                    self.limits.connect + self.limits.late
                }
            };
            if tokio::time::timeout(patience, ended).await.is_err() {
                return;
            }
        }
    }

    /// The bound on calls in flight for a call of `step`.
    fn limit(&self, step: Step) -> usize {
        match step {
            Step::Release | Step::Undo => self.limits.max_in_flight * CLEANUP_ROOM,
            _ => self.limits.max_in_flight,
        }
    }

    /// A place for a call of `step`, unless the node has its bound of
    /// calls in flight.
    pub(crate) fn reserve(&self, step: Step) -> Option<Place> {
        self.in_flight.take(self.limit(step))
    }

    /// Waits until a call of `step` may find room on the node, or `until`:
    /// whether it may. Only worth it for a healthy node (connected, not
    /// degraded, not closed): a frozen node's calls end only at their
    /// grace, and a round must not wait for it.
    pub(crate) async fn room(&self, step: Step, until: tokio::time::Instant) -> bool {
        loop {
            let ended = self.in_flight.ended();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight() < self.limit(step) {
                return true;
            }
            if self.degraded()
                || self.member.ready().is_err()
                || self.closed.load(Ordering::Acquire)
                || tokio::time::timeout_at(until, ended).await.is_err()
            {
                return false;
            }
        }
    }

    /// Makes node `node`'s call of `round`: queued for the node, in the
    /// order calls are made, or refused at once — the client shut down, the
    /// node down, or [`Limits::max_in_flight`] calls already in flight —
    /// and the refusal cast at once. `place`: one reserved for it already
    /// ([`reserve`](Self::reserve)). Returns whether it was made: a call
    /// made reaches the node exactly once (unless the connection fails
    /// under it), whatever becomes of the round.
    pub(crate) fn call(&self, round: &Arc<RoundCalls>, node: usize, place: Option<Place>) -> bool {
        let step = round.step;
        let refuse = |error: NodeError| {
            self.telemetry.refused(&error);
            round.ballot.cast(node, Err(error), false);
            false
        };
        if self.closed.load(Ordering::Acquire) {
            return refuse(NodeError::NotConnected("the client was shut down".into()));
        }
        // A release (or a refused round's undo) pairs with an acquire that
        // was made, so it may go past the bound: refused, it would leave that
        // acquire's key for its TTL. Each acquire has at most two of them
        // (a writer's undo and its give-up), hence the bound on all calls.
        let Some(place) = place.or_else(|| self.reserve(step)) else {
            // A node whose calls pile up is failing; a healthy one is full
            // of this client's own calls.
            let limit = self.limit(step);
            return refuse(if self.degraded() || self.member.ready().is_err() {
                NodeError::Overloaded(limit)
            } else {
                NodeError::Saturated(limit)
            });
        };
        self.telemetry.started();
        let counted = Counted {
            telemetry: Arc::clone(&self.telemetry),
            _place: place,
        };
        let work = Work::Errand {
            errand: Arc::clone(round) as Arc<dyn Errand>,
            node,
            route: None,
        };
        let call = Pending::new(work, Sink::Errand, Some(counted));
        match &self.member {
            Member::Redis(redis) => redis.link().submit(call),
            Member::Cluster(cluster) => cluster.submit(call),
            Member::Custom(custom) => {
                self.call_custom(Arc::clone(custom), round, call);
                true
            }
        }
    }

    /// A call to a node of your own: polled once now (which sends it, in
    /// the order calls are made), then driven by the node's delivery task.
    fn call_custom(&self, node: Arc<dyn Node>, round: &RoundCalls, mut call: Pending) {
        let (claim, step, ttl_ms) = (Arc::clone(&round.claim), round.step, round.ttl_ms);
        let grace = self.limits.grace;
        let quarantined = node.quarantined();
        call.quarantined = quarantined;
        let mut future: Pin<Box<dyn Future<Output = Outcome> + Send>> =
            Box::pin(tokio::task::coop::unconstrained(async move {
                let op = claim.op_on(step, ttl_ms, quarantined, tokio::time::Instant::now);
                tokio::time::timeout(grace, node.call(op))
                    .await
                    .unwrap_or(Err(NodeError::TimedOut))
            }));
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(outcome) => call.finish_reply(outcome, self.limits.late),
            Poll::Pending => {
                if let Some(tx) = &self.custom
                    && let Err(mpsc::error::SendError((_, call))) = tx.send((future, call))
                {
                    // The runtime is shutting down: the call goes with it.
                    call.finish_reply(
                        Err(NodeError::Connection("the runtime is shutting down".into())),
                        self.limits.late,
                    );
                }
            }
        }
    }
}

/// One round's calls: `step` on `claim`'s keys, asked of each node, the
/// answers cast into `ballot`. The errand every call of the round carries
/// (one allocation per round).
#[derive(Debug)]
pub(crate) struct RoundCalls {
    claim: Arc<Claim>,
    step: Step,
    ttl_ms: u64,
    pub(crate) ballot: Ballot,
}

impl RoundCalls {
    pub(crate) fn new(claim: &Arc<Claim>, step: Step, ttl_ms: u64, ballot: Ballot) -> Arc<Self> {
        Arc::new(RoundCalls {
            claim: Arc::clone(claim),
            step,
            ttl_ms,
            ballot,
        })
    }
}

impl Errand for RoundCalls {
    fn encode(&self, loaded: bool, quarantined: bool, out: &mut Vec<u8>) -> Shape {
        // The clock, read as the call is written where the op depends on it
        // (a release of a lock held at least until later). Built once per
        // call: its reply is read by the shape returned.
        let op = self.claim.op_on(
            self.step,
            self.ttl_ms,
            quarantined,
            tokio::time::Instant::now,
        );
        crate::transport::scripts::encode(&op, loaded, out)
    }

    fn key(&self) -> &str {
        self.claim.keys().first()
    }

    fn resend_within(&self) -> Option<std::time::Duration> {
        matches!(self.step, Step::Release | Step::Undo)
            .then(|| std::time::Duration::from_millis(self.ttl_ms))
    }

    fn holds(&self) -> bool {
        self.step.holds()
    }

    fn grants(&self) -> bool {
        self.step.grants()
    }

    fn answer(&self, node: usize, quarantined: bool, outcome: Outcome) {
        self.ballot.cast(node, outcome, quarantined);
    }
}

/// A node of your own's delivery task: drives every call it is handed to
/// its end (or its grace); a call unanswered after the node timeout counts
/// against the node's health at once. Ends once the client is gone and
/// every call is done.
async fn deliver(
    mut calls: mpsc::UnboundedReceiver<Delivery>,
    limits: Limits,
    telemetry: Arc<NodeTelemetry>,
) {
    // A call that panics (a custom node's) must not take the task, and with
    // it every later call, down.
    let mut running = FuturesUnordered::new();
    let mut open = true;
    loop {
        if !open && running.is_empty() {
            return;
        }
        // Biased (finished calls first): unbiased branches are picked at
        // random, which a seeded simulation could not replay.
        tokio::select! {
            biased;
            Some((done, call)) = running.next(), if !running.is_empty() => {
                let call: Pending = call;
                match done {
                    Ok(outcome) => call.finish_reply(outcome, limits.late),
                    Err(_) => {
                        tracing::error!("a node call panicked; its slot is given back");
                        call.finish_reply(Err(NodeError::Protocol("the node's call panicked".into())), limits.late);
                    }
                }
            }
            next = calls.recv(), if open => match next {
                Some((mut future, mut call)) => {
                    let telemetry = Arc::clone(&telemetry);
                    let late = limits.late.saturating_sub(call.made.elapsed());
                    running.push(async move {
                        let mut counted_late = false;
                        let done = AssertUnwindSafe(async {
                            match tokio::time::timeout(late, future.as_mut()).await {
                                Ok(outcome) => outcome,
                                Err(_) => {
                                    telemetry.late();
                                    counted_late = true;
                                    future.await
                                }
                            }
                        })
                        .catch_unwind()
                        .await;
                        call.late = counted_late;
                        (done, call)
                    });
                }
                None => open = false,
            },
            else => return,
        }
    }
}
