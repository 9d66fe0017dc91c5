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

/// Collisions in a row beyond which the backoff stops doubling.
const MAX_DOUBLINGS: u32 = 6;

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
