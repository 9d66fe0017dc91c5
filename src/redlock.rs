//! The coordinator: fans each operation out to every node at once, feeds the
//! replies to [`quorum::Round`], and returns at the decision.
//!
//! The shell around the pure quorum logic is deliberately thin. Its duties
//! are the ones the pure part cannot do: reading the clock before the first
//! request leaves, bounding the round by one timer, and cleaning up after a
//! failure on *every* node — including those that have not answered yet. A
//! round hands its calls to each node's [`Dispatcher`], which writes every one
//! whether or not the round still listens; the round only collects answers.
//! A node applies one client's calls in the order submitted, so a release
//! submitted after an acquire that is still in flight removes whatever that
//! acquire sets.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use smallvec::{SmallVec, smallvec};
use tokio::time::Instant;
use tracing::Instrument;

use crate::claim::{Claim, Keys, Step};
use crate::config::{Builder, LockOptions, Settings};
use crate::dispatch::{Call, Dispatcher, Member, Outcome};
use crate::error::{Answer, ConfigError, LockError, NodeError, Votes};
use crate::lock::Lock;
use crate::node::Reply;
use crate::quorum::{self, Decision, MAX_TTL_MS, Round, Vote};
use crate::wakeup::{Hub, Interest};

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
    nodes: Box<[Dispatcher]>,
    pub(crate) settings: Settings,
    /// Release notifications, for Redis nodes with notifications on.
    hub: Option<Arc<Hub>>,
    /// Some member is a Redis Cluster: a lock's keys must share a slot.
    clustered: bool,
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

