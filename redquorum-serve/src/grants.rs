//! The locks this instance granted, remembered until they expire: a
//! resource's owner and token, so that an unlock through this instance
//! releases by token at once (one round), without first reading who holds
//! it. The nodes stay the truth: a lock granted through another instance,
//! or one this table forgot, is found by an inspection instead
//! (docs/serve.md, "Owners and tokens").
//!
//! Bounded: at most [`Limits::max_held`](crate::Limits::max_held) entries,
//! [`Limits::max_held_per_owner`](crate::Limits::max_held_per_owner) per
//! owner; expired entries are dropped as new ones come in.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// One lock granted through this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) owner: Arc<str>,
    pub(crate) token: String,
    pub(crate) deadline: Instant,
}

/// Why a grant cannot be remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The table holds `max_held` live grants.
    Table,
    /// The owner holds `max_held_per_owner`.
    Owner,
}

#[derive(Debug)]
pub(crate) struct Grants {
    by_resource: HashMap<String, Grant>,
    per_owner: HashMap<Arc<str>, usize>,
    /// Expiry order: (deadline, resource).
    expiry: BTreeSet<(Instant, String)>,
    max_held: usize,
    max_per_owner: usize,
}

impl Grants {
    pub(crate) fn new(max_held: usize, max_per_owner: usize) -> Self {
        Grants {
            by_resource: HashMap::new(),
            per_owner: HashMap::new(),
            expiry: BTreeSet::new(),
            max_held,
            max_per_owner,
        }
    }

    /// Whether a grant for `owner` would fit now (checked before the
    /// nodes are asked, so that a lock is never taken and then refused).
    pub(crate) fn room_for(&mut self, owner: &str, now: Instant) -> Result<(), Full> {
        self.forget_expired(now);
        if self.by_resource.len() >= self.max_held {
            return Err(Full::Table);
        }
        if self.per_owner.get(owner).copied().unwrap_or(0) >= self.max_per_owner {
            return Err(Full::Owner);
        }
        Ok(())
    }

    /// Remembers a grant (replacing an expired one for the resource).
    pub(crate) fn insert(&mut self, resource: &str, grant: Grant) {
        self.remove(resource);
        *self.per_owner.entry(Arc::clone(&grant.owner)).or_default() += 1;
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
        if let Some(n) = self.per_owner.get_mut(&grant.owner) {
            *n -= 1;
            if *n == 0 {
                self.per_owner.remove(&grant.owner);
            }
        }
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

    fn grant(owner: &str, deadline: Instant) -> Grant {
        Grant {
            owner: owner.into(),
            token: "t".into(),
            deadline,
        }
    }

    #[test]
    fn the_table_and_each_owner_are_bounded() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut grants = Grants::new(3, 2);
        grants.room_for("a", now).unwrap();
        grants.insert("r1", grant("a", later));
        grants.insert("r2", grant("a", later));
        assert_eq!(grants.room_for("a", now), Err(Full::Owner));
        grants.insert("r3", grant("b", later));
        assert_eq!(grants.room_for("c", now), Err(Full::Table));
        grants.remove("r1");
        grants.room_for("a", now).unwrap();
    }

    #[test]
    fn expired_grants_make_room_and_are_not_found() {
        let now = Instant::now();
        let mut grants = Grants::new(1, 1);
        grants.insert("r", grant("a", now + Duration::from_secs(1)));
        assert!(grants.get("r", now).is_some());
        let after = now + Duration::from_secs(2);
        assert!(grants.get("r", after).is_none());
        grants.room_for("a", after).unwrap();
        assert_eq!(grants.len(), 0);
    }

    #[test]
    fn a_new_grant_replaces_the_old_and_counts_once() {
        let now = Instant::now();
        let mut grants = Grants::new(10, 1);
        grants.insert("r", grant("a", now + Duration::from_secs(1)));
        grants.insert("r", grant("a", now + Duration::from_secs(5)));
        assert_eq!(grants.len(), 1);
        grants.forget_expired(now + Duration::from_secs(2));
        assert_eq!(grants.len(), 1, "the old deadline left the index with it");
        assert_eq!(grants.room_for("a", now), Err(Full::Owner));
    }
}
