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
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pin_project_lite::pin_project;
use smallvec::{SmallVec, smallvec};
use tokio::time::Instant;
use tracing::Instrument;

use crate::claim::{Claim, Keys, Step};
use crate::config::{Builder, LockOptions, Settings};
use crate::error::{Answer, ConfigError, LockError, NodeError, Votes};
use crate::lock::Lock;
use crate::node::{Member, Reply};
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
    nodes: Box<[Member]>,
    pub(crate) settings: Settings,
    /// Release notifications, for Redis nodes with notifications on.
    hub: Option<Arc<Hub>>,
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

/// How many node calls a round keeps in its one block (enough for 3 or 5
/// nodes); a round over more nodes boxes the rest one by one.
const INLINE: usize = 5;

pin_project! {
    /// The calls of one round, side by side in one heap block.
    struct Slots<F> {
        #[pin] c0: Option<F>,
        #[pin] c1: Option<F>,
        #[pin] c2: Option<F>,
        #[pin] c3: Option<F>,
        #[pin] c4: Option<F>,
    }
}

impl<F> Slots<F> {
    /// Call `i` (< [`INLINE`]).
    fn at(self: Pin<&mut Self>, i: usize) -> Pin<&mut Option<F>> {
        let this = self.project();
        match i {
            0 => this.c0,
            1 => this.c1,
            2 => this.c2,
            3 => this.c3,
            _ => this.c4,
        }
    }
}

/// One round's node calls still in flight, by node index.
///
/// The calls borrow the nodes and the claim, and sit in one heap block per
/// round: a round over five Redis masters allocates once for its calls (not
/// once per call, nor a wrapper owning `Arc`s, nor a task per call), and
/// moving the round moves a pointer. Every wake-up polls the calls still in
/// flight, which for a handful of nodes is cheaper than keeping a ready
/// queue. A release's calls own what they need instead
/// ([`Inner::fan_out_owned`]), so that its stragglers can move to a
/// background task ([`Detached`]).
pub(crate) struct Calls<F> {
    inline: Option<Pin<Box<Slots<F>>>>,
    spill: Vec<Option<Pin<Box<F>>>>,
    /// Node indices in use: `0..len`.
    len: usize,
    /// Calls not yet answered.
    left: usize,
}

impl<F: Future> Calls<F> {
    fn new() -> Self {
        Calls {
            inline: None,
            spill: Vec::new(),
            len: 0,
            left: 0,
        }
    }

    /// `make(i)` for every node `i` of `nodes` asked: all, or those marked
    /// in `only`.
    fn of(nodes: usize, only: Option<&[bool]>, mut make: impl FnMut(usize) -> F) -> Self {
        let mut calls = Calls::new();
        for i in (0..nodes).filter(|&i| only.is_none_or(|only| only[i])) {
            calls.push(i, make(i));
        }
        calls
    }

    /// Adds node `i`'s call; nodes are added in increasing order.
    fn push(&mut self, i: usize, call: F) {
        if i < INLINE {
            let slots = self.inline.get_or_insert_with(|| {
                Box::pin(Slots {
                    c0: None,
                    c1: None,
                    c2: None,
                    c3: None,
                    c4: None,
                })
            });
            slots.as_mut().at(i).set(Some(call));
        } else {
            self.spill.resize_with(i + 1 - INLINE, || None);
            self.spill[i - INLINE] = Some(Box::pin(call));
        }
        self.len = i + 1;
        self.left += 1;
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The next reply, `None` once every call has answered.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, F::Output)>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        for i in 0..self.len {
            let reply = if i < INLINE {
                // No block: every call of this round is past it.
                let Some(slots) = &mut self.inline else {
                    continue;
                };
                let mut slot = slots.as_mut().at(i);
                match slot.as_mut().as_pin_mut().map(|call| call.poll(cx)) {
                    Some(Poll::Ready(reply)) => {
                        slot.set(None);
                        reply
                    }
                    _ => continue,
                }
            } else {
                let slot = &mut self.spill[i - INLINE];
                match slot.as_mut().map(|call| call.as_mut().poll(cx)) {
                    Some(Poll::Ready(reply)) => {
                        *slot = None;
                        reply
                    }
                    _ => continue,
                }
            };
            self.left -= 1;
            return Poll::Ready(Some((i, reply)));
        }
        Poll::Pending
    }

    async fn next(&mut self) -> Option<(usize, F::Output)> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// A node call's outcome.
