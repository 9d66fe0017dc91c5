//! One waiting loop for every primitive (locks, read/write locks,
//! semaphores): what to do after an attempt was refused.
//!
//! ```text
//! loop {
//!     waiting.before_attempt();
//!     match attempt().await { Ok(x) => return Ok(x), Err(e) => waiting.after(e).await? }
//! }
//! ```
//!
//! [`Waiting::after`] decides from the retry policy and the caller's budget
//! ([`proto::retry`](crate::proto::retry)) whether to stop, and otherwise
//! pauses: until a release is reported on one of the waiter's channels (a
//! quorum of nodes, [`wakeup`](crate::engine::wakeup)), or until the pause is over.
//! A waiter listens from its first refusal on, only while it waits.
//!
//! A waiter also has a place in its lock's line ([`InLine`], fair waiting:
//! docs/design.md, "Fair waiting"): drawn once per wait, sent with every
//! attempt.

use std::sync::Arc;
use std::time::Duration;

/// The most slots a semaphore's waiter listens to for releases; past
/// that it polls.
pub const MAX_WATCHED_SLOTS: u32 = 64;

use tokio::time::Instant;

use crate::engine::claim::{Claim, InLine, Keys};
use crate::engine::driver::{Attempts, Driver, Held, Ttl};
use crate::engine::token::Token;
use crate::engine::wakeup::Interest;
use crate::proto::error::{LockError, Votes};
use crate::proto::retry::{AfterRound, Backoff, Counts, Last, WAKE_SPREAD};

/// A waiter comes back within its patience at least this long.
pub(crate) const MIN_PATIENCE: Duration = Duration::from_millis(100);

/// Node timeouts in a waiter's patience, beside the retry policy's longest
/// pause: the round trips of the attempt that follows a wake-up.
const PATIENCE_TIMEOUTS: u32 = 4;

/// One caller's wait: its budget, its pauses so far, the channels it
/// listens to and its place in line.
pub(crate) struct Waiting<'a> {
    driver: &'a Driver,
    attempts: Attempts,
    started: Instant,
    backoff: Backoff,
    /// The channels (lock keys) whose releases wake the waiter.
    channels: &'a [String],
    /// It waits to read (its name in line is a reader's).
    reader: bool,
    /// Its last pause ended by releases that named it.
    named: bool,
    /// Registered at the first refusal of a wait with a deadline.
    interests: Vec<Interest>,
    in_line: Option<InLine>,
}

impl<'a> Waiting<'a> {
    /// A wait of `attempts` on `driver`, woken by releases on `channels`,
    /// to read or not (`reader`). A wait with a deadline (`Budget::Until`)
    /// waits in line.
    pub(crate) fn new(
        driver: &'a Driver,
        attempts: Attempts,
        channels: &'a [String],
        reader: bool,
    ) -> Self {
        let waits = attempts.waits() && driver.settings.fair;
        let in_line = waits.then(|| {
            let draws = (driver.draw(), driver.draw());
            InLine::new(driver.ticket(), draws, patience(driver))
        });
        Waiting {
            driver,
            attempts,
            started: Instant::now(),
            backoff: Backoff::default(),
            channels,
            reader,
            named: false,
            interests: Vec::new(),
            in_line,
        }
    }

    /// The wait's place in line, if it waits in line (its next attempt one
    /// the lock is kept for, where releases named it).
    pub(crate) fn in_line(&self) -> Option<InLine> {
        self.in_line.map(|line| line.kept(self.named))
    }

    /// Whether a refusal must report how long the holder's keys live (a
    /// waiter with a deadline sleeps on it).
    pub(crate) fn holder_ttl(&self) -> bool {
        self.attempts.waits()
    }

    /// Call before each attempt: releases reported until now do not wake.
    pub(crate) fn before_attempt(&mut self) {
        for interest in &mut self.interests {
            interest.mark_seen();
        }
    }

