//! Every claim of a client that may have set something on the nodes, so
//! that [`Driver::shutdown`] settles each one: an acquisition whose round
//! is in flight (registered as its calls are made), a lock held — a dropped
//! one whose background release is not made yet (a dropped `KeepAlive`'s
//! task is aborted later than the drop), one still owned by a task that
//! runs on (its lease then ends as lost) — and a waiter's last refused
//! round, whose place in line or writer's intent stands on the nodes.
//!
//! The table is also the gate of new acquisitions: once the shutdown has
//! closed it ([`Holds::close`]), no acquire round is made and no grant
//! becomes a lock. Whatever is registered before that is released by the
//! shutdown, behind the calls already made (a node applies one client's
//! calls in the order made).
//!
//! One entry per claim — a `Weak` to it — added when its first round is
//! made and removed when its lock is released or dropped; an entry whose
//! claim is gone (a refused round's, a waiter's replaced one) is swept
//! when the table would grow, so the table is bounded by the claims alive
//! at once. A freed slot is used again.
//!
//! [`Driver::shutdown`]: crate::engine::driver::Driver::shutdown

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::engine::claim::Claim;

/// The fewest slots the table sweeps at.
const MIN_SWEEP: usize = 16;

/// The claims of one client that may hold something on the nodes.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// The table's size at which it is swept next.
    sweep_at: usize,
    /// The shutdown began: nothing new is admitted.
    closed: bool,
}

/// One claim: its round in flight or refused, or (`held`) its lock.
#[derive(Debug)]
struct Entry {
    claim: Weak<Claim>,
    held: bool,
}

impl Table {
    /// Frees the slots whose claims are gone, when none is free and the
    /// table has doubled since the last sweep (amortized O(1) per add).
    fn sweep(&mut self) {
        if !self.free.is_empty() || self.slots.len() < self.sweep_at.max(MIN_SWEEP) {
            return;
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|e| e.claim.strong_count() == 0) {
                *slot = None;
                self.free.push(i);
            }
        }
        let live = self.slots.len() - self.free.len();
        self.sweep_at = 2 * live;
    }

    fn add(&mut self, claim: &Arc<Claim>, held: bool) -> usize {
        self.sweep();
        let weak = Some(Entry {
            claim: Arc::downgrade(claim),
            held,
        });
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = weak;
                slot
            }
            None => {
                self.slots.push(weak);
                self.slots.len() - 1
            }
        }
    }
}

impl Holds {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An acquisition of `claim` begins: unless the table is closed, `make`
    /// (its first round's calls) runs under the table's lock and the claim
    /// is registered — a shutdown either finds it here and releases it
    /// behind those calls, or began before, and nothing is made. Its slot
    /// and what `make` returned; `None` once closed.
    pub(crate) fn admit<R>(
        &self,
        claim: &Arc<Claim>,
        make: impl FnOnce() -> R,
    ) -> Option<(usize, R)> {
        let mut table = self.table();
        if table.closed {
            return None;
        }
        let made = make();
        Some((table.add(claim, false), made))
    }

    /// The claim in `slot` was granted: unless the table is closed, `then`
    /// runs under its lock and the claim is a lock from here on (released
    /// after the waiters by a shutdown). Whether it is.
    pub(crate) fn grant(&self, slot: usize, then: impl FnOnce()) -> bool {
        let mut table = self.table();
        if table.closed {
            return false;
        }
        if let Some(Some(entry)) = table.slots.get_mut(slot) {
            entry.held = true;
        }
        then();
        true
    }

    /// `then` (a later round's calls, or a grant becoming a lock) runs
    /// under the table's lock unless the table is closed: its result, or
    /// `None` once closed (the shutdown has released the claim).
    pub(crate) fn unless_closed<R>(&self, then: impl FnOnce() -> R) -> Option<R> {
        let table = self.table();
        (!table.closed).then(then)
    }

    /// A lock on `claim` is held (one not admitted through
    /// [`admit`](Self::admit)): its slot.
    #[cfg(test)]
    fn add(&self, claim: &Arc<Claim>) -> usize {
        self.table().add(claim, true)
    }

