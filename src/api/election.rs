//! Leader election over the quorum: at most one leader whose leadership is
//! valid at any instant, and a term that grows with every new leader.
//!
//! An election named `N` is the fenced lock on `N` (docs/election.md). A
//! candidate [campaigns](Election::campaign): it waits in line for the lock
//! and, once granted, keeps it alive in the background as a lease
//! ([`Leadership`]); the lock's fencing token is the leader's **term**,
//! larger than every earlier leader's — pass it to what the leader writes
//! to, so that a deposed leader's late writes are refused. The leadership
//! is *lost* when it can no longer be kept ([`Leadership::lost`] fires
//! before its validity ends), and handed over at once by
//! [`Leadership::resign`] (the next candidate is woken by the release).
//! [`Election::leader`] reads who leads from a quorum, and
//! [`Election::observe`] reports each change.
//!
//! ```
//! # use redquorum::election::Election;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//! use redquorum::{AcquireOptions, LeaseOptions, election::LeaderState};
//!
//! let election = Election::new(&redlock, "billing-scheduler")?;
//! let options = AcquireOptions::new().label("host-a pid 4121");
//! let ttl = Duration::from_secs(10);
//! let leadership = election.campaign_with(ttl, &options, &LeaseOptions::new()).await?;
//! let LeaderState::Leading(leader) = election.leader().await? else { panic!() };
//! assert_eq!((leader.term, leader.label.as_deref()), (leadership.term(), Some("host-a pid 4121")));
//! leadership.resign().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use futures::Stream;

use crate::api::inspect::{Holder, Inspection, TimeLeft, Verdict};
use crate::api::lease::{KeepAlive, Lease};
use crate::api::redlock::Redlock;
use crate::proto::error::LockError;
use crate::proto::input::InputError;
use crate::settings::{AcquireOptions, LeaseOptions, LockOptions};

/// How often [`Election::observe`] reads the leader when nothing is
/// reported: the bound on how late it notices a leader whose lease lapsed
/// (a crashed leader releases nothing).
pub const OBSERVE_POLL: Duration = Duration::from_millis(500);

/// After a release is reported, [`Election::observe`] reads the leader this
/// often…
const AFTER_RELEASE_POLL: Duration = Duration::from_millis(5);
/// …for this long at most, until it sees the next leader.
const AFTER_RELEASE_FOR: Duration = Duration::from_millis(500);

/// An election: see the [module docs](self) and [`Election::new`].
#[derive(Debug, Clone)]
#[must_use = "an Election does nothing until a candidate campaigns or a reader asks who leads"]
pub struct Election {
    redlock: Redlock,
    name: String,
}

/// Who leads an election, as a quorum of nodes says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderState {
    /// A leader holds the election on a quorum.
    Leading(Leader),
    /// No leader holds a quorum (free there, or leftovers of a contested
    /// round on fewer nodes).
    Vacant,
    /// Too few nodes answered to tell.
    Unknown,
}

/// The current leader of an election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// Its term: its leadership's fencing token.
    pub term: u64,
    /// Its label ([`LockOptions::label`]), if it gave one.
    pub label: Option<String>,
    /// Its token's first 8 characters (the whole token is what
    /// [`Redlock::release_token`] needs; the CLI's `status --show-token`
    /// prints it).
    pub token_prefix: String,
    /// How long a quorum of nodes keep its key, by their clocks.
    pub time_left: Option<TimeLeft>,
}

/// This process's leadership of an election: a lease kept alive in the
/// background. Dropping it resigns (in the background); prefer
/// [`resign`](Self::resign), which hands over at once.
#[derive(Debug)]
#[must_use = "dropping a Leadership resigns it at once: hold it for as long as you lead"]
pub struct Leadership {
    keep: KeepAlive,
}