type Outcome = Result<Reply, NodeError>;

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

    pub(crate) fn new(nodes: Vec<Member>, settings: Settings, hub: Option<Arc<Hub>>) -> Self {
        Redlock {
            inner: Arc::new(Inner {
                nodes: nodes.into(),
                settings,
                hub,
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
        let keys = Keys::single(resource, false)?;
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
        // A waiter listens for releases for as long as it waits.
        let mut interest = match (attempts, &self.inner.hub) {
            (Attempts::Until(_), Some(hub)) => Some(hub.register(keys.first())),
            _ => None,
        };
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
        // If this future is dropped from here on, the guard releases whatever
        // the round has set.
        // (Not for a reentrant lock: a release where the hold was never
        // counted would give back an outer hold; it expires instead.)
        let reentrant = claim.keys().is_reentrant();
        let mut guard = Abandoned {
            inner,
            claim,
            ttl_ms: ttl.ms,
            armed: !reentrant,
        };
        // A reentrant lock must know every node that counted the hold, so it
        // hears every node out (within the node timeout).
        let everyone = if reentrant {
            vec![true; inner.nodes.len()]
        } else {
            Vec::new() // no allocation
        };
        let wait = if reentrant {
            Wait::Nodes(&everyone)
        } else {
            Wait::Decision
        };
        let step = Step::Acquire { holder_ttl };
        let mut tally = {
            let mut pending = inner.fan_out(claim, step, ttl.ms, None);
            inner
                .collect(step, claim, &mut pending, t0 + per_node, wait, None)
                .await
            // Stragglers are dropped here: whatever they set is removed by
            // the release below, which each node applies after the acquire.
        };
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
            let mut pending = inner.fan_out(claim, step, ttl.ms, Some(&granted));
            let phase2 = inner
                .collect(
                    step,
                    claim,
                    &mut pending,
                    now + per_node,
                    Wait::Decision,
                    Some(&granted),
                )
                .await;
            phase1 = Some(std::mem::replace(&mut tally, phase2).answers);
            fence = Some(t);
        }
        let phase1 = phase1.as_ref().unwrap_or(&tally.answers);
        if tally.decision == Decision::Granted && Instant::now() < deadline {
            guard.armed = false; // the Lock owns the keys now
            let members = reentrant.then(|| granted_mask(phase1));
            return Ok(Lock::new(
                self.clone(),
                Arc::clone(claim),
                ttl.ms,
                deadline,
                fence,
                members,
            ));
        }
        // Release wherever the acquire may have taken effect. Wait for the
        // nodes that granted, so that a retry never meets our own leftovers
        // there; the others (silent, possibly frozen) are released in the
        // background, behind the acquire on the same connection.
        // A reentrant lock releases only where the hold surely counted.
        let granted = granted_mask(phase1);
        let touched: Vec<bool> = if reentrant {
            granted.clone()
        } else {
            phase1.iter().map(may_have_applied).collect()
        };
        inner
            .release(claim, ttl.ms, Wait::Nodes(&granted), Some(&touched))
            .await;
        guard.armed = false;
        Err(refusal(tally.decision, inner.votes(tally.answers)))
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

/// Nodes that answered yes.
fn granted_mask(answers: &[Answer]) -> Vec<bool> {
    answers.iter().map(|a| *a == Answer::Yes).collect()
}

/// Whether an acquire may have changed the node: it granted, its answer
/// never came, or the answer was unreadable. A node that refused, or failed
/// before running the script, changed nothing.
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

    /// Sends one operation to every node at once (or to those marked in
    /// `only`). Nothing leaves before the calls are first polled.
    pub(crate) fn fan_out<'a>(
        &'a self,
        claim: &'a Claim,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
    ) -> Calls<impl Future<Output = Outcome> + Send + 'a> {
        Calls::of(self.nodes.len(), only, |i| {
            self.nodes[i].call(claim.op(step, ttl_ms))
        })
    }

    /// Counts replies from `pending` until `wait` is satisfied or `until`
    /// passes; nodes silent by then count as timed out. Nodes not marked in
    /// `asked` were not sent the operation and count as no.
    pub(crate) async fn collect<F: Future<Output = Outcome>>(
        &self,
        step: Step,
        claim: &Claim,
        pending: &mut Calls<F>,
        until: Instant,
        wait: Wait<'_>,
        asked: Option<&[bool]>,
    ) -> Tally {
        let n = self.nodes.len();
        let span = tracing::debug_span!(
            "redquorum.round",
            op = step.name(),
            key = claim.keys().first(),
            nodes = n
        );
        async move {
            let started = Instant::now();
            let mut round = Round::new(n);
            let mut answers: Answers = smallvec![Answer::Undecided; n];
            let was_asked = |i: usize| asked.is_none_or(|asked| asked[i]);
            // A node asked and not yet answered (no reply is `Undecided`).
            let waiting = |answers: &[Answer], i: usize| {
                was_asked(i) && matches!(answers[i], Answer::Undecided)
            };
            for i in 0..n {
                if !was_asked(i) {
                    round.record(Vote::No);
                }
            }
            let mut fence = None;
            let timer = tokio::time::sleep_until(until);
            tokio::pin!(timer);
            loop {
                let done = match wait {
                    Wait::Decision => round.decision() != Decision::Pending,
                    Wait::Nodes(nodes) => (0..n).all(|i| !nodes[i] || !waiting(&answers, i)),
                };
                if done || pending.is_empty() {
                    break;
                }
                tokio::select! {
                    biased;
                    Some((i, reply)) = pending.next() => {
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
                            if waiting(&answers, i) {
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

    /// A round's answers with the nodes' names, as errors report them.
    pub(crate) fn votes(&self, answers: Answers) -> Votes {
        let names = self.nodes.iter().map(|node| Arc::clone(node.name()));
        Votes::new(names.zip(answers).collect())
    }

    /// Like [`fan_out`](Self::fan_out), but each call owns what it needs
    /// (an `Arc` of the nodes and of the claim), so that calls still in
    /// flight can move to a background task ([`Detached`]).
    fn fan_out_owned(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
    ) -> Calls<impl Future<Output = Outcome> + Send + 'static> {
        Calls::of(self.nodes.len(), only, |i| {
            let (inner, claim) = (Arc::clone(self), Arc::clone(claim));
            async move { inner.nodes[i].call(claim.op(step, ttl_ms)).await }
        })
    }

    /// Releases `claim` on every node (or those marked in `only`). Returns
    /// once `wait` is satisfied or the node timeout passed; replies still in
    /// flight then are awaited in the background for up to the TTL, after
    /// which the keys have expired anyway.
    ///
    /// The caller drives the round itself (no task to hop to and back);
    /// whatever is still in flight at the decision, or when the caller stops
    /// waiting, goes on in a background task (a `NOSCRIPT` retry, a send
    /// queued behind a busy connection), so the release still completes.
    pub(crate) async fn release(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        wait: Wait<'_>,
        only: Option<&[bool]>,
    ) -> Tally {
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl_ms, Duration::MAX);
        let until = Instant::now() + per_node;
        let mut pending = Detached {
            calls: self.fan_out_owned(claim, Step::Release, ttl_ms, only),
            bound: Duration::from_millis(ttl_ms),
        };
        self.collect(Step::Release, claim, &mut pending.calls, until, wait, only)
            .await
    }

    /// Releases `claim` on every node (or those marked in `only`) without
    /// waiting, for `Drop`. Needs a tokio runtime; without one the keys
    /// simply expire.
    pub(crate) fn release_detached(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        only: Option<&[bool]>,
    ) {
        drop(Detached {
            calls: self.fan_out_owned(claim, Step::Release, ttl_ms, only),
            bound: Duration::from_millis(ttl_ms),
        });
    }
}

/// Calls that must run to the end: whatever is still in flight (or not yet
/// sent) when this is dropped goes on in a background task for up to
/// `bound`. Needs a tokio runtime; without one the calls are dropped.
struct Detached<F: Future<Output = Outcome> + Send + 'static> {
    calls: Calls<F>,
    bound: Duration,
}

impl<F: Future<Output = Outcome> + Send + 'static> Drop for Detached<F> {
    fn drop(&mut self) {
        // One pass first: a round that decided before polling every call
        // sends the rest now, and calls already answered need no task.
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(_)) = self.calls.poll_next(&mut cx) {}
        if self.calls.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mut calls = std::mem::replace(&mut self.calls, Calls::new());
            let bound = self.bound;
            runtime.spawn(async move { drain(&mut calls, bound).await });
        }
    }
}

