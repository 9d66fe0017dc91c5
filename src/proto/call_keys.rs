//! A lock call's keys, computed once from its resources and the layout:
//! which keys each kind of lock takes, checked (names, duplicates, one hash
//! slot where a cluster needs it) before anything is sent. Pure.

use std::collections::HashSet;

use crate::proto::input::{InputError, check_name};
use crate::proto::keys::KeyLayout;
use crate::proto::slot::slot;

/// The kind of lock, which decides the scripts used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// One key holding a random token.
    Plain,
    /// One key holding a random token, plus a fencing counter.
    Fenced,
    /// One hash key holding `{owner: hold count}`.
    Reentrant,
    /// Several keys, set all-or-nothing on each node.
    Many,
    /// A reader of a read/write lock: keys `[writer, readers, intent, line,
    /// alive]`.
    Read,
    /// The writer of a read/write lock: keys as a reader's.
    Write,
    /// One slot of a semaphore: keys `[slot, holders, count, line, alive]`.
    Permit,
    /// Keys read by an inspection, which holds nothing.
    Inspect,
}

/// The keys of one lock call, computed once; a retry round takes a copy.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    flavor: Flavor,
    /// One lock key per resource, in the order given.
    lock: LockKeys,
    /// The fencing counter, for [`Flavor::Fenced`].
    fence: Option<String>,
    /// A plain or fenced lock's line of waiters, `[line, alive]` (empty:
    /// none).
    line: Box<[String]>,
    /// A plain or fenced lock's period mark, once per period
    /// ([`Keys::with_period`]).
    period: Option<Box<str>>,
    /// A semaphore's permit count, for [`Flavor::Permit`].
    permits: u32,
    /// Whether the keys carry the holder's label (not a plain lock under
    /// interop keys, whose value is the token alone as its peers set it;
    /// not a reader, a member of a sorted set).
    labeled: bool,
    /// How many bytes come before and after the resource in a lock key.
    around: (usize, usize),
}

/// The lock keys: one resource's in one allocation, or several.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LockKeys {
    One(String),
    Many(Box<[String]>),
}

impl LockKeys {
    fn as_slice(&self) -> &[String] {
        match self {
            LockKeys::One(key) => std::slice::from_ref(key),
            LockKeys::Many(keys) => keys,
        }
    }
}

/// How many decimal digits `n` has.
fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Refuses an empty resource name ([`check_name`]).
fn named(resource: &str) -> Result<&str, InputError> {
    check_name(resource)?;
    Ok(resource)
}

impl Keys {
    /// A plain or fenced lock on one resource.
    pub(crate) fn single(
        layout: &KeyLayout,
        resource: &str,
        fenced: bool,
    ) -> Result<Self, InputError> {
        let resource = named(resource)?;
        let line = layout
            .line_keys(resource, !fenced)
            .map_or_else(|| Box::new([]) as Box<[String]>, |keys| Box::new(keys));
        Ok(if fenced {
            Keys {
                flavor: Flavor::Fenced,
                lock: LockKeys::One(layout.lock_key(resource)),
                fence: Some(layout.fence_key(resource)),
                line,
                period: None,
                permits: 0,
                labeled: true,
                around: layout.around(false),
            }
        } else {
            Keys {
                flavor: Flavor::Plain,
                lock: LockKeys::One(layout.plain_key(resource)),
                fence: None,
                line,
                period: None,
                permits: 0,
                labeled: !layout.interop(),
                around: layout.around(true),
            }
        })
    }

    /// The same plain or fenced lock on `resource`, once per period: its
    /// acquire reads the period mark, its grant sets it
    /// ([`Period`](crate::proto::op::Period)). [`InputError::CrossSlot`]
    /// where the mark would not share the lock key's cluster slot.
    pub(crate) fn with_period(
        mut self,
        layout: &KeyLayout,
        resource: &str,
    ) -> Result<Self, InputError> {
        debug_assert!(self.restorable());
        let plain = self.flavor == Flavor::Plain;
        let key = layout
            .period_key(resource, plain)
            .ok_or_else(|| InputError::CrossSlot {
                resources: vec![resource.to_owned()],
            })?;
        self.period = Some(key.into());
        Ok(self)
    }

    /// Slot `slot` of the semaphore `name` of `permits` permits.
    pub(crate) fn permit(
        layout: &KeyLayout,
        name: &str,
        slot: u32,
        permits: u32,
    ) -> Result<Self, InputError> {
        let name = named(name)?;
        Ok(Keys {
            flavor: Flavor::Permit,
            lock: LockKeys::Many(Box::new(layout.permit_keys(name, slot))),
            fence: None,
            line: Box::new([]),
            period: None,
            permits,
            labeled: true,
            around: (layout.prefix().len() + 1, "}:permit:".len() + digits(slot)),
        })
    }

    /// A reentrant lock on one resource.
    pub(crate) fn reentrant(layout: &KeyLayout, resource: &str) -> Result<Self, InputError> {
        Ok(Keys {
            flavor: Flavor::Reentrant,
            lock: LockKeys::One(layout.lock_key(named(resource)?)),
            fence: None,
            line: Box::new([]),
            period: None,
            permits: 0,
            labeled: true,
            around: layout.around(false),
        })
    }