    /// After an attempt refused with `error`: `Err` with what to report when
    /// the wait is over (input errors and a permit count that differs at
    /// once; [`LockError::Timeout`] when its time is up), else `Ok` after
    /// the pause.
    /// The shutdown ends the wait at once ([`LockError::ShutDown`]).
    pub(crate) async fn after(&mut self, error: LockError) -> Result<(), LockError> {
        if matches!(
            error,
            LockError::Input(_) | LockError::PermitCount { .. } | LockError::ShutDown
        ) {
            return Err(error);
        }
        let driver = self.driver;
        driver.unless_closing(self.pause(error)).await?
    }

    /// [`after`](Self::after)'s decision and pause.
    async fn pause(&mut self, error: LockError) -> Result<(), LockError> {
        let driver = self.driver;
        self.named = false;
        if let (true, Some(hub), true) = (
            self.attempts.waits(),
            driver.hub(),
            self.interests.is_empty(),
        ) {
            let me = self.in_line.map(|line| line.name(self.reader));
            self.interests = self
                .channels
                .iter()
                .map(|key| hub.register(key, me.as_deref()))
                .collect();
        }
        let now = Instant::now();
        let budget = self
            .attempts
            .map(|give_up| give_up.saturating_duration_since(now));
        let quorum = driver.quorum_counts(now);
        let last = Last {
            collided: error.votes().is_some_and(|v| v.yes() > 0),
            holder_left: error.votes().and_then(Votes::min_pttl),
            ahead: error.votes().and_then(Votes::min_ahead),
            woken: self.interests.iter().any(Interest::listening),
            quorum,
        };
        let retry = driver.settings.retry;
        let pause = match self.backoff.next(&retry, budget, last, driver.draw()) {
            AfterRound::After(pause) => pause,
            AfterRound::Stop => return Err(error),
            AfterRound::TimedOut => {
                return Err(LockError::Timeout {
                    waited: now - self.started,
                    last: Box::new(error),
                });
            }
        };
        if self.interests.is_empty() {
            tokio::time::sleep(pause).await;
            return Ok(());
        }
        let until = now + pause;
        let (woken, for_me) = loop {
            let released = futures::future::select_all(
                self.interests.iter_mut().map(|i| Box::pin(i.released())),
            );
            // Biased, as every select here: tokio picks unbiased branches at
            // random, which a seeded simulation could not replay.
            let (woken, for_me) = tokio::select! {
                biased;
                () = tokio::time::sleep_until(until) => (false, false),
                (for_me, _, _) = released => (true, for_me),
            };
            // While no quorum can count (quarantines), a release helps no
            // round: sleep on, until then or the next release.
            if !woken
                || quorum == Counts::Now
                || driver.quorum_counts(Instant::now()) == Counts::Now
            {
                break (woken, for_me);
            }
            self.before_attempt();
        };
        self.named = for_me;
        if woken && !for_me {
            // Every waiter hears the same release: stagger them so that one
            // wins the nodes instead of all splitting the vote. (A release
            // that kept the lock for this waiter woke it alone.)
            tokio::time::sleep(retry.jitter(WAKE_SPREAD, driver.draw())).await;
        }
        Ok(())
    }
}

/// What a hold is: its reentrant owner, if any, its label, and how long it
/// is kept at least from its grant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold<'a> {
    pub(crate) owner: Option<&'a str>,
    pub(crate) label: Option<&'a Arc<str>>,
    pub(crate) at_least: Option<Duration>,
}