impl Election {
    /// The election named `name`, on `redlock`'s nodes: a fenced lock on
    /// `name`, so that `redquorum status NAME` shows its leader too.
    /// [`InputError::EmptyResource`] for an empty name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use redquorum::election::{Election, LeaderState};
    /// let election = Election::new(&redlock, "billing-scheduler")?;
    /// assert_eq!(election.name(), "billing-scheduler");
    /// assert_eq!(election.leader().await?, LeaderState::Vacant);
    /// assert!(Election::new(&redlock, "").is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(redlock: &Redlock, name: &str) -> Result<Election, InputError> {
        crate::proto::input::check_name(name)?;
        Ok(Election {
            redlock: redlock.clone(),
            name: name.to_owned(),
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stands for leader: waits (in line, woken by releases) until elected,
    /// however long that takes, then keeps the leadership alive as a lease
    /// of `ttl`, extended every third of it. See
    /// [`campaign_with`](Self::campaign_with) to bound the wait, label the
    /// leader or set the extensions.
    ///
    /// # Errors
    ///
    /// As [`campaign_with`](Self::campaign_with).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign_with`](Self::campaign_with).
    ///
    /// ```
    /// # use redquorum::election::Election;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let election = Election::new(&redlock, "billing-scheduler")?;
    /// let leadership = election.campaign(std::time::Duration::from_secs(10)).await?;
    /// assert!(leadership.term() >= 1);
    /// leadership.resign().await
    /// # }
    /// ```
    pub async fn campaign(&self, ttl: Duration) -> Result<Leadership, LockError> {
        self.campaign_with(ttl, &AcquireOptions::new(), &LeaseOptions::new())
            .await
    }

    /// [`campaign`](Self::campaign) with options. Waits at most `options`'
    /// [`wait`](AcquireOptions::wait) ([`LockError::Timeout`]), forever
    /// without one. `options`' label names the leader ([`Leader::label`]);
    /// the lease is kept per `lease`.
    ///
    /// # Errors
    ///
    /// [`LockError::Taken`] when another holder has the lock (a wait that
    /// ends first: [`LockError::Timeout`], with the last round's error);
    /// [`LockError::Unavailable`] when too few nodes answered;
    /// [`LockError::Busy`] when this client's own bound on calls in flight kept
    /// the quorum out of reach; [`LockError::Expired`] when the quorum came after
    /// the validity window; [`LockError::Input`] for a name or TTL the protocol
    /// refuses (nothing sent); [`LockError::ShutDown`] once
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) began.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any poll takes back, in the background, what its
    /// round set on every node it reached, and a waiter's place in line: no key
    /// is left behind for a lock nobody holds.
    /// Once it returns, the [`Leadership`] owns the lease.
    pub async fn campaign_with(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
        lease: &LeaseOptions,
    ) -> Result<Leadership, LockError> {
        let options = campaign_options(options);
        // The keeping checked before standing: a leadership that could not
        // be kept must not be won (and its term spent) first.
        crate::api::lease::Keeping::new(self.redlock.driver(), ttl, lease)?;
        let lock = self.redlock.lock_with(&self.name, ttl, &options).await?;
        let keep = lock.keep_alive_with(lease)?;
        Ok(Leadership { keep })
    }

    /// Who leads now, from a quorum of nodes (one read per node, each
    /// bounded by the node timeout): never a leader whose key a quorum does
    /// not hold. A snapshot: to act as leader, campaign.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when fewer than a quorum of nodes answered;
    /// [`LockError::Input`] for a name the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping this future changes nothing on the nodes.
    pub async fn leader(&self) -> Result<LeaderState, LockError> {
        Ok(state(&self.redlock.inspect(&self.name).await?))
    }

    /// Campaigns, runs `work` as leader, and resigns when it ends: its
    /// output, or [`LockError::Lost`] — the work dropped at its next
    /// `.await` — if the leadership could not be kept. The work gets the
    /// leadership's lease: its term ([`Lease::fence`]) and validity.
    ///
    /// # Errors
    ///
    /// The acquisition's errors (as the waiting lock calls: `Taken`, `Timeout`,
    /// `Unavailable`, …), and [`LockError::Lost`] when the lease could not be
    /// kept: the work was dropped. An error of the work itself is returned as it
    /// is where the work is fallible.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work and gives the lock back (in the
    /// background). Work the future does not own goes on (a task the work
    /// spawned): await it within the work if the lock must cover it.
    ///
    /// ```
    /// # use redquorum::election::Election;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// let election = Election::new(&redlock, "nightly-report")?;
    /// let term = election
    ///     .lead(Duration::from_secs(10), |lease| async move {
    ///         // write the report, fenced by the term
    ///         lease.fence().unwrap()
    ///     })
    ///     .await?;
    /// assert!(term >= 1);
    /// # Ok(()) }
    /// ```
    pub async fn lead<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lead_with(ttl, &AcquireOptions::new(), &LeaseOptions::new(), work)
            .await
    }

