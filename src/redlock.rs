//! The coordinator: fans each operation out to every node at once, feeds the
//! replies to [`quorum::Round`], and returns at the decision.
//!
//! The shell around the pure quorum logic is deliberately thin. Its duties
//! are the ones the pure part cannot do: reading the clock before the first
//! request leaves, bounding the round by one timer, and cleaning up after a
//! failure on *every* node — including those that have not answered yet. A
//! node applies one connection's commands in order, so a release sent after an
//! acquire that is still in flight removes whatever that acquire sets.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::{Builder, Settings};
use crate::error::{Answer, ConfigError, LockError, NodeError, Votes};
use crate::lock::Lock;
use crate::node::{Node, Op, Reply};
use crate::quorum::{self, Decision, MAX_TTL_MS, Round, Vote};
use crate::token::Token;

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one `Arc`); every clone shares the node connections.
/// A lock is granted when a majority of the configured nodes — `N / 2 + 1`,
/// however many are reachable — agree within the validity window.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redquorum::Redlock;
///
/// let redlock = Redlock::connect([
///     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
///     "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
/// ]).await?;
/// let lock = redlock.lock("orders:42", Duration::from_secs(10)).await?;
/// // ... critical section, while lock.is_valid() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    nodes: Box<[Arc<dyn Node>]>,
    pub(crate) settings: Settings,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.nodes)
            .field("quorum", &self.quorum())
            .field("settings", &self.inner.settings)
            .finish()
    }
}

/// What a round asks of each node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Acquire,
    Extend,
    Release,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Acquire => "acquire",
            Kind::Extend => "extend",
            Kind::Release => "release",
        }
    }

    fn op<'a>(self, key: &'a str, token: &'a str, ttl_ms: u64) -> Op<'a> {
        match self {
            Kind::Acquire => Op::Acquire { key, token, ttl_ms },
            Kind::Extend => Op::Extend { key, token, ttl_ms },
            Kind::Release => Op::Release { key, token },
        }
    }

    /// Whether a reply counts towards the quorum. For a release, a node that
    /// no longer holds our key has confirmed what we wanted.
    fn vote(self, reply: &Result<Reply, NodeError>) -> Vote {
        match (self, reply) {
            (_, Ok(Reply::Done)) | (Kind::Release, Ok(Reply::NotHeld)) => Vote::Yes,
            _ => Vote::No,
        }
    }
}

/// A validated TTL: whole milliseconds as Redis sees them, and the validity a
/// holder may rely on (`ttl − drift`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttl {
    pub(crate) ms: u64,
    pub(crate) validity: Duration,
}

/// When a round may stop listening (the rest finishes in the background or
/// is dropped).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait<'a> {
    /// As soon as the vote decides.
    Decision,
    /// Once every node marked `true` has answered.
    Nodes(&'a [bool]),
}

/// Replies still in flight when a round decided.
pub(crate) type Pending = FuturesUnordered<BoxFuture<'static, (usize, Result<Reply, NodeError>)>>;

