//! Delivery to one node: every call a round makes reaches the node whether
//! or not anyone still waits for its answer, and what a node can cost the
//! client is bounded.
//!
//! redis-rs' multiplexed connection never writes a request whose future was
//! dropped before it was first polled, nor one still waiting for room in the
//! connection's queue; so a round that decided at the quorum and dropped the
//! calls still pending would leave its lock on a bare quorum (DESIGN §1.7).
//! Here a call is a [`Call`]: a boxed future that is polled once the moment
//! it is made — which writes the request, or takes its place in the
//! connection's queue, in the order calls are made — and that the round then
//! drives itself while it listens. A round that stops listening (it decided,
//! or it was cancelled) hands every unfinished call to the node's delivery
//! task, which drives it to its end. The caller pays no hop through another
//! task for the calls it waits for, and nothing it made is ever abandoned.
//! Making a call is synchronous, so a call is either made (and then happens
//! exactly once) or refused at once — nothing in between that a cancelled
//! caller could leave half done (DESIGN §1.9).
//!
//! The bounds (DESIGN §1.8), per node:
//!
//! - at most [`Limits::max_in_flight`] calls are in flight (made and not yet
//!   finished, wherever they are driven); past it a call is refused at once
//!   with [`NodeError::Overloaded`];
//! - a call waits at most [`Limits::grace`] for its answer (a small multiple
//!   of the node timeout). A Redis node that lets one call pass it is
//!   unresponsive: its connection is dropped — which frees everything queued
//!   on it — and re-established in the background, and until then every call
//!   is refused at once with [`NodeError::NotConnected`].
//!
//! So a dead or frozen node costs a fixed amount of memory and no task, at
//! any rate and any TTL. The one task per node lives as long as the client;
//! when the client is dropped it finishes what it was handed (bounded by the
//! grace) and ends.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::claim::Claim;
use crate::cluster::ClusterNode;
use crate::error::NodeError;
use crate::node::{Node, Reply};
use crate::proto::round::Step;
use crate::redis_node::RedisNode;
use crate::telemetry::NodeTelemetry;

/// A node call's outcome.
pub(crate) type Outcome = Result<Reply, NodeError>;

/// The default bound on calls in flight per node.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// A call's grace is this many node timeouts…
const GRACE_TIMEOUTS: u32 = 4;
/// …and never less than this: a loaded host is a normal host, and a
/// connection dropped for being slow can strand an acquire's key there
/// (its release then goes nowhere). The memory bound is `max_in_flight`
/// whatever the grace; the grace only says when to give up on a node.
const MIN_GRACE: Duration = Duration::from_secs(1);

/// How much one node may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Calls queued or awaiting an answer, at most.
    pub(crate) max_in_flight: usize,
    /// How long a call may wait for its answer.
    pub(crate) grace: Duration,
    /// A call the round stopped listening to that is unanswered this long
    /// (the node timeout) counts against the node's health at once, though
    /// it goes on until its grace.
    pub(crate) late: Duration,
}

impl Limits {
    /// The limits for a node timeout ceiling of `node_timeout`.
    pub(crate) fn new(max_in_flight: usize, node_timeout: Duration) -> Self {
        Limits {
            max_in_flight,
            grace: (node_timeout * GRACE_TIMEOUTS).max(MIN_GRACE),
            late: node_timeout,
        }
    }
}

/// A configured node: a Redis master, called directly, or one of the
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

    /// Performs one call, waiting at most `grace` for the answer.
    fn call(
        &self,
        claim: Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        grace: Duration,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        let member = self.clone();
        async move {
            let op = claim.op(step, ttl_ms);
            match &member {
                Member::Redis(node) => node.run(op, grace).await,
                Member::Cluster(node) => node.run(op, grace).await,
                Member::Custom(node) => tokio::time::timeout(grace, node.call(op))
                    .await
                    .unwrap_or(Err(NodeError::TimedOut)),
            }
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

/// A call's future: owns all it needs, so that it can move to the node's
/// delivery task.
type Boxed = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// One call to one node, already written (or queued on the connection) in
/// the order calls were made. Poll it for the answer; drop it to stop
/// listening: the node's delivery task then drives it to its end.
pub(crate) struct Call<'a> {
    node: &'a Dispatcher,
    state: State,
    /// The span the call was made in (its round's), for an answer that
    /// arrives after the round stopped listening.
    span: tracing::Span,
    /// When it was made.
    started: std::time::Instant,
}

enum State {
    Running(Boxed),
    /// Answered at once (refused, or done at the first poll), and not yet
    /// taken (`None` once it is).
    Answered(Option<Outcome>),
}

impl fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Running(_) => "running",
            State::Answered(Some(_)) => "answered",
            State::Answered(None) => "taken",
        };
        f.debug_struct("Call")
            .field("node", self.node.name())
            .field("state", &state)
            .finish()
    }
}