    /// [`lead`](Self::lead) with options, as
    /// [`campaign_with`](Self::campaign_with) takes them.
    ///
    /// # Errors
    ///
    /// As [`lead`](Self::lead).
    ///
    /// # Cancel safety
    ///
    /// As [`lead`](Self::lead).
    ///
    /// ```
    /// # use redquorum::election::Election;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{AcquireOptions, LeaseOptions};
    /// let election = Election::new(&redlock, "nightly-report")?;
    /// let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    /// let lease = LeaseOptions::new().extend_every(Duration::from_secs(2));
    /// election.lead_with(Duration::from_secs(10), &wait, &lease, |_| async {}).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lead_with<F, Fut, T>(
        &self,
        ttl: Duration,
        options: &AcquireOptions,
        lease: &LeaseOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        // A lease on the fenced lock: `run_with`'s keeper, loss and
        // release, with the campaign's options.
        self.redlock
            .run_with(&self.name, ttl, &campaign_options(options), lease, work)
            .await
    }

    /// Each change of leader, as [`leader`](Self::leader) reads it: the
    /// state now, then every later one that differs (a new term, a vacancy,
    /// unknown). A release wakes it at once (it then reads every 5 ms until
    /// it sees the next leader, for half a second at most); otherwise it
    /// reads every [`OBSERVE_POLL`], which bounds how late it sees a leader
    /// that crashed. Never reports a leader whose key a quorum does not
    /// hold. It samples: a leadership that starts without a release before
    /// it (the first, or one after a lapse) and ends within one poll may
    /// go unseen — the terms it reports grow, but need not be consecutive.
    /// Endless; drop it to stop.
    pub fn observe(&self) -> impl Stream<Item = LeaderState> + Send + use<> {
        self.observe_every(OBSERVE_POLL)
    }

    /// [`observe`](Self::observe), reading every `poll` when nothing is
    /// reported.
    pub fn observe_every(&self, poll: Duration) -> impl Stream<Item = LeaderState> + Send + use<> {
        let (redlock, name) = (self.redlock.clone(), self.name.clone());
        let key = redlock.key_layout().lock_key(&name);
        let interest = redlock.driver().hub().map(|hub| hub.register(&key, None));
        let start = Observer {
            redlock,
            name,
            interest,
            last: None,
            poll,
            burst_until: None,
            settling_since: None,
        };
        futures::stream::unfold(start, |mut observer| async move {
            let state = observer.next_change().await;
            Some((state, observer))
        })
    }
}

/// A candidate's options: fenced (the term), and waiting forever unless
/// they bound the wait.
fn campaign_options(options: &AcquireOptions) -> LockOptions {
    let options = LockOptions::from(options.clone()).fenced();
    match options.acquire().max_wait() {
        Some(_) => options,
        None => options.wait(Duration::MAX),
    }
}

/// What [`Election::observe`] carries from one change to the next.
struct Observer {
    redlock: Redlock,
    name: String,
    interest: Option<crate::engine::wakeup::Interest>,
    last: Option<LeaderState>,
    poll: Duration,
    /// After a release is heard, fast reads until the next leader is seen
    /// or this instant passes (kept across reported changes: a vacancy
    /// is usually followed by a leader within milliseconds).
    burst_until: Option<tokio::time::Instant>,
    /// Since when a new leader's key has been seen without its term
    /// stored (its write-back in flight): not reported for up to
    /// [`SETTLE`], as each node's counter is its own draw until then.
    settling_since: Option<tokio::time::Instant>,
}

/// How long a leadership whose term is not stored yet goes unreported.
const SETTLE: Duration = Duration::from_secs(1);