    /// One lock over several distinct resources.
    pub(crate) fn many(layout: &KeyLayout, resources: &[&str]) -> Result<Self, InputError> {
        if resources.is_empty() {
            return Err(InputError::NoResources);
        }
        let mut seen = HashSet::with_capacity(resources.len());
        if let Some(dup) = resources.iter().find(|r| !seen.insert(**r)) {
            return Err(InputError::DuplicateResource((*dup).to_owned()));
        }
        let lock = resources
            .iter()
            .map(|r| named(r).map(|r| layout.lock_key(r)))
            .collect::<Result<Box<[String]>, _>>()?;
        Ok(Keys {
            flavor: Flavor::Many,
            lock: LockKeys::Many(lock),
            fence: None,
            line: Box::new([]),
            period: None,
            permits: 0,
            labeled: true,
            around: layout.around(false),
        })
    }

    /// A reader (`write` false) or the writer of a read/write lock on one
    /// resource.
    pub(crate) fn rw(layout: &KeyLayout, resource: &str, write: bool) -> Result<Self, InputError> {
        let resource = named(resource)?;
        Ok(Keys {
            flavor: if write { Flavor::Write } else { Flavor::Read },
            lock: LockKeys::Many(Box::new(layout.rw_keys(resource))),
            fence: None,
            line: Box::new([]),
            period: None,
            permits: 0,
            labeled: write,
            around: (layout.prefix().len() + 1, "}:writer".len()),
        })
    }

    /// Keys to read ([`Step::Inspect`](crate::proto::round::Step::Inspect)), in order; the first names the
    /// resource in logs.
    pub(crate) fn inspect(keys: Vec<String>) -> Self {
        Keys {
            flavor: Flavor::Inspect,
            lock: LockKeys::Many(keys.into()),
            fence: None,
            line: Box::new([]),
            period: None,
            permits: 0,
            labeled: false,
            around: (0, 0),
        }
    }

    /// Whether every key of the lock hashes to one Redis Cluster slot, as a
    /// script on a cluster member needs.
    pub(crate) fn one_slot(&self) -> bool {
        let mut keys = self
            .lock
            .as_slice()
            .iter()
            .map(String::as_str)
            .chain(self.fence.as_deref())
            .chain(self.line.iter().map(String::as_str))
            .chain(self.period.as_deref())
            .map(|key| slot(key.as_bytes()));
        let first = keys.next();
        keys.all(|slot| Some(slot) == first)
    }

    /// The kind of lock, as metrics label it.
    pub(crate) fn kind(&self) -> &'static str {
        match self.flavor {
            Flavor::Plain => "plain",
            Flavor::Fenced => "fenced",
            Flavor::Reentrant => "reentrant",
            Flavor::Many => "many",
            Flavor::Read => "read",
            Flavor::Write => "write",
            Flavor::Permit => "permit",
            Flavor::Inspect => "inspect",
        }
    }

    /// Whether a refused acquire leaves a mark to take back when the caller
    /// gives up: a writer's intent, on the nodes whose readers refused it.
    pub(crate) fn marks_refusals(&self) -> bool {
        self.flavor == Flavor::Write
    }

    /// Whether two acquisitions of these keys can only exclude each other
    /// (at most one holds them at a time): not a reader (readers share),
    /// not a reentrant owner (its holds share), not an inspection.
    pub(crate) fn exclusive(&self) -> bool {
        matches!(
            self.flavor,
            Flavor::Plain | Flavor::Fenced | Flavor::Many | Flavor::Write | Flavor::Permit
        )
    }

    /// Whether an extension may set the key again on a node that lost it
    /// (plain and fenced locks: docs/design.md §4).
    pub(crate) fn restorable(&self) -> bool {
        matches!(self.flavor, Flavor::Plain | Flavor::Fenced)
    }

    /// The kind of lock, which decides the scripts used.
    pub(crate) fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The lock keys, one per resource, in the order given.
    pub(crate) fn lock_keys(&self) -> &[String] {
        self.lock.as_slice()
    }

    /// The fencing counter's key, for a fenced lock.
    pub(crate) fn fence_key(&self) -> Option<&str> {
        self.fence.as_deref()
    }

    /// A plain or fenced lock's line of waiters, `[line, alive]` (empty:
    /// none).
    pub(crate) fn line(&self) -> &[String] {
        &self.line
    }

    /// The period mark's key, once per period ([`with_period`](Self::with_period)).
    pub(crate) fn period_key(&self) -> Option<&str> {
        self.period.as_deref()
    }

    /// A semaphore's permit count (0 for other kinds).
    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the keys carry the holder's label.
    pub(crate) fn labeled(&self) -> bool {
        self.labeled
    }

    /// The first lock key (for logs).
    pub(crate) fn first(&self) -> &str {
        &self.lock.as_slice()[0]
    }

    /// The resources, in the order given.
    pub(crate) fn resources(&self) -> impl ExactSizeIterator<Item = &str> {
        let (before, after) = self.around;
        let keys = match self.flavor {
            // Several keys, one resource (named in the first).
            Flavor::Read | Flavor::Write | Flavor::Permit => &self.lock.as_slice()[..1],
            _ => self.lock.as_slice(),
        };
        keys.iter().map(move |k| &k[before..k.len() - after])
    }
}
