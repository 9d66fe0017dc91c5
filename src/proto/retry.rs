//! The retry policy, and the pause before the next round: a function of
//! the last round's outcome, the time left and a random draw.
//!
//! ```text
//! try_lock / lock:   up to `attempts` rounds, each pause uniform in [0, max_delay]
//! waiting (max_wait): until the time is up; after a refusal by a holder,
//!   listening for its release  -> sleep until its keys expire (+ a little),
//!                                 a release wakes earlier
//!   not listening (no pub/sub) -> poll, never past the holder's expiry
//! after a collision (won some nodes, lost the round): a short pause doubled
//!   per collision in a row (binary backoff), since no release will announce it
//! while too many nodes are quarantined for a quorum to count (waiting only):
//!   their quarantines' end known -> no earlier than a quorum's end (+ a little)
//!   unknown (a node of your own) -> a pause doubled per such round, 100 ms..1 s
//! ```

use std::time::Duration;

/// How many rounds [`Redlock::lock`](crate::Redlock::lock) tries, and how long it pauses between
/// them.
///
/// The pause is drawn uniformly from `[0, max_delay]` (full jitter), so that
/// clients that collided once are unlikely to collide again. Before pausing,
/// the failed round's keys are released, so a retry never waits on the
/// caller's own leftovers.
///
/// ```
/// use std::time::Duration;
/// use redquorum::Retry;
/// let retry = Retry::new(5, Duration::from_millis(100));
/// assert_eq!(retry.attempts(), 5);
/// assert_eq!(Retry::none().attempts(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a Retry policy does nothing until given to `Builder::retry`"]
pub struct Retry {
    attempts: u32,
    max_delay: Duration,
}

impl Retry {
    /// At most `attempts` rounds in all (the first included), pausing a random
    /// time up to `max_delay` between them. `attempts` of 0 is rejected by
    /// [`Builder::build`](crate::Builder::build).
    pub const fn new(attempts: u32, max_delay: Duration) -> Self {
        Retry {
            attempts,
            max_delay,
        }
    }

    /// Exactly one round: `lock` behaves like `try_lock`.
    pub const fn none() -> Self {
        Retry::new(1, Duration::ZERO)
    }

    /// The total number of rounds.
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The upper bound of the pause between rounds.
    pub const fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// A pause drawn from `[0, min(max_delay, cap)]`.
    /// A pause drawn from `[0, min(max_delay, cap)]` by `draw` (a uniform
    /// random `u64`: 0 gives no pause, `u64::MAX` the longest), to the
    /// microsecond.
    pub(crate) fn jitter(&self, cap: Duration, draw: u64) -> Duration {
        let max = self
            .max_delay
            .min(cap)
            .as_micros()
            .min(u128::from(u64::MAX));
        // `draw` as a fraction of 2^64, scaled to `max + 1` values.
        let micros = (u128::from(draw) * (max + 1)) >> 64;
        Duration::from_micros(micros as u64)
    }
}

impl Default for Retry {
    /// Three rounds, up to 200 ms apart.
    fn default() -> Self {
        Retry::new(3, Duration::from_millis(200))
    }
}

/// How long waiters that heard one release are spread over, so that one of
/// them wins the nodes instead of all splitting the vote.
pub(crate) const WAKE_SPREAD: Duration = Duration::from_millis(3);

/// Waiters in line nearer the head than this come back when the key they
/// were refused by expires (the holder's, or one kept for the waiter before
/// them, which lapses if that waiter never comes); those farther back sleep
/// until a release names them (docs/design.md, "Fair waiting").
pub(crate) const NEAR_HEAD: u32 = 2;

/// A waiter farther back than [`NEAR_HEAD`] polls, should the release that
/// names it be lost, after this per waiter ahead of it (at most
/// [`FAR_AHEAD`] of them): the line's polls cost about
/// `Σ 1 / (FAR_STEP · min(k, 64))` rounds a second, some 70 for a thousand
/// waiters, whatever the hand-over rate.
pub(crate) const FAR_STEP: Duration = Duration::from_millis(250);

/// The most waiters ahead a node counts (`line.lua`'s `LINE_AHEAD`).
pub(crate) const FAR_AHEAD: u32 = 64;

/// Collisions in a row beyond which the backoff stops doubling.
const MAX_DOUBLINGS: u32 = 6;

