//! The locks a client holds now, so that [`Driver::shutdown`] releases
//! every one: a dropped lock whose background release is not made yet (a
//! dropped `KeepAlive`'s task is aborted later than the drop), and one
//! still owned by a task that runs on (its lease then ends as lost).
//!
//! One entry per live lock — a `Weak` to its claim — added when the lock is
//! made and removed when it is released or dropped, so the table is
//! bounded by the locks held at once; a freed slot is used again.
//!
//! [`Driver::shutdown`]: crate::engine::driver::Driver::shutdown

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::engine::claim::Claim;

/// The live locks of one client.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<Weak<Claim>>>,
    free: Vec<usize>,
}

impl Holds {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lock on `claim` is held: its slot.
    pub(crate) fn add(&self, claim: &Arc<Claim>) -> usize {
        let mut table = self.table();
        let weak = Some(Arc::downgrade(claim));
        match table.free.pop() {
            Some(slot) => {
                table.slots[slot] = weak;
                slot
            }
            None => {
                table.slots.push(weak);
                table.slots.len() - 1
            }
        }
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

    /// Every lock still held, whose release has not begun.
    pub(crate) fn live(&self) -> Vec<Arc<Claim>> {
        let table = self.table();
        table
            .slots
            .iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .filter(|claim| !claim.is_released())
            .collect()
    }

    /// How many locks are held now.
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
}
