//! Delivery to one node: every call a round submits reaches the node whether
//! or not anyone still waits for its answer, and what a node can cost the
//! client is bounded.
//!
//! A round does not drive its node calls itself. redis-rs' multiplexed
//! connection never writes a request whose caller has stopped waiting, so a
//! round that decided at the quorum and dropped the calls still pending would
//! leave its lock on a bare quorum (DESIGN §1.7). Instead each node has one
//! task, started with the client, that takes submitted calls from a queue,
//! in order, and drives every one to its end; the caller holds only a
//! [`Ticket`] for the answer, and dropping it changes nothing on the node.
//! Submitting is synchronous, so a call is either handed over (and then
//! happens exactly once) or refused at once — nothing in between that a
//! cancelled caller could leave half done (DESIGN §1.9).
//!
//! The bounds (DESIGN §1.8), per node:
//!
//! - at most [`Limits::max_in_flight`] calls are queued or awaiting their
//!   answer; past it a submit fails at once with [`NodeError::Overloaded`];
//! - a call waits at most [`Limits::grace`] for its answer (a small multiple
//!   of the node timeout). A Redis node that lets a call pass it is
//!   unresponsive: its connection is dropped — which frees everything queued
//!   on it — and re-established in the background, and until then every
//!   submit fails at once with [`NodeError::NotConnected`].
//!
//! So a dead or frozen node costs a fixed amount of memory and no task, at
//! any rate and any TTL. The one task per node lives as long as the client;
//! when the client is dropped it finishes what was submitted (bounded by the
//! grace) and ends.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

use crate::claim::{Claim, Step};
use crate::error::NodeError;
use crate::node::{Node, Reply};
use crate::redis_node::RedisNode;

/// A node call's outcome.
pub(crate) type Outcome = Result<Reply, NodeError>;

/// The default bound on calls in flight per node.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// A call's grace is this many node timeouts…
const GRACE_TIMEOUTS: u32 = 4;
/// …and never less than this (a loaded host is a normal host).
const MIN_GRACE: Duration = Duration::from_millis(200);

/// How much one node may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Calls queued or awaiting an answer, at most.
    pub(crate) max_in_flight: usize,
    /// How long a call may wait for its answer.
    pub(crate) grace: Duration,
}

impl Limits {
    /// The limits for a node timeout ceiling of `node_timeout`.
    pub(crate) fn new(max_in_flight: usize, node_timeout: Duration) -> Self {
        Limits {
            max_in_flight,
            grace: (node_timeout * GRACE_TIMEOUTS).max(MIN_GRACE),
        }
    }
}

/// A configured node: a Redis master, called directly, or one of the
/// caller's own behind the [`Node`] trait.
#[derive(Clone)]
pub(crate) enum Member {
    Redis(Arc<RedisNode>),
    Custom(Arc<dyn Node>),
}

impl Member {
    pub(crate) fn name(&self) -> &Arc<str> {
        match self {
            Member::Redis(node) => node.name(),
            Member::Custom(node) => node.name(),
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
            Member::Custom(node) => node.fmt(f),
        }
    }
}

/// The answer to one submitted call, when the node gives it. Dropping it
/// does not cancel the call.
#[derive(Debug)]
pub(crate) struct Ticket(oneshot::Receiver<Outcome>);

impl Future for Ticket {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(NodeError::Connection("client closed".into()))))
    }
}

/// One submitted call, on its way to the node task.
struct Job {
    claim: Arc<Claim>,
    step: Step,
    ttl_ms: u64,
    reply: oneshot::Sender<Outcome>,
}

/// One node's delivery: its queue, its bound and its task.
pub(crate) struct Dispatcher {
    member: Member,
    limits: Limits,
    /// Calls queued or awaiting an answer (decremented by the task).
    in_flight: Arc<AtomicUsize>,
    /// Unbounded as a channel, bounded by `in_flight`: a job is only sent
    /// with a slot counted.
    queue: mpsc::UnboundedSender<Job>,
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
    /// Starts the node's task. Needs a tokio runtime.
    pub(crate) fn start(member: Member, limits: Limits) -> Self {
        let (queue, jobs) = mpsc::unbounded_channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        tokio::spawn(deliver(
            member.clone(),
            limits,
            Arc::clone(&in_flight),
            jobs,
        ));
        Dispatcher {
            member,
            limits,
            in_flight,
            queue,
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        self.member.name()
    }

    /// Calls queued or awaiting an answer right now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Hands `step` on `claim` to the node, or refuses at once: no
    /// connection, or [`Limits::max_in_flight`] calls already in flight.
    /// Once handed over, the call reaches the node exactly once (unless the
    /// connection fails under it), in submission order, whatever becomes of
    /// the ticket.
    pub(crate) fn submit(
        &self,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
    ) -> Result<Ticket, NodeError> {
        if let Member::Redis(node) = &self.member {
            node.ready()?;
        }
        let limit = self.limits.max_in_flight;
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= limit {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(NodeError::Overloaded(limit));
        }
        let (reply, answer) = oneshot::channel();
        let job = Job {
            claim: Arc::clone(claim),
            step,
            ttl_ms,
            reply,
        };
        if self.queue.send(job).is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(NodeError::Connection("client closed".into()));
        }
        Ok(Ticket(answer))
    }
}

/// The node's task: starts every job in the order submitted and drives it
/// to its answer (or its grace), whoever still waits for it. Ends once the
/// client is gone and everything submitted is done.
async fn deliver(
    member: Member,
    limits: Limits,
    in_flight: Arc<AtomicUsize>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    loop {
        if !open && running.is_empty() {
            return;
        }
        tokio::select! {
            // New jobs first: each is started (and so written) before any
            // later one, which keeps one caller's calls in order.
            biased;
            job = jobs.recv(), if open => match job {
                Some(Job { claim, step, ttl_ms, reply }) => {
                    let call = member.call(claim, step, ttl_ms, limits.grace);
                    running.push(async move {
                        let _ = reply.send(call.await);
                    });
                }
                None => open = false,
            },
            Some(()) = running.next(), if !running.is_empty() => {
                in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            else => return,
        }
    }
}
