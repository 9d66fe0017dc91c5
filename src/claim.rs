//! What a lock holds on each node: its keys, and the token (or reentrant
//! owner) that marks them as ours.

use std::collections::HashSet;

use crate::error::ConfigError;
use crate::node::{Op, Waiter};
use crate::proto::keys::KeyLayout;
use crate::proto::round::Step;
use crate::proto::slot::slot;
use crate::token::Token;

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
    /// A semaphore's permit count, for [`Flavor::Permit`].
    permits: u32,
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

/// Refuses an empty resource name.
fn named(resource: &str) -> Result<&str, ConfigError> {
    if resource.is_empty() {
        return Err(ConfigError::EmptyResource);
    }
    Ok(resource)
}

impl Keys {
    /// A plain or fenced lock on one resource.
    pub(crate) fn single(
        layout: &KeyLayout,
        resource: &str,
        fenced: bool,
    ) -> Result<Self, ConfigError> {
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
                permits: 0,
                around: layout.around(false),
            }
        } else {
            Keys {
                flavor: Flavor::Plain,
                lock: LockKeys::One(layout.plain_key(resource)),
                fence: None,
                line,
                permits: 0,
                around: layout.around(true),
            }
        })
    }

    /// Slot `slot` of the semaphore `name` of `permits` permits.
    pub(crate) fn permit(
        layout: &KeyLayout,
        name: &str,
        slot: u32,
        permits: u32,
    ) -> Result<Self, ConfigError> {
        let name = named(name)?;
        Ok(Keys {
            flavor: Flavor::Permit,
            lock: LockKeys::Many(Box::new(layout.permit_keys(name, slot))),
            fence: None,
            line: Box::new([]),
            permits,
            around: (layout.prefix().len() + 1, "}:permit:".len() + digits(slot)),
        })
    }

    /// A reentrant lock on one resource.
    pub(crate) fn reentrant(layout: &KeyLayout, resource: &str) -> Result<Self, ConfigError> {
        Ok(Keys {
            flavor: Flavor::Reentrant,
            lock: LockKeys::One(layout.lock_key(named(resource)?)),
            fence: None,
            line: Box::new([]),
            permits: 0,
            around: layout.around(false),
        })
    }

    /// One lock over several distinct resources.
    pub(crate) fn many(layout: &KeyLayout, resources: &[&str]) -> Result<Self, ConfigError> {
        if resources.is_empty() {
            return Err(ConfigError::NoResources);
        }
        let mut seen = HashSet::with_capacity(resources.len());
        if let Some(dup) = resources.iter().find(|r| !seen.insert(**r)) {
            return Err(ConfigError::DuplicateResource((*dup).to_owned()));
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
            permits: 0,
            around: layout.around(false),
        })
    }

    /// A reader (`write` false) or the writer of a read/write lock on one
    /// resource.
    pub(crate) fn rw(layout: &KeyLayout, resource: &str, write: bool) -> Result<Self, ConfigError> {
        let resource = named(resource)?;
        Ok(Keys {
            flavor: if write { Flavor::Write } else { Flavor::Read },
            lock: LockKeys::Many(Box::new(layout.rw_keys(resource))),
            fence: None,
            line: Box::new([]),
            permits: 0,
            around: (layout.prefix().len() + 1, "}:writer".len()),
        })
    }

    /// Keys to read ([`Step::Inspect`]), in order; the first names the
    /// resource in logs.
    pub(crate) fn inspect(keys: Vec<String>) -> Self {
        Keys {
            flavor: Flavor::Inspect,
            lock: LockKeys::Many(keys.into()),
            fence: None,
            line: Box::new([]),
            permits: 0,
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

/// One holder's claim on some keys: a fresh random token per acquisition
/// round, a reentrant owner's name with a fresh random token for this hold,
/// or an operator's token for another holder's lock.
#[derive(Debug)]
pub(crate) struct Claim {
    keys: Keys,
    mark: Mark,
    /// The wait this claim's acquire is an attempt of, if it waits in line.
    waiter: Option<InLine>,
}

/// A wait's place in line (fair waiting; see [`Waiter`]): drawn once per
/// wait, the same for each of its attempts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InLine {
    id: Token,
    ticket: u64,
    patience_ms: u64,
}

impl InLine {
    /// A wait whose place is `ticket` (at least 1: see [`Waiter::ticket`]),
    /// named by two random draws, whose waiter comes back within
    /// `patience`.
    pub(crate) fn new(ticket: u64, draws: (u64, u64), patience: std::time::Duration) -> Self {
        InLine {
            id: Token::from_draws(draws.0, draws.1),
            ticket: ticket.max(1),
            patience_ms: u64::try_from(patience.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        }
    }

    fn waiter(&self) -> Waiter<'_> {
        Waiter {
            id: self.id.as_str(),
            ticket: self.ticket,
            patience_ms: self.patience_ms,
        }
    }
}

/// What the keys hold for a claim.
#[derive(Debug)]
enum Mark {
    /// Drawn here, inline (no allocation).
    Random(Token),
    /// A reentrant owner, and this hold's own token: the owner name is
    /// shared by every hold, the hold token makes each hold's acquire and
    /// release happen at most once per node.
    Owner { owner: Box<str>, hold: Token },
    /// Given by the caller.
    Given(Box<str>),
}

impl Claim {
    /// A claim with a fresh random token.
    pub(crate) fn new(keys: Keys) -> Self {
        Claim {
            keys,
            mark: Mark::Random(Token::random()),
            waiter: None,
        }
    }

    /// The same claim, its acquire an attempt of `wait` in line (where its
    /// lock has a line).
    pub(crate) fn in_line(mut self, wait: Option<InLine>) -> Self {
        self.waiter = wait;
        self
    }

    /// A reentrant claim: the owner name is the token, and each claim is a
    /// hold of its own.
    pub(crate) fn owned(keys: Keys, owner: &str) -> Result<Self, ConfigError> {
        if owner.is_empty() {
            return Err(ConfigError::EmptyOwner);
        }
        Ok(Claim {
            keys,
            mark: Mark::Owner {
                owner: owner.into(),
                hold: Token::random(),
            },
            waiter: None,
        })
    }

    /// A claim on a plain or fenced lock by a token the caller already knows
    /// (an operator releasing another process's lock): stored as given, not
    /// checked against the random-token format.
    pub(crate) fn with_token(keys: Keys, token: &str) -> Result<Self, ConfigError> {
        Self::given(keys, token, ConfigError::EmptyToken)
    }

    fn given(keys: Keys, mark: &str, empty: ConfigError) -> Result<Self, ConfigError> {
        if mark.is_empty() {
            return Err(empty);
        }
        Ok(Claim {
            keys,
            mark: Mark::Given(mark.into()),
            waiter: None,
        })
    }

    /// The token of this hold (a reentrant claim's own; otherwise the token).
    fn hold(&self) -> &str {
        match &self.mark {
            Mark::Owner { hold, .. } => hold.as_str(),
            _ => self.token(),
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Whether its acquire is an attempt of a wait in its lock's line.
    pub(crate) fn waits_in_line(&self) -> bool {
        self.waiter.is_some()
            && match self.keys.flavor {
                Flavor::Plain | Flavor::Fenced => !self.keys.line.is_empty(),
                Flavor::Read | Flavor::Write | Flavor::Permit => true,
                Flavor::Reentrant | Flavor::Many | Flavor::Inspect => false,
            }
    }

    /// What the keys hold: the given string, else the random token.
    pub(crate) fn token(&self) -> &str {
        match &self.mark {
            Mark::Random(token) => token.as_str(),
            Mark::Owner { owner, .. } => owner,
            Mark::Given(given) => given,
        }
    }

    /// The node operation for `step` on this claim.
    pub(crate) fn op(&self, step: Step, ttl_ms: u64) -> Op<'_> {
        let keys = self.keys.lock.as_slice();
        let key = keys[0].as_str();
        let token = self.token();
        let hold = self.hold();
        let fence_key = self.keys.fence.as_deref().unwrap_or_default();
        let line = &self.keys.line[..];
        // A lock with no line waits without one.
        let waiter = self.waiter.as_ref().map(InLine::waiter);
        let in_line = if line.is_empty() { None } else { waiter };
        match (self.keys.flavor, step) {
            (Flavor::Inspect, _) | (_, Step::Inspect) => Op::Inspect { keys },
            (Flavor::Plain, Step::Acquire { holder_ttl }) => Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl: holder_ttl || in_line.is_some(),
                line,
                waiter: in_line,
            },
            (Flavor::Fenced, Step::Acquire { .. }) => Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
                line,
                waiter: in_line,
            },
            (Flavor::Plain | Flavor::Fenced, Step::Extend) => Op::Extend { key, token, ttl_ms },
            // A holder that waited leaves the line where it still stands;
            // a refused round's undo keeps its place for the retries.
            (Flavor::Plain | Flavor::Fenced, Step::Release) => Op::Release {
                key,
                token,
                line,
                waiter: in_line,
            },
            (Flavor::Plain | Flavor::Fenced, Step::Undo) => Op::Release {
                key,
                token,
                line,
                waiter: None,
            },
            (_, Step::WriteBack(fence)) => Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            },
            (Flavor::Reentrant, Step::Acquire { .. }) => Op::AcquireReentrant {
                key,
                owner: token,
                hold,
                ttl_ms,
            },
            (Flavor::Reentrant, Step::Extend) => Op::ExtendReentrant {
                key,
                owner: token,
                ttl_ms,
            },
            (Flavor::Reentrant, Step::Release | Step::Undo) => Op::ReleaseReentrant {
                key,
                owner: token,
                hold,
            },
            (Flavor::Many, Step::Acquire { .. }) => Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Many, Step::Extend) => Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Many, Step::Release | Step::Undo) => Op::ReleaseMany { keys, token },
            (Flavor::Read, Step::Acquire { .. }) => Op::AcquireRead {
                keys,
                token,
                ttl_ms,
                waiter,
            },
            (Flavor::Read, Step::Extend) => Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Read, Step::Release) => Op::ReleaseRead {
                keys,
                token,
                waiter,
            },
            (Flavor::Read, Step::Undo) => Op::ReleaseRead {
                keys,
                token,
                waiter: None,
            },
            (Flavor::Write, Step::Acquire { .. }) => Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
                waiter,
            },
            // The writer key is a plain lock's.
            (Flavor::Write, Step::Extend) => Op::Extend { key, token, ttl_ms },
            (Flavor::Write, Step::Release) => Op::ReleaseWrite {
                keys,
                token,
                waiter,
            },
            // A refused round keeps the intent it marked, for its retries;
            // what it won goes to the first in line.
            (Flavor::Write, Step::Undo) => Op::Release {
                key,
                token,
                line: &keys[3..],
                waiter: None,
            },
            (Flavor::Permit, Step::Acquire { .. }) => Op::AcquirePermit {
                keys,
                token,
                ttl_ms,
                permits: self.keys.permits,
                waiter,
            },
            (Flavor::Permit, Step::Extend) => Op::ExtendPermit {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Permit, Step::Release) => Op::ReleasePermit {
                keys,
                token,
                waiter,
            },
            (Flavor::Permit, Step::Undo) => Op::ReleasePermit {
                keys,
                token,
                waiter: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_come_back_in_every_layout() {
        for layout in [
            KeyLayout::new("app:", false).unwrap(),
            KeyLayout::new("app:", true).unwrap(),
        ] {
            let plain = Keys::single(&layout, "orders:42", false).unwrap();
            assert_eq!(plain.resources().collect::<Vec<_>>(), ["orders:42"]);
            assert_eq!(plain.first(), layout.plain_key("orders:42"));
            let fenced = Keys::single(&layout, "orders:42", true).unwrap();
            assert_eq!(fenced.resources().collect::<Vec<_>>(), ["orders:42"]);
            assert_eq!(fenced.first(), "app:{orders:42}:lock");
            let many = Keys::many(&layout, &["a", "b"]).unwrap();
            assert_eq!(many.resources().collect::<Vec<_>>(), ["a", "b"]);
            for write in [false, true] {
                let rw = Keys::rw(&layout, "doc:7", write).unwrap();
                assert_eq!(rw.resources().collect::<Vec<_>>(), ["doc:7"]);
                assert!(rw.one_slot());
            }
        }
    }

    #[test]
    fn multi_resource_keys_never_collide() {
        let a = Keys::many(&KeyLayout::default(), &["ab", "c"]).unwrap();
        let b = Keys::many(&KeyLayout::default(), &["a", "bc"]).unwrap();
        assert_ne!(a.lock, b.lock);
        assert_eq!(a.resources().collect::<Vec<_>>(), ["ab", "c"]);
    }

    #[test]
    fn which_locks_fit_in_one_cluster_slot() {
        assert!(
            Keys::single(&KeyLayout::default(), "orders", true)
                .unwrap()
                .one_slot()
        );
        assert!(
            Keys::reentrant(&KeyLayout::default(), "orders")
                .unwrap()
                .one_slot()
        );
        assert!(
            Keys::many(&KeyLayout::default(), &["{acct}:1", "{acct}:2"])
                .unwrap()
                .one_slot()
        );
        assert!(
            !Keys::many(&KeyLayout::default(), &["account:1", "account:2"])
                .unwrap()
                .one_slot()
        );
        // `{}x}:lock` has an empty hash tag: the whole key is hashed, and the
        // fence counter lands elsewhere.
        assert!(
            !Keys::single(&KeyLayout::default(), "}x", true)
                .unwrap()
                .one_slot()
        );
        assert!(
            Keys::single(&KeyLayout::default(), "}x", false)
                .unwrap()
                .one_slot()
        );
    }

    #[test]
    fn bad_resource_lists_are_typed_errors() {
        assert_eq!(
            Keys::many(&KeyLayout::default(), &[]).unwrap_err(),
            ConfigError::NoResources
        );
        assert_eq!(
            Keys::many(&KeyLayout::default(), &["a", "b", "a"]).unwrap_err(),
            ConfigError::DuplicateResource("a".into())
        );
        assert_eq!(
            Keys::many(&KeyLayout::default(), &["a", ""]).unwrap_err(),
            ConfigError::EmptyResource
        );
        assert_eq!(
            Keys::single(&KeyLayout::default(), "", false).unwrap_err(),
            ConfigError::EmptyResource
        );
    }

    #[test]
    fn an_explicit_token_is_released_as_given() {
        let keys = Keys::single(&KeyLayout::default(), "r", false).unwrap();
        let claim = Claim::with_token(keys.clone(), "owner-7").unwrap();
        let line = ["{r}:lock:line", "{r}:lock:alive"].map(String::from);
        assert_eq!(
            claim.op(Step::Release, 0),
            Op::Release {
                key: "{r}:lock",
                token: "owner-7",
                line: &line,
                waiter: None,
            }
        );
        assert_eq!(
            Claim::with_token(keys, "").unwrap_err(),
            ConfigError::EmptyToken
        );
    }

    /// A writer's release takes its intent with it; undoing a refused round
    /// keeps the intent for the retries (only the writer key goes).
    #[test]
    fn a_writer_undoes_a_round_without_its_intent_and_releases_with_it() {
        let keys = Keys::rw(&KeyLayout::default(), "r", true).unwrap();
        let claim = Claim::with_token(keys, "w").unwrap();
        let rw = [
            "{r}:writer",
            "{r}:readers",
            "{r}:intent",
            "{r}:rw:line",
            "{r}:rw:alive",
        ]
        .map(String::from);
        assert_eq!(
            claim.op(Step::Release, 0),
            Op::ReleaseWrite {
                keys: &rw,
                token: "w",
                waiter: None,
            }
        );
        assert_eq!(
            claim.op(Step::Undo, 0),
            Op::Release {
                key: "{r}:writer",
                token: "w",
                line: &rw[3..],
                waiter: None,
            }
        );
        assert!(claim.keys().marks_refusals());
        let reader = Keys::rw(&KeyLayout::default(), "r", false).unwrap();
        assert!(!reader.marks_refusals());
    }

    /// A wait's attempts carry its place in line where the lock has a line;
    /// a permit's its semaphore's count.
    #[test]
    fn a_waiters_attempts_carry_its_place_in_line() {
        let wait = InLine::new(
            1_700_000_000_000,
            (1, 2),
            std::time::Duration::from_millis(300),
        );
        let plain = Keys::single(&KeyLayout::default(), "r", false).unwrap();
        let claim = Claim::new(plain).in_line(Some(wait));
        let Op::Acquire {
            waiter: Some(waiter),
            holder_ttl: true,
            line,
            ..
        } = claim.op(Step::Acquire { holder_ttl: false }, 1000)
        else {
            panic!("a waiter's acquire")
        };
        assert_eq!((waiter.patience_ms, line.len()), (300, 2));
        assert!(waiter.ticket > 1_600_000_000_000, "ms since the epoch");
        // Interop keys with braces have no line: such a lock waits without.
        let layout = KeyLayout::new("", true).unwrap();
        let odd = Keys::single(&layout, "a{b}", false).unwrap();
        let claim = Claim::new(odd).in_line(Some(wait));
        assert!(matches!(
            claim.op(Step::Acquire { holder_ttl: true }, 1000),
            Op::Acquire {
                waiter: None,
                line: [],
                ..
            }
        ));
        let permit = Keys::permit(&KeyLayout::default(), "api", 3, 4).unwrap();
        assert_eq!(permit.resources().collect::<Vec<_>>(), ["api"]);
        assert!(permit.one_slot());
        let claim = Claim::new(permit);
        assert!(matches!(
            claim.op(Step::Acquire { holder_ttl: false }, 1000),
            Op::AcquirePermit {
                permits: 4,
                waiter: None,
                ..
            }
        ));
    }

    #[test]
    fn resources_round_trip_through_keys() {
        for r in ["x", "}", "{", "a}:lock{b", "ключ"] {
            let keys = Keys::single(&KeyLayout::default(), r, true).unwrap();
            assert_eq!(keys.resources().next(), Some(r));
        }
    }
}
