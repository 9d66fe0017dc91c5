//! The driver: runs the protocol's rounds over the nodes. It makes the calls
//! (through each node's [`Dispatcher`], which delivers every call whether
//! or not a round still listens), reads the clock, arms the round's one
//! timer and feeds what the nodes answer to a [`Collector`]; what a round
//! decides from that is [`proto::round`](crate::proto::round)'s.
//!
//! Its own duties are the ones pure code cannot do: reading the clock
//! before the first request leaves, bounding a round by one timer, and
//! cleaning up after a failure on *every* node — including those that have
//! not answered yet, and when the caller drops the operation midway. A node
//! applies one client's calls in the order made, so a release made after an
//! acquire still in flight removes whatever that acquire sets.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::time::Instant;
use tracing::Instrument;

use crate::claim::{Claim, Keys};
use crate::dispatch::{Call, Dispatcher, Member, Outcome};
use crate::error::{Answer, ConfigError, LockError, NodeError, Votes};
use crate::proto::acquire::{Acquisition, Next};
use crate::proto::keys::KeyLayout;
use crate::proto::per_node::PerNode;
use crate::proto::quorum::{self, Decision, DriftFactor, MAX_TTL_MS};
use crate::proto::retry::{Backoff, Budget, Last, Next as Pause, Retry, WAKE_SPREAD};
use crate::proto::round::{Collector, Step, Tally, Wait, refusal};
use crate::wakeup::{Hub, Interest};

/// The validated settings every operation reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) drift_factor: DriftFactor,
    pub(crate) retry: Retry,
}

/// A checked TTL and the validity it leaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttl {
    pub(crate) ms: u64,
    pub(crate) validity: Duration,
}

/// What an acquisition holds: the claim, until when, and its fencing token.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) claim: Arc<Claim>,
    pub(crate) ttl_ms: u64,
    pub(crate) deadline: Instant,
    pub(crate) fence: Option<u64>,
}

/// How many rounds an acquisition may take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempts {
    /// The retry policy's count, with jittered pauses.
    Policy,
    /// Until a deadline (`None`: forever), sleeping no longer than the
    /// holder's TTL.
    Until(Option<Instant>),
}

/// Node masks, inline for up to this many nodes.
const INLINE: usize = 5;
type Mask = SmallVec<[bool; INLINE]>;