/// While a quorum cannot count for quarantines whose end is unknown, the
/// first pause…
pub(crate) const QUARANTINE_POLL_MIN: Duration = Duration::from_millis(100);
/// …doubled per such round in a row, up to this.
pub(crate) const QUARANTINE_POLL_MAX: Duration = Duration::from_secs(1);

/// Whether a node's yes counts toward a new grant now, or when it will
/// (the delayed restart: [`restart`](crate::proto::restart)); also what a
/// quorum of nodes gives ([`quorum_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counts {
    /// Now.
    Now,
    /// After this long (its quarantine ends then).
    After(Duration),
    /// Not now, and when is not known (a node of your own that reports
    /// itself quarantined).
    Unknown,
}

/// When a quorum of `quorum` nodes will count, given when each does.
///
/// ```text
/// [Now, Now, After(2s), After(1s), Unknown], quorum 3 -> After(1s)
/// ```
pub(crate) fn quorum_counts(nodes: impl IntoIterator<Item = Counts>, quorum: usize) -> Counts {
    // When each node counts, in order; Unknown after every known time.
    let mut at: smallvec::SmallVec<[Option<Duration>; 5]> = nodes
        .into_iter()
        .map(|c| match c {
            Counts::Now => Some(Duration::ZERO),
            Counts::After(d) => Some(d),
            Counts::Unknown => None,
        })
        .collect();
    at.sort_by_key(|t| t.unwrap_or(Duration::MAX));
    match at.get(quorum.max(1) - 1) {
        Some(Some(d)) if d.is_zero() => Counts::Now,
        Some(Some(d)) => Counts::After(*d),
        Some(None) => Counts::Unknown,
        // Fewer nodes than a quorum: nothing a wait changes.
        None => Counts::Now,
    }
}

/// What the caller allows: the retry policy's rounds, or rounds until a
/// deadline. `T` is the deadline as the caller holds it (an instant), or,
/// where [`Backoff`] reads it, the time left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Budget<T = Duration> {
    /// [`Retry::attempts`] rounds, with jittered pauses.
    Attempts,
    /// Until a deadline (`None`: forever), sleeping no longer than the
    /// holder's TTL.
    Until(Option<T>),
}

impl<T> Budget<T> {
    /// Whether the caller waits (for a deadline, not a count of rounds).
    pub(crate) fn waits(&self) -> bool {
        matches!(self, Budget::Until(_))
    }

    /// The same budget, its deadline seen through `left` (the time left).
    pub(crate) fn map<U>(&self, left: impl FnOnce(&T) -> U) -> Budget<U> {
        match self {
            Budget::Attempts => Budget::Attempts,
            Budget::Until(deadline) => Budget::Until(deadline.as_ref().map(left)),
        }
    }
}

/// What the last round taught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Last {
    /// It won some nodes but not the round: it met another contender.
    pub(crate) collided: bool,
    /// The smallest TTL a holder reported.
    pub(crate) holder_left: Option<Duration>,
    /// A release will wake the caller (it listens, with a quorum of nodes).
    pub(crate) woken: bool,
    /// For a waiter in line: the fewest waiters a node reported ahead of
    /// it. One far back sleeps until a release names it (the lock kept for
    /// it), polling seldom (`FAR_STEP` per waiter ahead, at most 64).
    pub(crate) ahead: Option<u32>,
    /// When a quorum of nodes' yeses will count again (quarantines).
    pub(crate) quorum: Counts,
}

/// What to do after a failed round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRound {
    /// No attempts left: report the round's error.
    Stop,
    /// The caller's time is up: report a timeout.
    TimedOut,
    /// Pause this long (or until a release), then try again.
    After(Duration),
}

/// The pauses between the rounds of one call.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    rounds: u32,
    collisions: u32,
    /// Rounds in a row in which a quorum could not count, for how long
    /// unknown.
    quarantined: u32,
}