impl Call<'_> {
    /// Whether the call was made: not refused before it was sent, so it may
    /// take effect on the node.
    pub(crate) fn made(&self) -> bool {
        !matches!(
            self.state,
            State::Answered(Some(Err(
                NodeError::NotConnected(_) | NodeError::Overloaded(_)
            )))
        )
    }
}

impl Future for Call<'_> {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let answer = match &mut self.state {
            State::Running(future) => std::task::ready!(future.as_mut().poll(cx)),
            State::Answered(answer) => answer
                .take()
                .unwrap_or(Err(NodeError::Protocol("answer taken twice".into()))),
        };
        self.state = State::Answered(None);
        Poll::Ready(answer)
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let State::Running(mut future) = std::mem::replace(&mut self.state, State::Answered(None))
        else {
            return;
        };
        // Only a call the round stopped listening to can be late: one that
        // is still unanswered a node timeout after it was made counts against
        // the node's health at once (a frozen node shows within a node
        // timeout, not after the grace), though it goes on until its end.
        // Calls answered within their round need no timer of their own.
        let late = self.node.limits.late.saturating_sub(self.started.elapsed());
        let telemetry = Arc::clone(&self.node.telemetry);
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        let node = Arc::clone(self.node.name());
        let handed = std::time::Instant::now();
        self.node.deliver(Box::pin(async move {
            let outcome = match tokio::time::timeout(late, future.as_mut()).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    telemetry.late();
                    future.await
                }
            };
            // Logged in the round's span: the stragglers and the timeouts
            // that come after its decision.
            if !span.is_disabled() {
                tracing::debug!(
                    parent: &span,
                    node = %node,
                    ?outcome,
                    after_decision_ms = handed.elapsed().as_millis() as u64,
                    "answer after the decision"
                );
            }
            outcome
        }));
    }
}

/// A node's calls in flight, and the event of one ending.
#[derive(Debug, Default)]
struct InFlight {
    calls: AtomicUsize,
    /// Woken each time a call ends.
    ended: tokio::sync::Notify,
}

/// A slot of [`Limits::max_in_flight`], given back when the call that holds
/// it ends (answered, given up, or dropped).
struct Slot(Arc<InFlight>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}