/// The nodes and what every operation shares.
pub(crate) struct Driver {
    nodes: Box<[Dispatcher]>,
    pub(crate) settings: Settings,
    /// Release notifications, for Redis nodes with notifications on.
    hub: Option<Arc<Hub>>,
    /// Some member is a Redis Cluster: a lock's keys must share a slot.
    clustered: bool,
    /// The pauses' random draws, when seeded (`Builder::jitter_seed`).
    jitter: Option<std::sync::Mutex<rand::rngs::StdRng>>,
    /// How resources map to keys.
    layout: KeyLayout,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("nodes", &self.nodes)
            .field("settings", &self.settings)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Driver {
    pub(crate) fn new(
        nodes: Vec<Dispatcher>,
        settings: Settings,
        layout: KeyLayout,
        hub: Option<Arc<Hub>>,
        jitter_seed: Option<u64>,
    ) -> Self {
        let clustered = nodes
            .iter()
            .any(|node| matches!(node.member(), Member::Cluster(_)));
        Driver {
            nodes: nodes.into(),
            settings,
            hub,
            clustered,
            jitter: jitter_seed
                .map(|seed| std::sync::Mutex::new(rand::SeedableRng::seed_from_u64(seed))),
            layout,
        }
    }

    /// How resources map to keys.
    pub(crate) fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// A uniform random `u64` for a pause: seeded if asked, else the
    /// operating system's.
    pub(crate) fn draw(&self) -> u64 {
        match &self.jitter {
            Some(rng) => rand::Rng::next_u64(
                &mut *rng
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
            None => rand::random(),
        }
    }

    /// The quorum of the nodes.
    pub(crate) fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    /// The nodes, in configured order.
    pub(crate) fn nodes(&self) -> &[Dispatcher] {
        &self.nodes
    }

    /// Every node and its calls in flight, in configured order.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&Member, usize)> {
        self.nodes
            .iter()
            .map(|node| (node.member(), node.in_flight()))
    }

    /// The release notifications, if on.
    pub(crate) fn hub(&self) -> Option<&Arc<Hub>> {
        self.hub.as_ref()
    }

    /// Refuses a lock whose keys a cluster member would spread over
    /// several slots ([`ConfigError::CrossSlot`]), before anything is sent.
    pub(crate) fn check_slots(&self, keys: &Keys) -> Result<(), ConfigError> {
        if !self.clustered || keys.one_slot() {
            return Ok(());
        }
        Err(ConfigError::CrossSlot {
            resources: keys.resources().map(str::to_owned).collect(),
        })
    }

    /// Checks a TTL: 1 ms to 2^40 ms (sub-millisecond parts are dropped, as
    /// Redis would), and longer than its drift allowance.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Ttl, ConfigError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 || ms > MAX_TTL_MS {
            return Err(ConfigError::InvalidTtl(ttl));
        }
        let factor = self.settings.drift_factor;
        let validity = factor.validity(ms).ok_or(ConfigError::TtlNotAboveDrift {
            ttl,
            drift: factor.drift(ms),
        })?;
        Ok(Ttl { ms, validity })
    }

    /// A round's answers with the nodes' names, as errors report them.
    pub(crate) fn votes(&self, answers: PerNode<Answer>) -> Votes {
        let names = self.nodes.iter().map(|node| Arc::clone(node.name()));
        Votes::new(names.zip(answers).collect())
    }

    /// One acquisition: one round, or two for a fenced lock. `holder_ttl`:
    /// a refusal must say how long the holder's keys live.
    ///
    /// On failure every key the round may have set is released before it
    /// returns (waiting for the nodes that granted; the others get the
    /// release behind the acquire), and so it is if this future is dropped.
    pub(crate) async fn acquire(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        holder_ttl: bool,
    ) -> Result<Held, LockError> {
        // The clock is read before the first request leaves.
        let t0 = Instant::now();
        let deadline = t0 + ttl.validity;
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl.ms, ttl.validity);
        let step = Step::Acquire { holder_ttl };
        let mut calls = self.submit(claim, step, ttl.ms, None);
        // If this future is dropped from here on, the guard releases whatever
        // the round may have set: on every node the acquire was handed to,
        // behind it. (A reentrant release names its hold, so where the hold
        // was not counted it changes nothing.)
        let mut guard = Abandoned {
            driver: self,
            claim,
            ttl_ms: ttl.ms,
            only: calls.made(),
            armed: true,
        };
        let mut tally = self
            .collect(step, &mut calls, t0 + per_node, Wait::Decision)
            .await;
        // Calls still in flight go on: the lock reaches every node that
        // answers, not a bare quorum.
        drop(calls);
        let mut acquisition = Acquisition::default();
        loop {
            match acquisition.next(tally, Instant::now() < deadline) {
                Next::WriteBack { fence, to } => {
                    // Fenced phase 2, bounded by what is left of the validity.
                    let now = Instant::now();
                    let per_node = quorum::node_timeout(
                        self.settings.node_timeout,
                        ttl.ms,
                        deadline.saturating_duration_since(now),
                    );
                    let step = Step::WriteBack(fence);
                    let mut calls = self.submit(claim, step, ttl.ms, Some(&to));
                    tally = self
                        .collect(step, &mut calls, now + per_node, Wait::Decision)
                        .await;
                }
                Next::Granted { fence } => {
                    guard.armed = false; // the Lock owns the keys now
                    return Ok(Held {
                        claim: Arc::clone(claim),
                        ttl_ms: ttl.ms,
                        deadline,
                        fence,
                    });
                }
                Next::Refused {
                    wait_for,
                    behind,
                    decision,
                    answers,
                } => {
                    // Wait for the nodes that granted, so that a retry never
                    // meets our own leftovers there; the others (silent,
                    // possibly frozen) get the release behind the acquire.
                    guard.armed = false; // handed over at the release's first poll
                    let wait = Wait::Nodes(&wait_for);
                    self.give_back(Step::Undo, claim, ttl.ms, wait, Some(&behind))
                        .await;
                    return Err(refusal(decision, self.votes(answers)));
                }
            }
        }
    }

    /// Rounds until one grants or `attempts` runs out.
    pub(crate) async fn acquire_repeatedly(
        &self,
        mut keys: Keys,
        owner: Option<&str>,
        ttl: Ttl,
        attempts: Attempts,
    ) -> Result<Held, LockError> {
        let retry = self.settings.retry;
        let start = Instant::now();
        // A waiter listens for releases from its first refusal on, for as
        // long as it waits (registered only then: a lock had at once costs
        // the subscribers nothing).
        let mut interest: Option<Interest> = None;
        // A waiter sleeps until the holder's keys expire, so it asks how
        // long they live.
        let holder_ttl = matches!(attempts, Attempts::Until(_));
        let mut backoff = Backoff::default();
        // A refused writer's intent, taken back if this future is dropped
        // while it waits (a caller that stops waiting gives up).
        let mut intent = GiveUpOnDrop {
            driver: self,
            claim: None,
            ttl_ms: ttl.ms,
        };
        loop {
            let claim = Arc::new(match owner {
                Some(owner) => Claim::owned(keys, owner)?,
                None => Claim::new(keys), // a fresh token every round
            });
            if let Some(interest) = &mut interest {
                interest.mark_seen();
            }
            let error = match self.acquire(&claim, ttl, holder_ttl).await {
                Ok(held) => {
                    // The lock's release clears its intent; earlier rounds'
                    // marks were replaced by later ones.
                    intent.claim = None;
                    return Ok(held);
                }
                Err(e) => e,
            };
            if claim.keys().marks_refusals() {
                intent.claim = Some(Arc::clone(&claim));
            }
            // Only a retry pays for a copy of the keys.
            keys = claim.keys().clone();
            if let (Attempts::Until(_), Some(hub), None) = (attempts, self.hub(), &interest) {
                interest = Some(hub.register(keys.first()));
            }
            let now = Instant::now();
            let budget = match attempts {
                Attempts::Policy => Budget::Attempts,
                Attempts::Until(give_up) => {
                    Budget::Until(give_up.map(|g| g.saturating_duration_since(now)))
                }
            };
            let last = Last {
                collided: error.votes().is_some_and(|v| v.yes() > 0),
                holder_left: error.votes().and_then(Votes::min_pttl),
                woken: interest.as_ref().is_some_and(Interest::listening),
            };
            let pause = match backoff.next(&retry, budget, last, self.draw()) {
                Pause::After(pause) => pause,
                Pause::Stop => {
                    intent.give_up();
                    return Err(error);
                }
                Pause::TimedOut => {
                    intent.give_up();
                    return Err(LockError::Timeout {
                        waited: now - start,
                        last: Box::new(error),
                    });
                }
            };
            match &mut interest {
                Some(interest) => {
                    // Biased, as every select here: tokio picks unbiased
                    // branches at random, which a seeded simulation
                    // could not replay.
                    tokio::select! {
                        biased;
                        () = tokio::time::sleep(pause) => {}
                        () = interest.released() => {
                            // Every waiter hears the same release: stagger
                            // them so that one wins the nodes instead of all
                            // splitting the vote.
                            tokio::time::sleep(retry.jitter(WAKE_SPREAD, self.draw())).await;
                        }
                    }
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Ends the client's work on the nodes: refuses every later call and
    /// waits until every call already made has ended (answered, or given up
    /// at its node's grace, which bounds the wait).
    pub(crate) async fn shutdown(&self) {
        for node in self.nodes.iter() {
            node.close();
        }
        futures::future::join_all(self.nodes.iter().map(Dispatcher::drained)).await;
    }

    /// Extends `claim` to `ttl` from now, if it is still valid at
    /// `deadline`: the new deadline (the later of the two) once a quorum
    /// confirmed before it.
    pub(crate) async fn extend(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        deadline: Instant,
    ) -> Result<Instant, LockError> {
        let t1 = Instant::now();
        if t1 >= deadline {
            return Err(LockError::Expired {
                votes: Votes::new(Box::new([])),
            });
        }
        let new_deadline = t1 + ttl.validity;
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl.ms, ttl.validity);
        // Handed to every node at once: nodes that answer after the decision
        // get the extension all the same.
        let mut calls = self.submit(claim, Step::Extend, ttl.ms, None);
        let tally = self
            .collect(Step::Extend, &mut calls, t1 + per_node, Wait::Decision)
            .await;
        if tally.decision == Decision::Granted && Instant::now() < new_deadline {
            Ok(deadline.max(new_deadline))
        } else {
            Err(refusal(tally.decision, self.votes(tally.answers)))
        }
    }

    /// Releases `claim` on every node (or those marked in `only`). Returns
    /// once `wait` is satisfied or the node timeout passed; the calls still
    /// in flight then reach their nodes all the same (bounded by each node's
    /// grace), with no task of their own.
    ///
    /// The calls are handed over at the first poll: from then on, dropping
    /// this future changes nothing on the nodes.
    pub(crate) async fn release(
        &self,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        wait: Wait<'_>,
        only: Option<&[bool]>,
    ) -> Tally {
        self.give_back(Step::Release, claim, ttl_ms, wait, only)
            .await
    }

    /// [`release`](Self::release) as `step`: [`Step::Release`], or
    /// [`Step::Undo`] for a refused round.
    async fn give_back(
        &self,
        step: Step,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        wait: Wait<'_>,
        only: Option<&[bool]>,
    ) -> Tally {
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl_ms, Duration::MAX);
        let until = Instant::now() + per_node;
        let mut calls = self.submit(claim, step, ttl_ms, only);
        self.collect(step, &mut calls, until, wait).await
    }

    /// Reads what every node holds under `claim`'s keys ([`Step::Inspect`]),
    /// waiting for each at most the node timeout (the configured one, or
    /// [`DEFAULT_NODE_TIMEOUT`](quorum::DEFAULT_NODE_TIMEOUT)); a node silent
    /// by then answers [`NodeError::TimedOut`].
    pub(crate) async fn gather(&self, claim: &Arc<Claim>) -> Vec<Outcome> {
        let wait = self
            .settings
            .node_timeout
            .unwrap_or(quorum::DEFAULT_NODE_TIMEOUT);
        let until = Instant::now() + wait;
        let mut calls = self.submit(claim, Step::Inspect, 0, None);
        let mut outcomes: Vec<Option<Outcome>> = vec![None; self.nodes.len()];
        let timer = tokio::time::sleep_until(until);
        tokio::pin!(timer);
        loop {
            tokio::select! {
                biased;
                next = calls.next() => match next {
                    Some((i, outcome)) => outcomes[i] = Some(outcome),
                    None => break,
                },
                () = &mut timer => break,
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Err(NodeError::TimedOut)))
            .collect()
    }

    /// Makes a release of `claim` on every node (or those marked in `only`)
    /// without waiting, for `Drop`. Outside a tokio runtime nothing is sent
    /// (the keys expire at their TTL).
    pub(crate) fn release_detached(&self, claim: &Arc<Claim>, ttl_ms: u64, only: Option<&[bool]>) {
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(self.submit(claim, Step::Release, ttl_ms, only));
        }
    }

    /// Makes one operation on every node at once (or on those marked in
    /// `only`). Each call is written whatever becomes of the returned
    /// [`Calls`]; a node that cannot take it answers at once.
    fn submit(
        &self,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
    ) -> Calls<'_> {
        let asked: Mask = (0..self.nodes.len())
            .map(|i| only.is_none_or(|only| only[i]))
            .collect();
        let span = tracing::debug_span!(
            "redquorum.round",
            op = step.name(),
            key = claim.keys().first(),
            nodes = self.nodes.len()
        );
        // Made inside the round's span: an answer that arrives after the
        // decision is logged in it.
        let calls = span.in_scope(|| {
            self.nodes
                .iter()
                .zip(&asked)
                .map(|(node, &asked)| asked.then(|| node.call(claim, step, ttl_ms)))
                .collect()
        });
        Calls { calls, asked, span }
    }

    /// Feeds the answers from `calls` to a round until it may stop
    /// listening (`wait`) or `until` passes; nodes silent by then count as
    /// timed out.
    async fn collect(
        &self,
        step: Step,
        calls: &mut Calls<'_>,
        until: Instant,
        wait: Wait<'_>,
    ) -> Tally {
        let span = calls.span.clone();
        async move {
            // A round whose every node refuses at once (none connected)
            // never waits on anything: it still counts against the task's
            // budget, so a caller looping on it lets the runtime run the
            // reconnects (and timers) it needs.
            tokio::task::coop::consume_budget().await;
            let started = Instant::now();
            let mut round = Collector::new(step, &calls.asked);
            let timer = tokio::time::sleep_until(until);
            tokio::pin!(timer);
            while !round.is_done(wait) {
                tokio::select! {
                    biased;
                    next = calls.next() => {
                        let Some((i, reply)) = next else { break };
                        round.on_reply(i, reply);
                        tracing::debug!(
                            node = %self.nodes[i].name(),
                            answer = ?round.answer(i),
                            latency_us = started.elapsed().as_micros() as u64,
                        );
                    }
                    _ = &mut timer => {
                        round.on_timeout();
                        break;
                    }
                }
            }
            let (decision, yes, no) = round.counts();
            // The nodes not heard from by the decision: their answers (or
            // timeouts) come later, in this span.
            let late: Vec<&str> = calls
                .calls
                .iter()
                .enumerate()
                .filter(|(_, call)| call.is_some())
                .map(|(i, _)| &**self.nodes[i].name())
                .collect();
            tracing::debug!(?decision, yes, no, ?late);
            round.finish()
        }
        .instrument(span)
        .await
    }
}