/// Acquire rounds on `driver` until one grants or `attempts` runs out,
/// each a `hold`: the waiting loop of every lock kind but the semaphore's,
/// which tries its slots in turn ([`Waiting`]). Ends at once with
/// [`LockError::ShutDown`] when the client is shut down.
pub(crate) async fn acquire_repeatedly(
    driver: &Driver,
    keys: Keys,
    hold: Hold<'_>,
    ttl: Ttl,
    attempts: Attempts,
) -> Result<Held, LockError> {
    let Hold {
        owner,
        label,
        at_least,
    } = hold;
    let channels = [keys.first().to_owned()];
    let mut waiting = Waiting::new(driver, attempts, &channels, keys.kind() == "read");
    // Taken back if this future is dropped while it waits (a caller
    // that stops waiting gives up).
    let mut give_up = GiveUp::new(driver, ttl.ms);
    // A writer marks its intent with one name for the whole wait: its
    // release then takes the intent back on every node, on one that
    // missed its later rounds too (each round's own token would leave an
    // earlier round's there).
    let intent = keys
        .marks_refusals()
        .then(|| Token::from_draws(driver.draw(), driver.draw()));
    let mut keys = Some(keys);
    loop {
        let claim = match owner {
            Some(owner) => Claim::owned(keys.take().expect("keys"), owner)?,
            None => Claim::new(keys.take().expect("keys")), // a fresh token every round
        };
        let claim = claim
            .marking_intent(intent)
            .in_line(waiting.in_line())
            .labeled(label)
            .held_at_least(at_least);
        let claim = Arc::new(claim);
        waiting.before_attempt();
        let error = match driver.acquire(&claim, ttl, waiting.holder_ttl()).await {
            Ok(held) => {
                // The lock's release takes back the rest (its place in
                // line, its intent); earlier rounds' marks were
                // replaced by later ones.
                give_up.got_it(claim.keys().first());
                return Ok(held);
            }
            // The shutdown released every round's marks (it found them
            // among the client's claims): nothing left to take back.
            Err(LockError::ShutDown) => return Err(LockError::ShutDown),
            Err(e) => e,
        };
        give_up.refused(&claim);
        if let Err(e) = waiting.after(error).await {
            give_up.give_up();
            return Err(e);
        }
        // Only a retry pays for a copy of the keys.
        keys = Some(claim.keys().clone());
    }
}

/// How long a waiter of `driver` takes at most to come back after a
/// release (what a lock is kept for it): the retry policy's longest pause
/// and the round trips of an attempt, at least [`MIN_PATIENCE`].
pub(crate) fn patience(driver: &Driver) -> Duration {
    let settings = &driver.settings;
    let node_timeout = settings
        .node_timeout
        .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT);
    (settings.retry.max_delay() + node_timeout * PATIENCE_TIMEOUTS).max(MIN_PATIENCE)
}

/// What a wait that ends without a lock takes back on the nodes that
/// refused it: its place in line (and a lock kept for it meanwhile), and a
/// refused writer's intent, which would turn readers away for a writer no
/// longer coming — per lock it waited for (a semaphore's waiter waits in
/// the line of every slot). Taken back when the caller gives up (its
/// retries spent, its wait over) or is dropped while it waits, and, for
/// the locks it did not get, when it gets one: each lock's last refused
/// round is released on every node, without waiting (compare-and-delete: a
/// node where the intent holds another writer's token keeps it);
/// [`Driver::shutdown`] waits for those calls. Bounded by the locks waited
/// for (a semaphore's permits).
pub(crate) struct GiveUp<'a> {
    driver: &'a Driver,
    /// Per lock waited for (by its first key), the last refused round's
    /// claim, where it left something to take back.
    last: Vec<Arc<Claim>>,
    ttl_ms: u64,
}

impl<'a> GiveUp<'a> {
    pub(crate) fn new(driver: &'a Driver, ttl_ms: u64) -> Self {
        GiveUp {
            driver,
            last: Vec::new(),
            ttl_ms,
        }
    }

    /// `claim`'s round was refused.
    pub(crate) fn refused(&mut self, claim: &Arc<Claim>) {
        if claim.keys().marks_refusals() || claim.waits_in_line() {
            let first = claim.keys().first();
            self.last.retain(|c| c.keys().first() != first);
            self.last.push(Arc::clone(claim));
        }
    }

    /// The wait got the lock whose first key is `first`: that lock's
    /// release takes back the rest of its own marks; every other lock's
    /// place is given back now.
    pub(crate) fn got_it(&mut self, first: &str) {
        self.last.retain(|c| c.keys().first() != first);
        self.give_up();
    }

    /// The wait is over without a lock.
    pub(crate) fn give_up(&mut self) {
        for claim in self.last.drain(..) {
            self.driver.release_detached(&claim, self.ttl_ms, None);
        }
    }
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}
