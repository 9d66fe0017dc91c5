//! The locks this instance granted, remembered until they expire: a
//! resource's owner and token, so that an unlock through this instance
//! releases by token at once (one round), without first reading who holds
//! it. The nodes stay the truth: a lock granted through another instance,
//! or one this table forgot, is found by an inspection instead
//! (docs/serve.md, "Owners and tokens").
//!
//! Bounded, and the bounds hold while rounds are under way: a grant's
//! place is reserved before the nodes are asked, so that a lock is never
//! taken and then refused, and the table never passes its bound by the
//! rounds in flight. Each grant holds one of the instance's places
//! ([`Limits::max_held`](crate::Limits::max_held), shared with the own
//! API's locks and leases), and an owner's reservations and grants
//! together are at most
//! [`Limits::max_held_per_owner`](crate::Limits::max_held_per_owner).
//! Expired entries are dropped as new ones come in.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

/// One lock granted through this instance.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) owner: Arc<str>,
    pub(crate) token: String,
    pub(crate) deadline: Instant,
    /// Its place among the instance's `max_held`, freed with the entry.
    pub(crate) _place: OwnedSemaphorePermit,
}

#[derive(Debug)]
pub(crate) struct Grants {
    by_resource: HashMap<String, Grant>,
    /// Each owner's grants and reservations.
    per_owner: HashMap<Arc<str>, usize>,
    /// Expiry order: (deadline, resource).
    expiry: BTreeSet<(Instant, String)>,
    max_per_owner: usize,
}

impl Grants {
    pub(crate) fn new(max_per_owner: usize) -> Self {
        Grants {
            by_resource: HashMap::new(),
            per_owner: HashMap::new(),
            expiry: BTreeSet::new(),
            max_per_owner,
        }
    }

    /// Reserves a grant for `owner`, before the nodes are asked: `false`
    /// when the owner's grants and reservations fill its bound. Every
    /// reservation ends in [`insert`](Self::insert) or
    /// [`unreserve`](Self::unreserve).
    pub(crate) fn reserve(&mut self, owner: &Arc<str>, now: Instant) -> bool {
        self.forget_expired(now);
        let n = self.per_owner.entry(Arc::clone(owner)).or_default();
        if *n >= self.max_per_owner {
            self.drop_owner_if_none(owner);
            return false;
        }
        *n += 1;
        true
    }

    /// Gives back a reservation that no grant filled.
    pub(crate) fn unreserve(&mut self, owner: &Arc<str>) {
        if let Some(n) = self.per_owner.get_mut(owner) {
            *n = n.saturating_sub(1);
        }
        self.drop_owner_if_none(owner);
    }

    fn drop_owner_if_none(&mut self, owner: &str) {
        if self.per_owner.get(owner) == Some(&0) {
            self.per_owner.remove(owner);
        }
    }

    /// Remembers a grant, filling a reservation of its owner's (and
    /// replacing an expired grant of the resource).
    pub(crate) fn insert(&mut self, resource: &str, grant: Grant) {
        self.remove(resource);
        self.expiry.insert((grant.deadline, resource.to_owned()));
        self.by_resource.insert(resource.to_owned(), grant);
    }

    /// The live grant for `resource`, if this instance made one.
    pub(crate) fn get(&self, resource: &str, now: Instant) -> Option<&Grant> {
        self.by_resource.get(resource).filter(|g| g.deadline > now)
    }

    /// Forgets the grant for `resource`, if any.
    pub(crate) fn remove(&mut self, resource: &str) -> Option<Grant> {
        let grant = self.by_resource.remove(resource)?;
        self.expiry.remove(&(grant.deadline, resource.to_owned()));
        self.unreserve(&grant.owner);
        Some(grant)
    }

    /// Drops every grant past its deadline.
    pub(crate) fn forget_expired(&mut self, now: Instant) {
        while let Some((deadline, resource)) = self.expiry.first().cloned() {
            if deadline > now {
                break;
            }
            self.remove(&resource);
        }
    }

    /// Grants remembered now (live or not yet swept).
    pub(crate) fn len(&self) -> usize {
        self.by_resource.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn owner(name: &str) -> Arc<str> {
        name.into()
    }

    fn grant(owner: &str, deadline: Instant) -> Grant {
        let places = Arc::new(tokio::sync::Semaphore::new(1));
        Grant {
            owner: owner.into(),
            token: "t".into(),
            deadline,
            _place: places.try_acquire_owned().unwrap(),
        }
    }

    #[test]
    fn an_owner_is_bounded_by_its_grants_and_reservations_together() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut grants = Grants::new(2);
        let a = owner("a");
        assert!(grants.reserve(&a, now));
        grants.insert("r1", grant("a", later));
        assert!(grants.reserve(&a, now), "a round under way");
        assert!(!grants.reserve(&a, now), "the round in flight counts");
        assert!(
            grants.reserve(&owner("b"), now),
            "another owner's bound is its own"
        );
        grants.unreserve(&a); // the round was refused
        assert!(grants.reserve(&a, now));
        grants.insert("r2", grant("a", later));
        assert!(!grants.reserve(&a, now));
        grants.remove("r1");
        assert!(grants.reserve(&a, now));
    }

    #[test]
    fn expired_grants_make_room_and_are_not_found() {
        let now = Instant::now();
        let mut grants = Grants::new(1);
        let a = owner("a");
        assert!(grants.reserve(&a, now));
        grants.insert("r", grant("a", now + Duration::from_secs(1)));
        assert!(grants.get("r", now).is_some());
        let after = now + Duration::from_secs(2);
        assert!(grants.get("r", after).is_none());
        assert!(grants.reserve(&a, after));
        assert_eq!(grants.len(), 0);
    }

    #[test]
    fn a_new_grant_replaces_the_old_and_counts_once() {
        let now = Instant::now();
        let mut grants = Grants::new(2);
        let a = owner("a");
        assert!(grants.reserve(&a, now));
        grants.insert("r", grant("a", now + Duration::from_secs(1)));
        assert!(grants.reserve(&a, now));
        grants.insert("r", grant("a", now + Duration::from_secs(5)));
        assert_eq!(grants.len(), 1);
        grants.forget_expired(now + Duration::from_secs(2));
        assert_eq!(grants.len(), 1, "the old deadline left the index with it");
        assert!(
            grants.reserve(&a, now),
            "the replaced grant's count went with it"
        );
        assert!(!grants.reserve(&a, now));
    }
}