impl Redlock {
    /// A builder for every setting; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Connects to the Redis masters at `urls` with default settings.
    ///
    /// Waits at most the default node timeout (50 ms) for the first
    /// connections; see [`Builder::build`].
    pub async fn connect<I, S>(urls: I) -> Result<Redlock, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Redlock::builder().nodes(urls).build().await
    }

    pub(crate) fn new(nodes: Vec<Arc<dyn Node>>, settings: Settings) -> Self {
        Redlock {
            inner: Arc::new(Inner {
                nodes: nodes.into(),
                settings,
            }),
        }
    }

    /// The configured nodes' names (passwords masked), in order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| &**n.name())
    }

    /// How many nodes must agree: `N / 2 + 1` of the configured `N`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.inner.nodes.len())
    }

    /// One round: the lock if a quorum grants it in time, else the reason.
    ///
    /// On failure every key this round may have set is released before it
    /// returns (on nodes that answer within the node timeout; on the others in
    /// the background, behind the acquire on the same connection).
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) {
    /// use std::time::Duration;
    /// use redquorum::LockError;
    ///
    /// match redlock.try_lock("cron:nightly", Duration::from_secs(30)).await {
    ///     Ok(lock) => { /* run the job */ let _ = lock.release().await; }
    ///     Err(LockError::Taken { .. }) => { /* another host runs it */ }
    ///     Err(e) => eprintln!("lock failed: {e}"),
    /// }
    /// # }
    /// ```
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        let key = lock_key(resource)?;
        let ttl = self.inner.check_ttl(ttl)?;
        self.acquire(&key, ttl).await
    }

    /// Up to [`Retry::attempts`](crate::Retry::attempts) rounds, pausing a
    /// random time between them; the last round's error if all fail.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// let lock = redlock.lock("orders:42", std::time::Duration::from_secs(10)).await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        let key = lock_key(resource)?;
        let ttl = self.inner.check_ttl(ttl)?;
        let retry = self.inner.settings.retry;
        let mut attempt = 1;
        loop {
            let error = match self.acquire(&key, ttl).await {
                Ok(lock) => return Ok(lock),
                Err(e) => e,
            };
            if attempt >= retry.attempts() {
                return Err(error);
            }
            attempt += 1;
            tokio::time::sleep(retry.jitter(Duration::MAX)).await;
        }
    }

    /// Tries until the lock is had or `max_wait` has passed, then
    /// [`LockError::Timeout`] with the last round's error.
    ///
    /// Between rounds it sleeps a random time up to the retry delay, and never
    /// longer than the smallest remaining TTL another holder reported, so it
    /// wakes by the time an abandoned lock expires. A round never starts after
    /// `max_wait`, so the call returns within `max_wait` plus one round.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// let lock = redlock
    ///     .lock_wait("orders:42", Duration::from_secs(10), Duration::from_secs(5))
    ///     .await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_wait(
        &self,
        resource: &str,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, LockError> {
        let key = lock_key(resource)?;
        let ttl = self.inner.check_ttl(ttl)?;
        let retry = self.inner.settings.retry;
        let start = Instant::now();
        let give_up = start.checked_add(max_wait);
        loop {
            let error = match self.acquire(&key, ttl).await {
                Ok(lock) => return Ok(lock),
                Err(e) => e,
            };
            let now = Instant::now();
            let left = give_up.map_or(Duration::MAX, |g| g.saturating_duration_since(now));
            if left.is_zero() {
                return Err(LockError::Timeout {
                    waited: now - start,
                    last: Box::new(error),
                });
            }
            let holder_left = error
                .votes()
                .and_then(Votes::min_pttl)
                .unwrap_or(Duration::MAX);
            tokio::time::sleep(retry.jitter(holder_left).min(left)).await;
        }
    }

    async fn acquire(&self, key: &Arc<str>, ttl: Ttl) -> Result<Lock, LockError> {
        let inner = &self.inner;
        let token = Token::random();
        // The clock is read before the first request leaves.
        let t0 = Instant::now();
        let deadline = t0 + ttl.validity;
        let per_node = quorum::node_timeout(inner.settings.node_timeout, ttl.ms, ttl.validity);
        // If this future is dropped from here on, the guard releases whatever
        // the round has set.
        let mut guard = Abandoned {
            inner,
            key,
            token,
            ttl_ms: ttl.ms,
            armed: true,
        };
        let mut pending = inner.fan_out(Kind::Acquire, key, token, ttl.ms);
        let (decision, votes) = inner
            .collect(
                Kind::Acquire,
                key,
                &mut pending,
                t0 + per_node,
                Wait::Decision,
            )
            .await;
        // Stragglers are dropped: whatever they set is removed by the release
        // below, which each node applies after the acquire.
        drop(pending);
        if decision == Decision::Granted && Instant::now() < deadline {
            guard.armed = false; // the Lock owns the keys now
            return Ok(Lock::new(
                self.clone(),
                key.clone(),
                token,
                ttl.ms,
                deadline,
            ));
        }
        // Wait for the nodes that granted, so that a retry never meets our own
        // leftovers there; the others (silent, possibly frozen) are released
        // in the background, behind the acquire on the same connection.
        let granted: Vec<bool> = votes.iter().map(|(_, a)| *a == Answer::Yes).collect();
        inner
            .release(key, token, ttl.ms, Wait::Nodes(&granted))
            .await;
        guard.armed = false;
        Err(refusal(decision, votes))
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl Inner {
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

    /// Sends one operation to every node at once.
    pub(crate) fn fan_out(&self, kind: Kind, key: &Arc<str>, token: Token, ttl_ms: u64) -> Pending {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let node = Arc::clone(node);
                let key = Arc::clone(key);
                Box::pin(async move {
                    let reply = node.call(kind.op(&key, token.as_str(), ttl_ms)).await;
                    (i, reply)
                }) as BoxFuture<'static, _>
            })
            .collect()
    }

    /// Counts replies from `pending` until `wait` is satisfied or `until`
    /// passes; nodes silent by then count as timed out.
    pub(crate) async fn collect(
        &self,
        kind: Kind,
        key: &str,
        pending: &mut Pending,
        until: Instant,
        wait: Wait<'_>,
    ) -> (Decision, Votes) {
        let n = self.nodes.len();
        let span = tracing::debug_span!("redquorum.round", op = kind.name(), key, nodes = n);
        async move {
            let started = Instant::now();
            let mut round = Round::new(n);
            let mut answers = vec![Answer::Undecided; n];
            let timer = tokio::time::sleep_until(until);
            tokio::pin!(timer);
            loop {
                let done = match wait {
                    Wait::Decision => round.decision() != Decision::Pending,
                    Wait::Nodes(nodes) => nodes
                        .iter()
                        .zip(&answers)
                        .all(|(&w, a)| !w || *a != Answer::Undecided),
                };
                if done {
                    break;
                }
                tokio::select! {
                    biased;
                    Some((i, reply)) = pending.next() => {
                        round.record(kind.vote(&reply));
                        answers[i] = answer(reply);
                        tracing::debug!(
                            node = %self.nodes[i].name(),
                            answer = ?answers[i],
                            latency_us = started.elapsed().as_micros() as u64,
                        );
                    }
                    _ = &mut timer => {
                        for a in answers.iter_mut().filter(|a| **a == Answer::Undecided) {
                            *a = Answer::Failed(NodeError::TimedOut);
                            round.record(Vote::No);
                        }
                        break;
                    }
                }
            }
            let votes = Votes::new(
                self.nodes
                    .iter()
                    .map(|node| Arc::clone(node.name()))
                    .zip(answers)
                    .collect(),
            );
            tracing::debug!(decision = ?round.decision(), yes = round.yes(), no = round.no());
            (round.decision(), votes)
        }
        .instrument(span)
        .await
    }

    /// Releases `key` on every node. Returns once `wait` is satisfied or the
    /// node timeout passed; replies still in flight then are awaited in the
    /// background for up to the TTL, after which the key has expired anyway.
    pub(crate) async fn release(
        &self,
        key: &Arc<str>,
        token: Token,
        ttl_ms: u64,
        wait: Wait<'_>,
    ) -> (Decision, Votes) {
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl_ms, Duration::MAX);
        let mut pending = self.fan_out(Kind::Release, key, token, ttl_ms);
        let result = self
            .collect(
                Kind::Release,
                key,
                &mut pending,
                Instant::now() + per_node,
                wait,
            )
            .await;
        finish_in_background(pending, Duration::from_millis(ttl_ms));
        result
    }

    /// Releases `key` everywhere without waiting, for `Drop`. Needs a tokio
    /// runtime; without one the keys simply expire.
    pub(crate) fn release_detached(self: &Arc<Self>, key: Arc<str>, token: Token, ttl_ms: u64) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let pending = self.fan_out(Kind::Release, &key, token, ttl_ms);
            runtime.spawn(drain(pending, Duration::from_millis(ttl_ms)));
        }
    }
}