impl Observer {
    /// The next state that differs from the last reported.
    async fn next_change(&mut self) -> LeaderState {
        loop {
            if let Some(interest) = &mut self.interest {
                interest.mark_seen();
            }
            let now = match self.redlock.inspect(&self.name).await {
                Ok(seen) if settling(&seen) => {
                    let since = *self
                        .settling_since
                        .get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() < SETTLE {
                        tokio::time::sleep(AFTER_RELEASE_POLL).await;
                        continue;
                    }
                    state(&seen)
                }
                Ok(seen) => state(&seen),
                Err(_) => LeaderState::Unknown,
            };
            self.settling_since = None;
            if self.last.as_ref().is_none_or(|last| !same(last, &now)) {
                if matches!(now, LeaderState::Leading(_)) {
                    // The next leader is seen: back to the slow pace.
                    self.burst_until = None;
                }
                self.last = Some(now.clone());
                return now;
            }
            let in_burst = self
                .burst_until
                .is_some_and(|until| tokio::time::Instant::now() < until);
            let pause = if in_burst {
                AFTER_RELEASE_POLL
            } else {
                self.poll
            };
            let released = async {
                match &mut self.interest {
                    Some(interest) => interest.released().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = released => {
                    self.burst_until = Some(tokio::time::Instant::now() + AFTER_RELEASE_FOR);
                }
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Whether two states are the same leadership (time left aside).
fn same(a: &LeaderState, b: &LeaderState) -> bool {
    match (a, b) {
        (LeaderState::Leading(a), LeaderState::Leading(b)) => {
            a.term == b.term && a.token_prefix == b.token_prefix
        }
        (LeaderState::Vacant, LeaderState::Vacant)
        | (LeaderState::Unknown, LeaderState::Unknown) => true,
        _ => false,
    }
}

/// A leader's key is held but its term is not stored yet: the grant's
/// write-back is in flight, and the counters the nodes show are each
/// node's own draw, maybe above the term (docs/fencing.md).
fn settling(seen: &Inspection) -> bool {
    matches!(
        seen.verdict(),
        Verdict::Held {
            holder: Holder::Token(_),
            ..
        }
    ) && seen.stored_fence().is_none()
        && seen.fence().is_some()
}

/// The leader an inspection shows.
fn state(seen: &Inspection) -> LeaderState {
    match seen.verdict() {
        Verdict::Held {
            holder: Holder::Token(token),
            ..
        } => match seen.fence() {
            Some(term) => LeaderState::Leading(Leader {
                term,
                label: seen.label().map(str::to_owned),
                token_prefix: token.chars().take(8).collect(),
                time_left: seen.time_left(),
            }),
            // Held without a fencing counter: not a leadership (a plain
            // lock on the name).
            None => LeaderState::Unknown,
        },
        // Free on a quorum, leftovers of a contested round on fewer, or a
        // hand-over under way (the key kept for the next candidate in
        // line): no leader in any of them.
        Verdict::Free { .. }
        | Verdict::NotHeld { .. }
        | Verdict::Held {
            holder: Holder::Kept(_),
            ..
        } => LeaderState::Vacant,
        _ => LeaderState::Unknown,
    }
}

impl Leadership {
    /// The term: this leadership's fencing token, larger than every earlier
    /// leader's of this election.
    pub fn term(&self) -> u64 {
        self.lease().fence().unwrap_or_default()
    }

    /// The leadership's lease: validity, term, and the [`Lease::lost`] and
    /// [`Lease::ended`] signals (clones for subtasks).
    pub fn lease(&self) -> &Lease {
        self.keep.lease()
    }

    /// Whether it is still valid: act as leader only while it is.
    pub fn is_valid(&self) -> bool {
        self.lease().is_valid()
    }

    /// Resolves when the leadership is lost: it could not be kept, before
    /// its validity ends. Not on resignation.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.lease().lost()
    }

    /// Hands the leadership over: stops extending and releases it on every
    /// node, waking the next candidate.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when no quorum confirmed within the node
    /// timeout: the keys then expire by their TTL.
    ///
    /// # Cancel safety
    ///
    /// The release is handed to the nodes at the first poll and happens at most
    /// once: dropping this future afterwards changes nothing; dropped before its
    /// first poll it sends nothing (the guard it consumed releases in the
    /// background when dropped).
    pub async fn resign(self) -> Result<(), LockError> {
        self.keep.release().await
    }
}
