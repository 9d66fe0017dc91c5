//! One acquire round per resource at a time from one client, for the locks
//! only one can hold (not readers, not a reentrant owner's holds): a round
//! for a resource waits while another of the same client's rounds for it is
//! in flight. Two such rounds of one client can only lose to each other
//! (at most one wins, and split votes leave neither); run in turn,
//! each is one round trip and the lock keeps moving — hundreds of tasks
//! contending for one resource no longer flood the nodes with rounds that
//! only refuse each other. Holding is not a turn: only the round is.
//!
//! Cheap when uncontended: one hash, one table lookup and one small
//! allocation (the entry's gate); an entry lives while some round of its
//! resource runs or waits, so the table is bounded by the rounds in flight.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The resources with an acquire round in flight.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    table: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    hasher: RandomState,
}

/// A round's turn for its resource; the next round's when dropped.
pub(crate) struct Turn<'a> {
    turns: &'a Turns,
    key: u64,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Turns {
    fn table(&self) -> MutexGuard<'_, HashMap<u64, Arc<tokio::sync::Mutex<()>>>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn of `resource` (a lock's first key).
    pub(crate) async fn take(&self, resource: &str) -> Turn<'_> {
        let key = self.hasher.hash_one(resource);
        let gate = Arc::clone(self.table().entry(key).or_default());
        let guard = gate.lock_owned().await;
        Turn {
            turns: self,
            key,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut table = self.turns.table();
        drop(self.guard.take());
        // Only the table holds it now: no round runs or waits for it.
        if table
            .get(&self.key)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn rounds_of_one_resource_take_turns_and_the_table_empties() {
        let turns = Turns::default();
        let first = turns.take("a").await;
        let other = turns.take("b").await; // another resource: at once
        let mut second = Box::pin(turns.take("a"));
        assert!(futures::poll!(second.as_mut()).is_pending());
        drop(first);
        let second = second.await;
        assert_eq!(turns.len(), 2);
        drop((second, other));
        assert_eq!(turns.len(), 0);
        // A waiter dropped while waiting leaves nothing behind.
        let held = turns.take("c").await;
        let mut waiting = Box::pin(turns.take("c"));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        drop(waiting);
        drop(held);
        assert_eq!(turns.len(), 0);
    }
}