/// One round's calls, by node.
#[derive(Debug)]
struct Calls<'a> {
    calls: SmallVec<[Option<Call<'a>>; INLINE]>,
    asked: Mask,
    /// The round's span.
    span: tracing::Span,
}

impl Calls<'_> {
    /// The nodes a call was made to (not refused at once).
    fn made(&self) -> Mask {
        self.calls
            .iter()
            .map(|call| call.as_ref().is_some_and(Call::made))
            .collect()
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, Outcome)>> {
        let mut waiting = false;
        for (i, slot) in self.calls.iter_mut().enumerate() {
            let Some(call) = slot else { continue };
            match Pin::new(call).poll(cx) {
                Poll::Ready(answer) => {
                    *slot = None;
                    return Poll::Ready(Some((i, answer)));
                }
                Poll::Pending => waiting = true,
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    }

    /// The next answer, and from which node; `None` once all have answered.
    async fn next(&mut self) -> Option<(usize, Outcome)> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// What the last refused round of a caller that gives up left on the nodes
/// that refused it: a writer's intent, which would turn readers away for a
/// writer no longer coming. Taken back when the caller gives up (its
/// retries spent, its wait over) or is dropped while it waits: released on
/// every node, without waiting (a node where the intent holds another
/// writer's token keeps it); [`Driver::shutdown`] waits for those calls.
/// Other claims leave nothing on a refusing node.
struct GiveUpOnDrop<'a> {
    driver: &'a Driver,
    /// The last refused round's claim, if it marks refusals.
    claim: Option<Arc<Claim>>,
    ttl_ms: u64,
}

impl GiveUpOnDrop<'_> {
    fn give_up(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.driver.release_detached(&claim, self.ttl_ms, None);
        }
    }
}

impl Drop for GiveUpOnDrop<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Releases an acquisition's keys if the acquiring future is dropped
/// before it produced a `Lock` or handed over its clean-up: cancelling a
/// `lock()` call never leaves a key behind for the TTL.
struct Abandoned<'a> {
    driver: &'a Driver,
    claim: &'a Arc<Claim>,
    ttl_ms: u64,
    /// The nodes the acquire was handed to.
    only: Mask,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.driver
                .release_detached(self.claim, self.ttl_ms, Some(&self.only));
        }
    }
}
