//! Keeping a lease: when to extend next, and when the lease is gone.
//!
//! ```text
//! start ─▶ extend after `every` ─┬─ extended            ─▶ again after `every`
//!                                ├─ failed, may recover ─▶ again after left/4
//!                                │                          (1 ms ≤ · ≤ every)
//!                                └─ gone for good        ─▶ lost
//! `cap` extensions made ─▶ no more: the lease ends at its deadline
//! the deadline passes first ─▶ lost (the driver's clock says so)
//! ```

use std::time::Duration;

/// A lease is extended every `ttl / EXTENSIONS_PER_TTL` unless told
/// otherwise: two extensions may fail before it lapses.
pub(crate) const EXTENSIONS_PER_TTL: u32 = 3;

/// The default extension interval of a lease of `ttl`.
pub(crate) fn default_interval(ttl: Duration) -> Duration {
    ttl / EXTENSIONS_PER_TTL
}

/// What one extension attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extension {
    /// A quorum extended it.
    Extended,
    /// It failed, but a quorum may still hold it: try again.
    Failed,
    /// Too few nodes hold it to ever make a quorum again.
    Gone,
}

/// The keeper of one lease, between extensions.
#[derive(Debug, Clone)]
pub(crate) struct Keeper {
    every: Duration,
    cap: Option<u32>,
    extensions: u32,
}

impl Keeper {
    /// Extending every `every`, at most `cap` times.
    pub(crate) fn new(every: Duration, cap: Option<u32>) -> Self {
        Keeper {
            every,
            cap,
            extensions: 0,
        }
    }

    /// How long to wait before the first extension.
    pub(crate) fn first(&self) -> Duration {
        self.every
    }

    /// Whether no more extensions may be made (the lease then ends at its
    /// deadline).
    pub(crate) fn capped(&self) -> bool {
        self.cap.is_some_and(|cap| self.extensions >= cap)
    }

    /// After an attempt, with `left` until the lease's deadline: how long to
    /// wait before the next one, or `None` when the lease is gone.
    pub(crate) fn after(&mut self, attempt: Extension, left: Duration) -> Option<Duration> {
        match attempt {
            Extension::Extended => {
                self.extensions += 1;
                Some(self.every)
            }
            // Several more tries fit before the deadline.
            Extension::Failed => Some((left / 4).clamp(Duration::from_millis(1), self.every)),
            Extension::Gone => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn extends_every_interval_and_retries_faster_after_a_failure() {
        let mut k = Keeper::new(300 * MS, None);
        assert_eq!(k.first(), 300 * MS);
        assert_eq!(k.after(Extension::Extended, 900 * MS), Some(300 * MS));
        assert_eq!(k.after(Extension::Failed, 400 * MS), Some(100 * MS));
        assert_eq!(k.after(Extension::Failed, 2 * MS), Some(MS));
        assert_eq!(k.after(Extension::Failed, 10_000 * MS), Some(300 * MS));
        assert_eq!(k.after(Extension::Gone, 900 * MS), None);
        assert!(!k.capped());
    }

    #[test]
    fn a_cap_counts_extensions_only() {
        let mut k = Keeper::new(MS, Some(2));
        k.after(Extension::Failed, MS);
        assert!(!k.capped());
        k.after(Extension::Extended, MS);
        k.after(Extension::Extended, MS);
        assert!(k.capped());
    }
}
