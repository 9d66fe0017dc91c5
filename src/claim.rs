//! What a lock holds on each node: its keys, and the token (or reentrant
//! owner) that marks them as ours.

use std::collections::HashSet;

use crate::error::ConfigError;
use crate::node::Op;
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
    /// A reader of a read/write lock: keys `[writer, readers, intent]`.
    Read,
    /// The writer of a read/write lock: keys `[writer, readers, intent]`.
    Write,
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
        Ok(if fenced {
            Keys {
                flavor: Flavor::Fenced,
                lock: LockKeys::One(layout.lock_key(resource)),
                fence: Some(layout.fence_key(resource)),
                around: layout.around(false),
            }
        } else {
            Keys {
                flavor: Flavor::Plain,
                lock: LockKeys::One(layout.plain_key(resource)),
                fence: None,
                around: layout.around(true),
            }
        })
    }

    /// A reentrant lock on one resource.
    pub(crate) fn reentrant(layout: &KeyLayout, resource: &str) -> Result<Self, ConfigError> {
        Ok(Keys {
            flavor: Flavor::Reentrant,
            lock: LockKeys::One(layout.lock_key(named(resource)?)),
            fence: None,
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
            // Three keys, one resource (named in the first).
            Flavor::Read | Flavor::Write => &self.lock.as_slice()[..1],
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
        }
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
        match (self.keys.flavor, step) {
            (Flavor::Inspect, _) | (_, Step::Inspect) => Op::Inspect { keys },
            (Flavor::Plain, Step::Acquire { holder_ttl }) => Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl,
            },
            (Flavor::Fenced, Step::Acquire { .. }) => Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
            },
            (Flavor::Plain | Flavor::Fenced, Step::Extend) => Op::Extend { key, token, ttl_ms },
            (Flavor::Plain | Flavor::Fenced, Step::Release | Step::Undo) => {
                Op::Release { key, token }
            }
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
            },
            (Flavor::Read, Step::Extend) => Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Read, Step::Release | Step::Undo) => Op::ReleaseRead { keys, token },
            (Flavor::Write, Step::Acquire { .. }) => Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            },
            // The writer key is a plain lock's.
            (Flavor::Write, Step::Extend) => Op::Extend { key, token, ttl_ms },
            (Flavor::Write, Step::Release) => Op::ReleaseWrite { keys, token },
            // A refused round keeps the intent it marked, for its retries.
            (Flavor::Write, Step::Undo) => Op::Release { key, token },
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
        assert_eq!(
            claim.op(Step::Release, 0),
            Op::Release {
                key: "{r}:lock",
                token: "owner-7"
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
        let rw = ["{r}:writer", "{r}:readers", "{r}:intent"].map(String::from);
        assert_eq!(
            claim.op(Step::Release, 0),
            Op::ReleaseWrite {
                keys: &rw,
                token: "w"
            }
        );
        assert_eq!(
            claim.op(Step::Undo, 0),
            Op::Release {
                key: "{r}:writer",
                token: "w"
            }
        );
        assert!(claim.keys().marks_refusals());
        let reader = Keys::rw(&KeyLayout::default(), "r", false).unwrap();
        assert!(!reader.marks_refusals());
    }

    #[test]
    fn resources_round_trip_through_keys() {
        for r in ["x", "}", "{", "a}:lock{b", "ключ"] {
            let keys = Keys::single(&KeyLayout::default(), r, true).unwrap();
            assert_eq!(keys.resources().next(), Some(r));
        }
    }
}
