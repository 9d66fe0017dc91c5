//! An [`Op`] that owns its strings, to be queued and applied later (by a
//! frozen node, or after a simulated delay).

use crate::node::Op;

/// An [`Op`] with owned strings; [`op`](Self::op) borrows it back.
///
/// ```
/// use redquorum::node::Op;
/// use redquorum::testing::OwnedOp;
///
/// let op = Op::Release { key: "{r}:lock", token: "t" };
/// let queued = OwnedOp::new(op);
/// assert_eq!(queued.op(), op);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedOp {
    kind: Kind,
    /// The op's keys, in order (one for a single-key op).
    keys: Vec<String>,
    /// The op's token, owner or other identifying string.
    token: String,
    /// A reentrant hold's token.
    hold: String,
    /// The TTL in ms, or a fence written back.
    number: u64,
    holder_ttl: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Extend,
    Release,
    AcquireFenced,
    FenceWriteBack,
    AcquireReentrant,
    ExtendReentrant,
    ReleaseReentrant,
    AcquireMany,
    ExtendMany,
    ReleaseMany,
    AcquireRead,
    ExtendRead,
    ReleaseRead,
    AcquireWrite,
    ReleaseWrite,
    Inspect,
}

impl OwnedOp {
    /// A copy of `op`.
    pub fn new(op: Op<'_>) -> Self {
        let one = |key: &str| vec![key.to_owned()];
        let (kind, keys, token, hold, number, holder_ttl) = match op {
            Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl,
            } => (Kind::Acquire, one(key), token, "", ttl_ms, holder_ttl),
            Op::Extend { key, token, ttl_ms } => (Kind::Extend, one(key), token, "", ttl_ms, false),
            Op::Release { key, token } => (Kind::Release, one(key), token, "", 0, false),
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
            } => (
                Kind::AcquireFenced,
                vec![key.to_owned(), fence_key.to_owned()],
                token,
                "",
                ttl_ms,
                false,
            ),
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => (
                Kind::FenceWriteBack,
                vec![key.to_owned(), fence_key.to_owned()],
                token,
                "",
                fence,
                false,
            ),
            Op::AcquireReentrant {
                key,
                owner,
                hold,
                ttl_ms,
            } => (Kind::AcquireReentrant, one(key), owner, hold, ttl_ms, false),
            Op::ExtendReentrant { key, owner, ttl_ms } => {
                (Kind::ExtendReentrant, one(key), owner, "", ttl_ms, false)
            }
            Op::ReleaseReentrant { key, owner, hold } => {
                (Kind::ReleaseReentrant, one(key), owner, hold, 0, false)
            }
            Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            } => (Kind::AcquireMany, keys.to_vec(), token, "", ttl_ms, false),
            Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            } => (Kind::ExtendMany, keys.to_vec(), token, "", ttl_ms, false),
            Op::ReleaseMany { keys, token } => {
                (Kind::ReleaseMany, keys.to_vec(), token, "", 0, false)
            }
            Op::AcquireRead {
                keys,
                token,
                ttl_ms,
            } => (Kind::AcquireRead, keys.to_vec(), token, "", ttl_ms, false),
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } => (Kind::ExtendRead, keys.to_vec(), token, "", ttl_ms, false),
            Op::ReleaseRead { keys, token } => {
                (Kind::ReleaseRead, keys.to_vec(), token, "", 0, false)
            }
            Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            } => (Kind::AcquireWrite, keys.to_vec(), token, "", ttl_ms, false),
            Op::ReleaseWrite { keys, token } => {
                (Kind::ReleaseWrite, keys.to_vec(), token, "", 0, false)
            }
            Op::Inspect { keys } => (Kind::Inspect, keys.to_vec(), "", "", 0, false),
        };
        OwnedOp {
            kind,
            keys,
            token: token.to_owned(),
            hold: hold.to_owned(),
            number,
            holder_ttl,
        }
    }

    /// The operation, borrowed.
    pub fn op(&self) -> Op<'_> {
        let key = self.keys.first().map_or("", String::as_str);
        let second = self.keys.get(1).map_or("", String::as_str);
        let (keys, token, hold, ttl_ms) = (&self.keys[..], &*self.token, &*self.hold, self.number);
        match self.kind {
            Kind::Acquire => Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl: self.holder_ttl,
            },
            Kind::Extend => Op::Extend { key, token, ttl_ms },
            Kind::Release => Op::Release { key, token },
            Kind::AcquireFenced => Op::AcquireFenced {
                key,
                fence_key: second,
                token,
                ttl_ms,
            },
            Kind::FenceWriteBack => Op::FenceWriteBack {
                key,
                fence_key: second,
                token,
                fence: self.number,
            },
            Kind::AcquireReentrant => Op::AcquireReentrant {
                key,
                owner: token,
                hold,
                ttl_ms,
            },
            Kind::ExtendReentrant => Op::ExtendReentrant {
                key,
                owner: token,
                ttl_ms,
            },
            Kind::ReleaseReentrant => Op::ReleaseReentrant {
                key,
                owner: token,
                hold,
            },
            Kind::AcquireMany => Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            },
            Kind::ExtendMany => Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            },
            Kind::ReleaseMany => Op::ReleaseMany { keys, token },
            Kind::AcquireRead => Op::AcquireRead {
                keys,
                token,
                ttl_ms,
            },
            Kind::ExtendRead => Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            },
            Kind::ReleaseRead => Op::ReleaseRead { keys, token },
            Kind::AcquireWrite => Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            },
            Kind::ReleaseWrite => Op::ReleaseWrite { keys, token },
            Kind::Inspect => Op::Inspect { keys },
        }
    }
}