impl Backoff {
    /// After a failed round: what next, given the `budget`, what the round
    /// taught and a random `draw`.
    pub(crate) fn next(
        &mut self,
        retry: &Retry,
        budget: Budget,
        last: Last,
        draw: u64,
    ) -> AfterRound {
        self.rounds += 1;
        self.collisions = if last.collided {
            (self.collisions + 1).min(MAX_DOUBLINGS)
        } else {
            0
        };
        match budget {
            Budget::Attempts if self.rounds >= retry.attempts() => AfterRound::Stop,
            Budget::Attempts => AfterRound::After(retry.jitter(Duration::MAX, draw)),
            Budget::Until(Some(left)) if left.is_zero() => AfterRound::TimedOut,
            Budget::Until(left) => {
                let pause = match last.holder_left {
                    _ if last.woken && last.collided => {
                        retry.jitter(WAKE_SPREAD * 2u32.pow(self.collisions), draw)
                    }
                    // A release wakes us; otherwise the holder's keys expire
                    // then (spread a little so waiters do not all arrive at
                    // once).
                    Some(holder_left) if last.woken => {
                        holder_left + retry.jitter(holder_left / 8 + Duration::from_millis(1), draw)
                    }
                    // Polling: never past the holder's expiry.
                    _ => retry.jitter(last.holder_left.unwrap_or(Duration::MAX), draw),
                };
                // Far back in line: a release that keeps the lock for this
                // waiter wakes it; until then it polls seldom.
                let pause = match last.ahead {
                    Some(ahead) if last.woken && ahead >= NEAR_HEAD => {
                        let far = FAR_STEP * ahead.min(FAR_AHEAD);
                        pause.max(far + retry.jitter(FAR_STEP, draw))
                    }
                    _ => pause,
                };
                // No round can be granted before a quorum counts again: no
                // attempt before then (spread a little, as on a holder).
                let pause = match last.quorum {
                    Counts::Now => {
                        self.quarantined = 0;
                        pause
                    }
                    Counts::After(counts) => {
                        self.quarantined = 0;
                        let spread = retry.jitter(counts / 16 + Duration::from_millis(1), draw);
                        pause.max(counts + Duration::from_millis(1) + spread)
                    }
                    Counts::Unknown => {
                        let doubled = QUARANTINE_POLL_MIN
                            .saturating_mul(2u32.saturating_pow(self.quarantined))
                            .min(QUARANTINE_POLL_MAX);
                        self.quarantined = (self.quarantined + 1).min(MAX_DOUBLINGS);
                        // In the upper half: never shorter than half the step.
                        let half = doubled / 2;
                        pause.max(half + retry.jitter(half, draw).min(half))
                    }
                };
                AfterRound::After(pause.min(left.unwrap_or(Duration::MAX)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn last(collided: bool, holder_left: Option<Duration>, woken: bool) -> Last {
        Last {
            collided,
            holder_left,
            woken,
            ahead: None,
            quorum: Counts::Now,
        }
    }

    #[test]
    fn a_quorum_counts_when_its_last_quarantine_ends() {
        let s = Duration::from_secs;
        use Counts::{After, Now, Unknown};
        assert_eq!(quorum_counts([Now, Now, Now, After(s(1)), Unknown], 3), Now);
        assert_eq!(
            quorum_counts([Now, Now, After(s(2)), After(s(1)), Unknown], 3),
            After(s(1))
        );
        assert_eq!(
            quorum_counts(
                [
                    After(s(4)),
                    After(s(3)),
                    After(s(5)),
                    After(s(4)),
                    After(s(9))
                ],
                3
            ),
            After(s(4))
        );
        assert_eq!(
            quorum_counts([Now, Unknown, Unknown, After(s(1)), Unknown], 3),
            Unknown
        );
        assert_eq!(quorum_counts([Now], 1), Now);
    }

    /// While no quorum can count, a waiter's next round comes no earlier
    /// than the moment one can (known), or after a pause that doubles per
    /// such round (unknown) — never past its time left; a round that can
    /// count again starts the doubling over.
    #[test]
    fn waiting_sleeps_until_a_quorum_can_count() {
        let retry = Retry::new(3, 200 * MS);
        let until = |left| Budget::Until(Some(left));
        let blocked = |quorum| Last {
            quorum,
            ..last(false, None, true)
        };
        for draw in [0, u64::MAX] {
            let mut b = Backoff::default();
            match b.next(
                &retry,
                until(Duration::from_secs(60)),
                blocked(Counts::After(3 * MS * 1000)),
                draw,
            ) {
                AfterRound::After(p) => assert!(
                    p > 3000 * MS && p <= 3000 * MS + 3000 * MS / 16 + 2 * MS,
                    "{p:?}"
                ),
                other => panic!("{other:?}"),
            }
            // Never past the time left.
            assert_eq!(
                b.next(
                    &retry,
                    until(2 * MS),
                    blocked(Counts::After(3 * MS * 1000)),
                    draw
                ),
                AfterRound::After(2 * MS)
            );
            let mut total = Duration::ZERO;
            let mut rounds = 0;
            while total < Duration::from_secs(4) {
                match b.next(
                    &retry,
                    until(Duration::from_secs(60)),
                    blocked(Counts::Unknown),
                    draw,
                ) {
                    AfterRound::After(p) => {
                        assert!(
                            p >= QUARANTINE_POLL_MIN / 2 && p <= QUARANTINE_POLL_MAX,
                            "{p:?}"
                        );
                        total += p;
                    }
                    other => panic!("{other:?}"),
                }
                rounds += 1;
            }
            assert!(rounds <= 12, "{rounds} rounds through 4 s");
            b.next(
                &retry,
                until(Duration::from_secs(60)),
                blocked(Counts::Now),
                draw,
            );
            assert_eq!(b.quarantined, 0);
        }
    }

    #[test]
    fn jitter_is_bounded_by_the_policy_and_the_cap() {
        let retry = Retry::new(3, 200 * MS);
        for draw in [0, 1, 7_919, u64::MAX] {
            assert!(retry.jitter(Duration::MAX, draw) <= 200 * MS);
            assert!(retry.jitter(10 * MS, draw) <= 10 * MS);
        }
        assert_eq!(retry.jitter(Duration::ZERO, u64::MAX), Duration::ZERO);
        assert_eq!(Retry::none().jitter(Duration::MAX, 12_345), Duration::ZERO);
    }

    #[test]
    fn attempts_are_counted() {
        let retry = Retry::new(3, 200 * MS);
        let mut b = Backoff::default();
        let l = last(false, None, false);
        assert!(matches!(
            b.next(&retry, Budget::Attempts, l, 5),
            AfterRound::After(_)
        ));
        assert!(matches!(
            b.next(&retry, Budget::Attempts, l, 5),
            AfterRound::After(_)
        ));
        assert_eq!(b.next(&retry, Budget::Attempts, l, 5), AfterRound::Stop);
    }

    #[test]
    fn waiting_sleeps_on_the_holder_and_never_past_the_time_left() {
        let retry = Retry::new(3, 200 * MS);
        let mut b = Backoff::default();
        let until = |left| Budget::Until(Some(left));
        // Listening: until the holder's keys expire, plus at most 1/8 + 1 ms.
        match b.next(
            &retry,
            until(Duration::from_secs(60)),
            last(false, Some(800 * MS), true),
            u64::MAX,
        ) {
            AfterRound::After(p) => assert!(p >= 800 * MS && p <= 901 * MS, "{p:?}"),
            other => panic!("{other:?}"),
        }
        // Polling: never past the holder's expiry.
        match b.next(
            &retry,
            until(Duration::from_secs(60)),
            last(false, Some(50 * MS), false),
            u64::MAX,
        ) {
            AfterRound::After(p) => assert!(p <= 50 * MS),
            other => panic!("{other:?}"),
        }
        // Never past the time left; none left is a timeout.
        assert_eq!(
            b.next(
                &retry,
                until(5 * MS),
                last(false, Some(800 * MS), true),
                u64::MAX
            ),
            AfterRound::After(5 * MS)
        );
        assert_eq!(
            b.next(&retry, until(Duration::ZERO), last(false, None, true), 0),
            AfterRound::TimedOut
        );
    }

    #[test]
    fn collisions_back_off_binary_and_capped() {
        let retry = Retry::new(3, Duration::from_secs(10));
        let mut b = Backoff::default();
        let mut bounds = Vec::new();
        for _ in 0..8 {
            match b.next(
                &retry,
                Budget::Until(None),
                last(true, None, true),
                u64::MAX,
            ) {
                AfterRound::After(p) => bounds.push(p),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(bounds[0], WAKE_SPREAD * 2);
        assert_eq!(bounds[1], WAKE_SPREAD * 4);
        assert_eq!(bounds[7], WAKE_SPREAD * 64);
        // A round without a collision starts over.
        assert!(matches!(
            b.next(&retry, Budget::Until(None), last(false, None, true), 0),
            AfterRound::After(_)
        ));
        assert_eq!(b.collisions, 0);
    }
}