/// One node's delivery: its bound, and the task that finishes the calls no
/// one listens to any more.
pub(crate) struct Dispatcher {
    member: Member,
    limits: Limits,
    /// Calls in flight: made and not yet finished.
    in_flight: Arc<InFlight>,
    /// Unbounded as a channel, bounded by `in_flight`: every call in it holds
    /// a slot.
    stragglers: mpsc::UnboundedSender<Boxed>,
    /// Every call's outcome, for metrics and the degradation log.
    telemetry: Arc<NodeTelemetry>,
    /// Set by [`close`](Self::close): every later call is refused.
    closed: std::sync::atomic::AtomicBool,
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
    /// Starts the node's delivery task. Needs a tokio runtime.
    pub(crate) fn start(member: Member, limits: Limits) -> Self {
        // Unbounded in type, bounded in fact: every call in it holds one of
        // the node's `max_in_flight` slots. The task ends once the
        // dispatcher (the only sender) is dropped and the calls handed to it
        // are done.
        let (stragglers, calls) = mpsc::unbounded_channel();
        tokio::spawn(finish(calls));
        let telemetry = Arc::new(NodeTelemetry::new(member.name()));
        Dispatcher {
            member,
            limits,
            in_flight: Arc::default(),
            stragglers,
            telemetry,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Refuses every call from now on (the client was shut down); the calls
    /// already made go on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
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
        self.in_flight.calls.load(Ordering::Relaxed)
    }

    /// Resolves once no call is in flight to the node, or once none of its
    /// calls has ended for a whole node timeout (it is unresponsive: its
    /// calls are written, and would land only if it came back before their
    /// grace). Every call ends by its grace, which bounds this too.
    pub(crate) async fn drained(&self) {
        loop {
            let ended = self.in_flight.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            if tokio::time::timeout(self.limits.late, ended).await.is_err() {
                return;
            }
        }
    }

    /// Makes `step` on `claim` on this node: written at once (or queued on
    /// the connection behind every earlier call), or refused at once — no
    /// connection, or [`Limits::max_in_flight`] calls already in flight.
    /// Once made, the call reaches the node exactly once (unless the
    /// connection fails under it), whatever becomes of the returned [`Call`].
    ///
    /// Needs a tokio runtime (the call's grace is a timer).
    pub(crate) fn call(&self, claim: &Arc<Claim>, step: Step, ttl_ms: u64) -> Call<'_> {
        let refused = |error: NodeError| {
            self.telemetry.refused(&error);
            Call {
                node: self,
                state: State::Answered(Some(Err(error))),
                span: tracing::Span::none(),
                started: std::time::Instant::now(),
            }
        };
        if self.closed.load(Ordering::Acquire) {
            return refused(NodeError::NotConnected("the client was shut down".into()));
        }
        if let Member::Redis(node) = &self.member
            && let Err(error) = node.ready()
        {
            return refused(error);
        }
        let limit = self.limits.max_in_flight;
        let took = self
            .in_flight
            .calls
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            });
        if took.is_err() {
            return refused(NodeError::Overloaded(limit));
        }
        let slot = Slot(Arc::clone(&self.in_flight));
        let call = self
            .member
            .call(Arc::clone(claim), step, ttl_ms, self.limits.grace);
        // Never held back by the task's budget: the first poll must write
        // the request (or queue it on the connection) now, in the order calls
        // are made.
        let telemetry = Arc::clone(&self.telemetry);
        telemetry.started();
        let started = std::time::Instant::now();
        let mut future: Boxed = Box::pin(tokio::task::coop::unconstrained(async move {
            let _slot = slot;
            let outcome = call.await;
            telemetry.ended(&outcome, started);
            outcome
        }));
        let state = match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(answer) => State::Answered(Some(answer)),
            Poll::Pending => State::Running(future),
        };
        let span = match state {
            State::Running(_) => tracing::Span::current(),
            State::Answered(_) => tracing::Span::none(),
        };
        Call {
            node: self,
            state,
            span,
            started,
        }
    }

    /// Hands an unfinished call to the delivery task. (If the task is gone —
    /// the runtime is shutting down — the call goes with it.)
    fn deliver(&self, future: Boxed) {
        let _ = self.stragglers.send(future);
    }
}

/// The node's delivery task: drives every call it is handed to its end (or
/// its grace). Ends once the client is gone and every call is done.
async fn finish(mut calls: mpsc::UnboundedReceiver<Boxed>) {
    // A call that panics (a custom node's) must not take the task, and with
    // it every later call, down.
    let mut running: FuturesUnordered<futures::future::CatchUnwind<AssertUnwindSafe<Boxed>>> =
        FuturesUnordered::new();
    let mut open = true;
    loop {
        if !open && running.is_empty() {
            return;
        }
        // Biased (finished calls first): unbiased branches are picked at
        // random, which a seeded simulation could not replay.
        tokio::select! {
            biased;
            Some(done) = running.next(), if !running.is_empty() => {
                if done.is_err() {
                    tracing::error!("a node call panicked; its slot is given back");
                }
            }
            call = calls.recv(), if open => match call {
                Some(call) => running.push(AssertUnwindSafe(call).catch_unwind()),
                None => open = false,
            },
            else => return,
        }
    }
}
