//! The locks the own API granted through this instance, by token, until
//! they expire or are released: at most `max_held`. An expired one is
//! forgotten without a release (its keys lapse on the nodes by
//! themselves), as new ones come in.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use redquorum::Lock;

use super::Failure;

#[derive(Debug)]
pub(crate) struct Held {
    /// By token: the resource named at the acquire, and the lock.
    by_token: HashMap<String, (String, Lock)>,
    expiry: BTreeSet<(Instant, String)>,
    max: usize,
}

impl Held {
    pub(crate) fn new(max: usize) -> Self {
        Held {
            by_token: HashMap::new(),
            expiry: BTreeSet::new(),
            max,
        }
    }

    /// Room for one more, after forgetting the expired.
    pub(crate) fn room(&mut self, now: Instant) -> Result<(), Failure> {
        while let Some((deadline, token)) = self.expiry.first().cloned() {
            if deadline > now {
                break;
            }
            self.expiry.pop_first();
            if let Some((_, lock)) = self.by_token.remove(&token) {
                let _ = lock.detach(); // lapsed: nothing to release
            }
        }
        if self.by_token.len() >= self.max {
            return Err(Failure::too_many(format!(
                "{} locks held through this instance (--max-held)",
                self.max
            )));
        }
        Ok(())
    }

    /// Remembers `lock` (the table may pass `max` by the acquires that
    /// were in flight when it was checked: at most `max_in_flight`).
    pub(crate) fn insert(&mut self, resource: &str, lock: Lock) {
        let token = lock.token().to_owned();
        self.expiry.insert((lock.deadline(), token.clone()));
        self.by_token.insert(token, (resource.to_owned(), lock));
    }

    /// Takes out `token`'s lock of `resource`, if held here and valid.
    pub(crate) fn take(&mut self, token: &str, resource: &str, now: Instant) -> Option<Lock> {
        let (named, _) = self.by_token.get(token)?;
        if named != resource {
            return None;
        }
        let (_, lock) = self.by_token.remove(token)?;
        self.expiry.remove(&(lock.deadline(), token.to_owned()));
        if lock.deadline() <= now {
            let _ = lock.detach();
            return None;
        }
        Some(lock)
    }

    /// Forgets every lock, leaving each to its holder.
    pub(crate) fn leave_all(&mut self) {
        self.expiry.clear();
        for (_, (_, lock)) in self.by_token.drain() {
            let _ = lock.detach();
        }
    }
}
