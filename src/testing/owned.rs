//! An [`Op`] that owns its strings, to be queued and applied later (by a
//! frozen node, or after a simulated delay).

use crate::proto::op::{Op, Period, Waiter};

/// An [`Op`] with owned strings; [`op`](Self::op) borrows it back.
///
/// ```
/// use redquorum::node::Op;
/// use redquorum::internals::OwnedOp;
///
/// let op = Op::Release { key: "{r}:lock", token: "t", line: &[], waiter: None, period: None };
/// let queued = OwnedOp::new(op);
/// assert_eq!(queued.op(), op);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedOp {
    kind: Kind,
    /// The op's keys, in order (one for a single-key op; a fenced op's
    /// lock and counter).
    keys: Vec<String>,
    /// A plain or fenced lock's line.
    line: Vec<String>,
    /// The op's token, owner or other identifying string.
    token: String,
    /// A reentrant hold's token, or a writer's intent mark.
    hold: String,
    /// An acquire's label.
    label: String,
    /// The TTL in ms, or a fence written back.
    number: u64,
    holder_ttl: bool,
    /// An extend's `restore`.
    restore: bool,
    permits: u32,
    /// A waiter's id, ticket and patience.
    waiter: Option<(String, u64, u64)>,
    /// A period's mark key, and its length in ms (0 for an undo's).
    period: Option<(String, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Extend,
    Release,
    ReleaseAfter,
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
    AcquirePermit,
    ExtendPermit,
    ReleasePermit,
    Inspect,
}

