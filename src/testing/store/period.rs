//! `period.lua`, as the store does it: a period's mark read, set and
//! taken back (once per period).

use super::{Entry, Store, Value};
use crate::proto::op::Period;

impl Store {
    /// `period.lua`'s `period_left`: the mark's PTTL while it stands
    /// (`Some(None)`: no expiry), else `None`.
    pub(super) fn period_left(&mut self, mark: Option<&str>, now: u64) -> Option<Option<u64>> {
        mark.and_then(|key| self.live(key, now))
            .map(|e| e.pttl(now))
    }

    /// `period_begin`: the mark set to `token` for the period.
    pub(super) fn period_begin(&mut self, period: Option<Period<'_>>, token: &str, now: u64) {
        if let Some(p) = period {
            self.set(p.key, Entry::text(token, now, p.ms));
        }
    }

    /// `period_undo`: the mark deleted where it holds `token` exactly.
    pub(super) fn period_undo(&mut self, mark: Option<&str>, token: &str, now: u64) {
        if let Some(key) = mark
            && self
                .live(key, now)
                .is_some_and(|e| matches!(&e.value, Value::Text(t) if t == token))
        {
            self.keys.remove(key);
        }
    }

    /// `period_pttl`: a refusal's time left, the holder's key's or, where it
    /// is gone, the mark's.
    pub(super) fn period_pttl(
        &self,
        key: &str,
        mark: Option<Option<u64>>,
        now: u64,
    ) -> Option<u64> {
        match self.peek(key, now) {
            Some(e) => e.pttl(now),
            None => mark.flatten(),
        }
    }
}