/// Releases an acquisition's keys on every node if the acquiring future is
/// dropped before it produced a `Lock` or finished cleaning up: cancelling a
/// `lock()` call never leaves a key behind for the TTL.
struct Abandoned<'a> {
    inner: &'a Arc<Inner>,
    key: &'a Arc<str>,
    token: Token,
    ttl_ms: u64,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner
                .release_detached(Arc::clone(self.key), self.token, self.ttl_ms);
        }
    }
}

/// Lets the rest of a release run on after the caller has its answer.
fn finish_in_background(pending: Pending, bound: Duration) {
    if !pending.is_empty() {
        tokio::spawn(drain(pending, bound));
    }
}

async fn drain(mut pending: Pending, bound: Duration) {
    let _ = tokio::time::timeout(bound, async { while pending.next().await.is_some() {} }).await;
}

fn answer(reply: Result<Reply, NodeError>) -> Answer {
    match reply {
        Ok(Reply::Done) => Answer::Yes,
        Ok(Reply::Held { pttl_ms }) => Answer::Held {
            pttl: u64::try_from(pttl_ms).ok().map(Duration::from_millis),
        },
        Ok(Reply::NotHeld) => Answer::NotHeld,
        Err(e) => Answer::Failed(e),
    }
}

/// The error for a round that did not produce a lock.
pub(crate) fn refusal(decision: Decision, votes: Votes) -> LockError {
    if decision == Decision::Granted {
        // A quorum agreed, but after the validity window closed.
        LockError::Expired { votes }
    } else if votes.held() > 0 {
        LockError::Taken { votes }
    } else if votes.iter().any(|(_, a)| *a == Answer::NotHeld) {
        LockError::Expired { votes }
    } else {
        LockError::Unavailable { votes }
    }
}

/// The lock key of a resource: `{resource}:lock`.
///
/// The hash tag keeps every key of one resource in one slot, should a node
/// ever be a cluster; the mapping is injective, so distinct resources never
/// share a key.
pub(crate) fn lock_key(resource: &str) -> Result<Arc<str>, ConfigError> {
    if resource.is_empty() {
        return Err(ConfigError::EmptyResource);
    }
    Ok(format!("{{{resource}}}:lock").into())
}

/// The resource a key from [`lock_key`] was made from.
pub(crate) fn resource_of(key: &str) -> &str {
    key.get(1..key.len().saturating_sub(6)).unwrap_or_default()
}