impl OwnedOp {
    /// A copy of `op`.
    pub fn new(op: Op<'_>) -> Self {
        let mut owned = OwnedOp {
            kind: Kind::Inspect,
            keys: Vec::new(),
            line: Vec::new(),
            token: String::new(),
            hold: String::new(),
            label: String::new(),
            number: 0,
            holder_ttl: false,
            restore: false,
            permits: 0,
            waiter: None,
            period: None,
        };
        let mut one = |kind, key: &str, token: &str, number| {
            owned.kind = kind;
            owned.keys = vec![key.to_owned()];
            owned.token = token.to_owned();
            owned.number = number;
        };
        match op {
            Op::Acquire {
                key,
                token,
                label,
                ttl_ms,
                holder_ttl,
                line,
                waiter,
                period,
            } => {
                one(Kind::Acquire, key, token, ttl_ms);
                owned.label = label.to_owned();
                owned.holder_ttl = holder_ttl;
                owned.line = line.to_vec();
                owned.waiter = own(waiter);
                owned.period = period.map(|p| (p.key.to_owned(), p.ms));
            }
            Op::Extend {
                key,
                token,
                label,
                ttl_ms,
                restore,
            } => {
                one(Kind::Extend, key, token, ttl_ms);
                owned.label = label.to_owned();
                owned.restore = restore;
            }
            Op::ReleaseAfter {
                key,
                token,
                after_ms,
            } => one(Kind::ReleaseAfter, key, token, after_ms),
            Op::Release {
                key,
                token,
                line,
                waiter,
                period,
            } => {
                one(Kind::Release, key, token, 0);
                owned.line = line.to_vec();
                owned.waiter = own(waiter);
                owned.period = period.map(|key| (key.to_owned(), 0));
            }
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                label,
                ttl_ms,
                line,
                waiter,
                period,
            } => {
                one(Kind::AcquireFenced, key, token, ttl_ms);
                owned.label = label.to_owned();
                owned.keys.push(fence_key.to_owned());
                owned.line = line.to_vec();
                owned.waiter = own(waiter);
                owned.period = period.map(|p| (p.key.to_owned(), p.ms));
            }
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => {
                one(Kind::FenceWriteBack, key, token, fence);
                owned.keys.push(fence_key.to_owned());
            }
            Op::AcquireReentrant {
                key,
                owner,
                label,
                hold,
                ttl_ms,
            } => {
                one(Kind::AcquireReentrant, key, owner, ttl_ms);
                owned.label = label.to_owned();
                owned.hold = hold.to_owned();
            }
            Op::ExtendReentrant { key, owner, ttl_ms } => {
                one(Kind::ExtendReentrant, key, owner, ttl_ms)
            }
            Op::ReleaseReentrant { key, owner, hold } => {
                one(Kind::ReleaseReentrant, key, owner, 0);
                owned.hold = hold.to_owned();
            }
            Op::AcquireMany {
                keys,
                token,
                label,
                ttl_ms,
            } => {
                owned.many(Kind::AcquireMany, keys, token, ttl_ms);
                owned.label = label.to_owned();
            }
            Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            } => owned.many(Kind::ExtendMany, keys, token, ttl_ms),
            Op::ReleaseMany { keys, token } => owned.many(Kind::ReleaseMany, keys, token, 0),
            Op::AcquireRead {
                keys,
                token,
                ttl_ms,
                waiter,
            } => {
                owned.many(Kind::AcquireRead, keys, token, ttl_ms);
                owned.waiter = own(waiter);
            }
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } => owned.many(Kind::ExtendRead, keys, token, ttl_ms),
            Op::ReleaseRead {
                keys,
                token,
                waiter,
            } => {
                owned.many(Kind::ReleaseRead, keys, token, 0);
                owned.waiter = own(waiter);
            }
            Op::AcquireWrite {
                keys,
                token,
                label,
                intent,
                ttl_ms,
                waiter,
            } => {
                owned.many(Kind::AcquireWrite, keys, token, ttl_ms);
                owned.label = label.to_owned();
                owned.hold = intent.to_owned();
                owned.waiter = own(waiter);
            }
            Op::ReleaseWrite {
                keys,
                token,
                intent,
                waiter,
            } => {
                owned.many(Kind::ReleaseWrite, keys, token, 0);
                owned.hold = intent.to_owned();
                owned.waiter = own(waiter);
            }
            Op::AcquirePermit {
                keys,
                token,
                label,
                ttl_ms,
                permits,
                waiter,
            } => {
                owned.many(Kind::AcquirePermit, keys, token, ttl_ms);
                owned.label = label.to_owned();
                owned.permits = permits;
                owned.waiter = own(waiter);
            }
            Op::ExtendPermit {
                keys,
                token,
                ttl_ms,
            } => owned.many(Kind::ExtendPermit, keys, token, ttl_ms),
            Op::ReleasePermit {
                keys,
                token,
                waiter,
            } => {
                owned.many(Kind::ReleasePermit, keys, token, 0);
                owned.waiter = own(waiter);
            }
            Op::Inspect { keys } => owned.many(Kind::Inspect, keys, "", 0),
        }
        owned
    }

    fn many(&mut self, kind: Kind, keys: &[String], token: &str, number: u64) {
        self.kind = kind;
        self.keys = keys.to_vec();
        self.token = token.to_owned();
        self.number = number;
    }

    /// The operation, borrowed.
    pub fn op(&self) -> Op<'_> {
        let key = self.keys.first().map_or("", String::as_str);
        let second = self.keys.get(1).map_or("", String::as_str);
        let (keys, token, hold, ttl_ms) = (&self.keys[..], &*self.token, &*self.hold, self.number);
        let line = &self.line[..];
        let label = &*self.label;
        let waiter = self
            .waiter
            .as_ref()
            .map(|(id, ticket, patience_ms)| Waiter {
                id,
                ticket: *ticket,
                patience_ms: *patience_ms,
            });
        let period = self
            .period
            .as_ref()
            .map(|(key, ms)| Period { key, ms: *ms });
        match self.kind {
            Kind::Acquire => Op::Acquire {
                key,
                token,
                label,
                ttl_ms,
                holder_ttl: self.holder_ttl,
                line,
                waiter,
                period,
            },
            Kind::Extend => Op::Extend {
                key,
                token,
                label,
                ttl_ms,
                restore: self.restore,
            },
            Kind::Release => Op::Release {
                key,
                token,
                line,
                waiter,
                period: period.map(|p| p.key),
            },
            Kind::ReleaseAfter => Op::ReleaseAfter {
                key,
                token,
                after_ms: ttl_ms,
            },
            Kind::AcquireFenced => Op::AcquireFenced {
                key,
                fence_key: second,
                token,
                label,
                ttl_ms,
                line,
                waiter,
                period,
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
                label,
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
                label,
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
                waiter,
            },
            Kind::ExtendRead => Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            },
            Kind::ReleaseRead => Op::ReleaseRead {
                keys,
                token,
                waiter,
            },
            Kind::AcquireWrite => Op::AcquireWrite {
                keys,
                token,
                label,
                intent: hold,
                ttl_ms,
                waiter,
            },
            Kind::ReleaseWrite => Op::ReleaseWrite {
                keys,
                token,
                intent: hold,
                waiter,
            },
            Kind::AcquirePermit => Op::AcquirePermit {
                keys,
                token,
                label,
                ttl_ms,
                permits: self.permits,
                waiter,
            },
            Kind::ExtendPermit => Op::ExtendPermit {
                keys,
                token,
                ttl_ms,
            },
            Kind::ReleasePermit => Op::ReleasePermit {
                keys,
                token,
                waiter,
            },
            Kind::Inspect => Op::Inspect { keys },
        }
    }
}

fn own(waiter: Option<Waiter<'_>>) -> Option<(String, u64, u64)> {
    waiter.map(|w| (w.id.to_owned(), w.ticket, w.patience_ms))
}