/// Whether a reply counts towards the quorum. For a release, a node that no
/// longer holds our key has confirmed what we wanted.
fn vote(step: Step, reply: &Result<Reply, NodeError>) -> Vote {
    match (step, reply) {
        (_, Ok(Reply::Done | Reply::Fence(_))) | (Step::Release, Ok(Reply::NotHeld)) => Vote::Yes,
        _ => Vote::No,
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

/// Nodes a round keeps inline (enough for 3 or 5 nodes); more spill to
/// the heap.
const INLINE: usize = 5;

/// One round's calls, by node index (`None`: not asked, or answered).
/// Dropping it stops listening, never the calls: each unfinished one is
/// driven to its end by its node's delivery task (see [`Dispatcher`]).
#[derive(Debug)]
pub(crate) struct Calls<'a> {
    calls: SmallVec<[Option<Call<'a>>; INLINE]>,
    asked: SmallVec<[bool; INLINE]>,
}

impl Calls<'_> {
    /// The nodes the calls were made to (not refused before being sent):
    /// only there can they take effect.
    fn made(&self) -> SmallVec<[bool; INLINE]> {
        self.calls
            .iter()
            .map(|call| call.as_ref().is_some_and(Call::made))
            .collect()
    }

    /// Whether node `i` was asked.
    fn asked(&self, i: usize) -> bool {
        self.asked[i]
    }

    /// The next answer, `None` once every node asked has answered.
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

    async fn next(&mut self) -> Option<(usize, Outcome)> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// Every node's answer in one round, by node index: inline for up to
/// [`INLINE`] nodes, so a round that succeeds allocates nothing for them.
pub(crate) type Answers = SmallVec<[Answer; INLINE]>;

/// The outcome of one round.
pub(crate) struct Tally {
    pub(crate) decision: Decision,
    /// Named as [`Votes`] only when someone reads them ([`Inner::votes`]).
    pub(crate) answers: Answers,
    /// The largest fencing counter among the grants, for fenced acquires.
    pub(crate) fence: Option<u64>,
}

/// The spread of woken waiters' retries, doubled after each collision.
const WAKE_SPREAD: Duration = Duration::from_millis(3);

/// How many rounds an acquisition may take.
#[derive(Debug, Clone, Copy)]
enum Attempts {
    /// The retry policy's count, with jittered pauses.
    Policy,
    /// Until a deadline, sleeping no longer than the holder's TTL.
    Until(Option<Instant>),
}

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

    pub(crate) fn new(nodes: Vec<Dispatcher>, settings: Settings, hub: Option<Arc<Hub>>) -> Self {
        let clustered = nodes
            .iter()
            .any(|node| matches!(node.member(), Member::Cluster(_)));
        Redlock {
            inner: Arc::new(Inner {
                nodes: nodes.into(),
                settings,
                hub,
                clustered,
            }),
        }
    }

    /// The configured nodes' names (passwords masked), in order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| &**n.name())
    }

    /// Per node (name, in configured order): the calls queued or awaiting an
    /// answer right now. Never above [`Builder::max_in_flight`]; a node near
    /// the bound is slow or frozen.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let redlock = redquorum::Redlock::builder().nodes(["redis://127.0.0.1:1"]).build().await.unwrap();
    /// for (node, calls) in redlock.in_flight() {
    ///     println!("{node}: {calls} calls in flight");
    /// }
    /// # }
    /// ```
    pub fn in_flight(&self) -> impl Iterator<Item = (&str, usize)> {
        self.inner
            .nodes
            .iter()
            .map(|node| (&**node.name(), node.in_flight()))
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
        let keys = Keys::single(resource, false)?;
        self.inner.check_slots(&keys)?;
        let ttl = self.inner.check_ttl(ttl)?;
        self.acquire(&Arc::new(Claim::new(keys)), ttl, false).await
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
        self.lock_with(resource, ttl, &LockOptions::new()).await
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
        self.lock_with(resource, ttl, &LockOptions::new().wait(max_wait))
            .await
    }

    /// A lock carrying a fencing token ([`Lock::fence`]) that is larger than
    /// that of every earlier holder of `resource`, retrying per policy.
    ///
    /// Two rounds: the first takes the lease and increments a per-node
    /// counter, the second writes the largest counter seen back to the nodes
    /// that granted. The token is granted only when a quorum confirmed the
    /// write-back before the deadline. Hand the token to the resource you
    /// protect and have it reject writes carrying a smaller one: that stops a
    /// holder that paused past its validity. See `docs/fencing.md`.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// let lock = redlock.lock_fenced("ledger", std::time::Duration::from_secs(10)).await?;
    /// let token: u64 = lock.fence().expect("fenced locks carry a token");
    /// // storage.write_if_newer(token, ...)
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_fenced(&self, resource: &str, ttl: Duration) -> Result<Lock, LockError> {
        self.lock_with(resource, ttl, &LockOptions::new().fenced())
            .await
    }

    /// A lock with explicit [`LockOptions`]: how long to wait, whether to
    /// carry a fencing token.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// use redquorum::LockOptions;
    /// let options = LockOptions::new().fenced().wait(Duration::from_secs(5));
    /// let lock = redlock.lock_with("ledger", Duration::from_secs(10), &options).await?;
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Lock, LockError> {
        let keys = Keys::single(resource, options.is_fenced())?;
        self.inner.check_slots(&keys)?;
        let ttl = self.inner.check_ttl(ttl)?;
        let attempts = match options.max_wait() {
            None => Attempts::Policy,
            Some(max_wait) => Attempts::Until(Instant::now().checked_add(max_wait)),
        };
        self.acquire_repeatedly(keys, None, ttl, attempts).await
    }

    /// One lock over several resources, retrying per policy: on each node
    /// either every resource is set or none is, so two holders of
    /// overlapping sets never both get a quorum. Extend and release act on
    /// all of them.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// let lock = redlock.lock_many(&["account:1", "account:2"], Duration::from_secs(5)).await?;
    /// assert_eq!(lock.resources().count(), 2);
    /// lock.release().await
    /// # }
    /// ```
    pub async fn lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, LockError> {
        let keys = Keys::many(resources)?;
        self.inner.check_slots(&keys)?;
        let ttl = self.inner.check_ttl(ttl)?;
        self.acquire_repeatedly(keys, None, ttl, Attempts::Policy)
            .await
    }

    /// A reentrant lock, retrying per policy: `owner` may take `resource`
    /// again while it holds it (each hold adds one to a per-owner count and
    /// refreshes the TTL), another owner is refused with
    /// [`LockError::Taken`], and each [`Lock::release`] gives one hold back;
    /// the key goes when the count reaches zero.
    ///
    /// The owner name is the identity: give every process (or task) that must
    /// exclude the others a distinct one. Quorum and validity rules are those
    /// of plain locks; each returned `Lock` has its own deadline.
    ///
    /// ```no_run
    /// # async fn demo(redlock: redquorum::Redlock) -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// let outer = redlock.lock_reentrant("job", Duration::from_secs(10), "worker-7").await?;
    /// let inner = redlock.lock_reentrant("job", Duration::from_secs(10), "worker-7").await?;
    /// inner.release().await?; // still held by `outer`
    /// outer.release().await
    /// # }
    /// ```
    pub async fn lock_reentrant(
        &self,
        resource: &str,
        ttl: Duration,
        owner: &str,
    ) -> Result<Lock, LockError> {
        let keys = Keys::reentrant(resource)?;
        self.inner.check_slots(&keys)?;
        let ttl = self.inner.check_ttl(ttl)?;
        self.acquire_repeatedly(keys, Some(owner), ttl, Attempts::Policy)
            .await
    }

    /// Rounds until one grants or `attempts` runs out.
    async fn acquire_repeatedly(
        &self,
        mut keys: Keys,
        owner: Option<&str>,
        ttl: Ttl,
        attempts: Attempts,
    ) -> Result<Lock, LockError> {
        let retry = self.inner.settings.retry;
        let start = Instant::now();
        // A waiter listens for releases from its first refusal on, for as
        // long as it waits (registered only then: a lock had at once costs
        // the subscribers nothing).
        let mut interest: Option<Interest> = None;
        // A waiter sleeps until the holder's keys expire, so it asks how
        // long they live.
        let holder_ttl = matches!(attempts, Attempts::Until(_));
        let mut round = 1;
        let mut collisions = 0;
        loop {
            let claim = Arc::new(match owner {
                Some(owner) => Claim::owned(keys, owner)?,
                None => Claim::new(keys), // a fresh token every round
            });
            if let Some(interest) = &mut interest {
                interest.mark_seen();
            }
            let error = match self.acquire(&claim, ttl, holder_ttl).await {
                Ok(lock) => return Ok(lock),
                Err(e) => e,
            };
            // Only a retry pays for a copy of the keys.
            keys = claim.keys().clone();
            if let (Attempts::Until(_), Some(hub), None) = (attempts, &self.inner.hub, &interest) {
                interest = Some(hub.register(keys.first()));
            }
            // A round that won some nodes but lost collided with another
            // contender: no release will announce the end of that, so retry
            // after a short random pause, doubled per collision (binary
            // backoff). One that won none lost to a holder, whose release
            // will wake us.
            let collided = error.votes().is_some_and(|v| v.yes() > 0);
            collisions = if collided { (collisions + 1).min(6) } else { 0 };
            let pause = match attempts {
                Attempts::Policy if round >= retry.attempts() => return Err(error),
                Attempts::Policy => retry.jitter(Duration::MAX),
                Attempts::Until(give_up) => {
                    let now = Instant::now();
                    let left = give_up.map_or(Duration::MAX, |g| g.saturating_duration_since(now));
                    if left.is_zero() {
                        return Err(LockError::Timeout {
                            waited: now - start,
                            last: Box::new(error),
                        });
                    }
                    let holder_left = error.votes().and_then(Votes::min_pttl);
                    let woken = interest.as_ref().is_some_and(Interest::listening);
                    match holder_left {
                        _ if woken && collided => retry.jitter(WAKE_SPREAD * 2u32.pow(collisions)),
                        // A release wakes us; otherwise the holder's keys
                        // expire then (spread a little so waiters do not all
                        // arrive at once).
                        Some(holder_left) if woken => {
                            holder_left + retry.jitter(holder_left / 8 + Duration::from_millis(1))
                        }
                        // Polling: never past the holder's expiry.
                        _ => retry.jitter(holder_left.unwrap_or(Duration::MAX)),
                    }
                    .min(left)
                }
            };
            round += 1;
            match &mut interest {
                Some(interest) => {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = interest.released() => {
                            // Every waiter hears the same release: stagger
                            // them so that one wins the nodes instead of all
                            // splitting the vote.
                            tokio::time::sleep(retry.jitter(WAKE_SPREAD)).await;
                        }
                    }
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// One acquisition: one round, or two for a fenced lock. `holder_ttl`:
    /// a refusal must say how long the holder's keys live.
    async fn acquire(
        &self,
        claim: &Arc<Claim>,
        ttl: Ttl,
        holder_ttl: bool,
    ) -> Result<Lock, LockError> {
        let inner = &self.inner;
        // The clock is read before the first request leaves.
        let t0 = Instant::now();
        let deadline = t0 + ttl.validity;
        let per_node = quorum::node_timeout(inner.settings.node_timeout, ttl.ms, ttl.validity);
        let step = Step::Acquire { holder_ttl };
        let mut calls = inner.submit(claim, step, ttl.ms, None);
        // If this future is dropped from here on, the guard releases whatever
        // the round may have set: on every node the acquire was handed to,
        // behind it. (A reentrant release names its hold, so where the hold
        // was not counted it changes nothing.)
        let mut guard = Abandoned {
            inner,
            claim,
            ttl_ms: ttl.ms,
            only: calls.made(),
            armed: true,
        };
        let mut tally = inner
            .collect(step, claim, &mut calls, t0 + per_node, Wait::Decision)
            .await;
        // Calls still in flight go on: the lock reaches every node that
        // answers, not a bare quorum.
        drop(calls);
        // The first round's votes, once a second round has replaced them.
        let mut phase1 = None;
        let mut fence = None;
        if let (Decision::Granted, Some(t)) = (tally.decision, tally.fence) {
            // Fenced phase 2: write the largest counter back where we hold
            // the lease; the token stands only if a quorum confirms in time.
            let granted = granted_mask(&tally.answers);
            let now = Instant::now();
            let per_node = quorum::node_timeout(
                inner.settings.node_timeout,
                ttl.ms,
                deadline.saturating_duration_since(now),
            );
            let step = Step::WriteBack(t);
            let mut calls = inner.submit(claim, step, ttl.ms, Some(&granted));
            let phase2 = inner
                .collect(step, claim, &mut calls, now + per_node, Wait::Decision)
                .await;
            phase1 = Some(std::mem::replace(&mut tally, phase2).answers);
            fence = Some(t);
        }
        let phase1 = phase1.as_ref().unwrap_or(&tally.answers);
        if tally.decision == Decision::Granted && Instant::now() < deadline {
            guard.armed = false; // the Lock owns the keys now
            return Ok(Lock::new(
                self.clone(),
                Arc::clone(claim),
                ttl.ms,
                deadline,
                fence,
            ));
        }
        // Release wherever the acquire may have taken effect. Wait for the
        // nodes that granted, so that a retry never meets our own leftovers
        // there; the others (silent, possibly frozen) get the release behind
        // the acquire, without waiting.
        let granted = granted_mask(phase1);
        let touched: SmallVec<[bool; INLINE]> = phase1.iter().map(may_have_applied).collect();
        guard.armed = false; // the release below is handed over at its first poll
        inner
            .release(claim, ttl.ms, Wait::Nodes(&granted), Some(&touched))
            .await;
        Err(refusal(tally.decision, inner.votes(tally.answers)))
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

/// Nodes that answered yes.
fn granted_mask(answers: &[Answer]) -> SmallVec<[bool; INLINE]> {
    answers.iter().map(|a| *a == Answer::Yes).collect()
}

/// Whether an acquire may have changed the node: it granted, its answer
/// never came, or the answer was unreadable. A node that refused, or that
/// refused the call before it was sent (not connected, overloaded), or
/// failed before running the script, changed nothing.
fn may_have_applied(answer: &Answer) -> bool {
    matches!(
        answer,
        Answer::Yes
            | Answer::Undecided
            | Answer::Failed(
                NodeError::TimedOut | NodeError::Connection(_) | NodeError::Protocol(_)
            )
    )
}

impl Inner {
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

    /// Makes one operation on every node at once (or on those marked in
    /// `only`). Each call is written whatever becomes of the returned
    /// [`Calls`]; a node that cannot take it answers at once.
    pub(crate) fn submit(
        &self,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
    ) -> Calls<'_> {
        let asked: SmallVec<[bool; INLINE]> = (0..self.nodes.len())
            .map(|i| only.is_none_or(|only| only[i]))
            .collect();
        let calls = self
            .nodes
            .iter()
            .zip(&asked)
            .map(|(node, &asked)| asked.then(|| node.call(claim, step, ttl_ms)))
            .collect();
        Calls { calls, asked }
    }

    /// Counts answers from `calls` until `wait` is satisfied or `until`
    /// passes; nodes silent by then count as timed out. Nodes not asked
    /// count as no.
    pub(crate) async fn collect(
        &self,
        step: Step,
        claim: &Claim,
        calls: &mut Calls<'_>,
        until: Instant,
        wait: Wait<'_>,
    ) -> Tally {
        let n = self.nodes.len();
        let span = tracing::debug_span!(
            "redquorum.round",
            op = step.name(),
            key = claim.keys().first(),
            nodes = n
        );
        async move {
            // A round whose every node refuses at once (none connected)
            // never waits on anything: it still counts against the task's
            // budget, so a caller looping on it lets the runtime run the
            // reconnects (and timers) it needs.
            tokio::task::coop::consume_budget().await;
            let started = Instant::now();
            let mut round = Round::new(n);
            let mut answers: Answers = smallvec![Answer::Undecided; n];
            // A node asked and not yet answered (no reply is `Undecided`).
            let waiting = |calls: &Calls, answers: &[Answer], i: usize| {
                calls.asked(i) && matches!(answers[i], Answer::Undecided)
            };
            for i in 0..n {
                if !calls.asked(i) {
                    round.record(Vote::No);
                }
            }
            let mut fence = None;
            let timer = tokio::time::sleep_until(until);
            tokio::pin!(timer);
            loop {
                let done = match wait {
                    Wait::Decision => round.decision() != Decision::Pending,
                    Wait::Nodes(nodes) => (0..n).all(|i| !nodes[i] || !waiting(calls, &answers, i)),
                };
                if done {
                    break;
                }
                tokio::select! {
                    biased;
                    next = calls.next() => {
                        let Some((i, reply)) = next else { break };
                        round.record(vote(step, &reply));
                        if let Ok(Reply::Fence(c)) = reply {
                            fence = fence.max(Some(c));
                        }
                        answers[i] = answer(reply);
                        tracing::debug!(
                            node = %self.nodes[i].name(),
                            answer = ?answers[i],
                            latency_us = started.elapsed().as_micros() as u64,
                        );
                    }
                    _ = &mut timer => {
                        for i in 0..n {
                            if waiting(calls, &answers, i) {
                                answers[i] = Answer::Failed(NodeError::TimedOut);
                                round.record(Vote::No);
                            }
                        }
                        break;
                    }
                }
            }
            tracing::debug!(decision = ?round.decision(), yes = round.yes(), no = round.no());
            Tally {
                decision: round.decision(),
                answers,
                fence,
            }
        }
        .instrument(span)
        .await
    }

    /// Every node and its calls in flight, in configured order.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&Member, usize)> {
        self.nodes
            .iter()
            .map(|node| (node.member(), node.in_flight()))
    }

    /// A round's answers with the nodes' names, as errors report them.
    pub(crate) fn votes(&self, answers: Answers) -> Votes {
        let names = self.nodes.iter().map(|node| Arc::clone(node.name()));
        Votes::new(names.zip(answers).collect())
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
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl_ms, Duration::MAX);
        let until = Instant::now() + per_node;
        let mut calls = self.submit(claim, Step::Release, ttl_ms, only);
        self.collect(Step::Release, claim, &mut calls, until, wait)
            .await
    }

    /// Makes a release of `claim` on every node (or those marked in `only`)
    /// without waiting, for `Drop`. Outside a tokio runtime nothing is sent
    /// (the keys expire at their TTL).
    pub(crate) fn release_detached(&self, claim: &Arc<Claim>, ttl_ms: u64, only: Option<&[bool]>) {
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(self.submit(claim, Step::Release, ttl_ms, only));
        }
    }
}

/// Releases an acquisition's keys if the acquiring future is dropped
/// before it produced a `Lock` or handed over its clean-up: cancelling a
/// `lock()` call never leaves a key behind for the TTL.
struct Abandoned<'a> {
    inner: &'a Arc<Inner>,
    claim: &'a Arc<Claim>,
    ttl_ms: u64,
    /// The nodes the acquire was handed to.
    only: SmallVec<[bool; INLINE]>,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner
                .release_detached(self.claim, self.ttl_ms, Some(&self.only));
        }
    }
}

fn answer(reply: Result<Reply, NodeError>) -> Answer {
    match reply {
        Ok(Reply::Done | Reply::Fence(_)) => Answer::Yes,
        Ok(Reply::Held { pttl_ms }) => Answer::Held {
            pttl: pttl_ms.map(Duration::from_millis),
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