/// Releases an acquisition's keys on every node if the acquiring future is
/// dropped before it produced a `Lock` or finished cleaning up: cancelling a
/// `lock()` call never leaves a key behind for the TTL.
struct Abandoned<'a> {
    inner: &'a Arc<Inner>,
    claim: &'a Arc<Claim>,
    ttl_ms: u64,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.release_detached(self.claim, self.ttl_ms, None);
        }
    }
}

async fn drain<F: Future>(pending: &mut Calls<F>, bound: Duration) {
    let drained = async { while pending.next().await.is_some() {} };
    let _ = tokio::time::timeout(bound, drained).await;
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

#[cfg(test)]
mod tests {
    use std::future::ready;

    use super::*;

    /// Every call is polled to its answer, whichever nodes a round asks:
    /// those in the block, those past it, or only those past it.
    #[test]
    fn calls_answer_inside_and_past_the_block() {
        for asked in [vec![0, 2, 4, 6], vec![5, 6], vec![0, 1, 2, 3, 4, 5, 6, 7]] {
            let mut calls = Calls::new();
            for &i in &asked {
                calls.push(i, ready(i));
            }
            let mut cx = Context::from_waker(Waker::noop());
            let mut answered = Vec::new();
            while let Poll::Ready(Some((i, out))) = calls.poll_next(&mut cx) {
                assert_eq!(i, out);
                answered.push(i);
            }
            assert_eq!(answered, asked);
            assert!(calls.is_empty());
        }
    }
}
