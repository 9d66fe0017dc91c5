//! The locks the own API granted through this instance, by token, until
//! they expire or are released. Each holds one of the instance's places
//! ([`Limits::max_held`](crate::Limits::max_held)), taken before its round:
//! the table never passes the bound. An expired one is forgotten without
//! a release (its keys lapse on the nodes by themselves) when places run
//! short.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use redquorum::Lock;
use tokio::sync::OwnedSemaphorePermit;

/// A lock held here, with its place.
#[derive(Debug)]
pub(crate) struct Entry {
    resource: String,
    pub(crate) lock: Lock,
    pub(crate) place: OwnedSemaphorePermit,
}

#[derive(Debug, Default)]
pub(crate) struct Held {
    by_token: HashMap<String, Entry>,
    expiry: BTreeSet<(Instant, String)>,
}

impl Held {
    /// Forgets the expired, freeing their places.
    pub(crate) fn sweep(&mut self, now: Instant) {
        while let Some((deadline, token)) = self.expiry.first().cloned() {
            if deadline > now {
                break;
            }
            self.expiry.pop_first();
            if let Some(entry) = self.by_token.remove(&token) {
                let _ = entry.lock.detach(); // lapsed: nothing to release
            }
        }
    }

    /// Remembers `lock` of `resource` in `place`.
    pub(crate) fn insert(&mut self, resource: &str, lock: Lock, place: OwnedSemaphorePermit) {
        let token = lock.token().to_owned();
        self.expiry.insert((lock.deadline(), token.clone()));
        let resource = resource.to_owned();
        self.by_token.insert(
            token,
            Entry {
                resource,
                lock,
                place,
            },
        );
    }

    /// Takes out `token`'s lock of `resource`, if held here and valid.
    pub(crate) fn take(&mut self, token: &str, resource: &str, now: Instant) -> Option<Entry> {
        if self.by_token.get(token)?.resource != resource {
            return None;
        }
        let entry = self.by_token.remove(token)?;
        self.expiry
            .remove(&(entry.lock.deadline(), token.to_owned()));
        if entry.lock.deadline() <= now {
            let _ = entry.lock.detach();
            return None;
        }
        Some(entry)
    }

    /// Forgets every lock, leaving each to its holder.
    pub(crate) fn leave_all(&mut self) {
        self.expiry.clear();
        for (_, entry) in self.by_token.drain() {
            let _ = entry.lock.detach();
        }
    }
}