    /// The lock in `slot` is released or dropped: `release` (its release,
    /// handed to the nodes) runs before the slot is freed, under the
    /// table's lock, so a [`Driver::shutdown`] either finds it here and
    /// releases it itself, or begins after the release was handed over,
    /// before it closes the nodes. Returns what `release` returned.
    ///
    /// [`Driver::shutdown`]: crate::engine::driver::Driver::shutdown
    pub(crate) fn remove_with<R>(&self, slot: usize, release: impl FnOnce() -> R) -> R {
        let mut table = self.table();
        let released = release();
        if table.slots.get_mut(slot).and_then(Option::take).is_some() {
            table.free.push(slot);
        }
        released
    }

    /// Closes the table (nothing is admitted from now on) and calls
    /// `release` on every claim registered whose release has not begun,
    /// under the table's lock: first the rounds in flight and the waiters'
    /// marks, then the locks held — a lock released while one of the
    /// client's own waiters still stood in its line would be kept for that
    /// waiter (fair waiting's hand-over), which is gone by then.
    pub(crate) fn close(&self, mut release: impl FnMut(&Arc<Claim>)) {
        let mut table = self.table();
        table.closed = true;
        for held in [false, true] {
            let live = table
                .slots
                .iter()
                .flatten()
                .filter(|entry| entry.held == held)
                .filter_map(|entry| entry.claim.upgrade())
                .filter(|claim| !claim.is_released());
            for claim in live {
                release(&claim);
            }
        }
    }

    /// Every claim registered, whose release has not begun.
    #[cfg(test)]
    fn live(&self) -> Vec<Arc<Claim>> {
        let table = self.table();
        table
            .slots
            .iter()
            .flatten()
            .filter_map(|entry| entry.claim.upgrade())
            .filter(|claim| !claim.is_released())
            .collect()
    }

    /// How many slots are taken now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().slots.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::claim::Keys;
    use crate::proto::keys::KeyLayout;

    fn claim(name: &str) -> Arc<Claim> {
        let layout = KeyLayout::new("", false).unwrap();
        Arc::new(Claim::new(Keys::single(&layout, name, false).unwrap()))
    }

    #[test]
    fn slots_are_used_again_and_released_claims_are_not_live() {
        let holds = Holds::default();
        let (a, b) = (claim("a"), claim("b"));
        let sa = holds.add(&a);
        let sb = holds.add(&b);
        assert_eq!(holds.live().len(), 2);
        holds.remove_with(sa, || ());
        holds.remove_with(sa, || ()); // twice changes nothing
        assert_eq!(holds.len(), 1);
        let c = claim("c");
        assert_eq!(holds.add(&c), sa, "a freed slot is used again");
        b.release_begins();
        assert_eq!(holds.live().len(), 1);
        drop(c);
        assert!(holds.live().is_empty(), "a dropped claim is not live");
        holds.remove_with(sb, || ());
    }

    #[test]
    fn claims_gone_are_swept_and_the_table_stays_bounded() {
        let holds = Holds::default();
        let kept = claim("kept");
        let slot = holds.add(&kept);
        for i in 0..1_000 {
            let gone = claim(&format!("gone:{i}"));
            assert!(holds.admit(&gone, || ()).is_some());
        }
        assert!(holds.len() <= 2 * MIN_SWEEP + 2, "{} slots", holds.len());
        assert_eq!(holds.live().len(), 1, "the kept claim is never swept");
        holds.remove_with(slot, || ());
    }

    #[test]
    fn a_closed_table_admits_nothing_and_releases_every_live_claim() {
        let holds = Holds::default();
        let (a, b) = (claim("a"), claim("b"));
        holds.add(&b);
        let (_, made) = holds.admit(&a, || "made").unwrap();
        assert_eq!(made, "made");
        let c = claim("c");
        let (slot, ()) = holds.admit(&c, || ()).unwrap();
        assert!(holds.grant(slot, || ()));
        c.release_begins();
        let mut released = Vec::new();
        holds.close(|claim| released.push(claim.token().to_owned()));
        assert_eq!(
            released,
            [a.token(), b.token()],
            "what is not released yet, waiters and rounds first"
        );
        let mut ran = false;
        assert!(holds.admit(&claim("c"), || ran = true).is_none());
        assert!(holds.unless_closed(|| ()).is_none());
        assert!(!holds.grant(slot, || ran = true));
        assert!(!ran, "nothing is made once closed");
    }
}
