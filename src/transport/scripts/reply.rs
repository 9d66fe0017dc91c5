//! A node's reply to each operation, read as its [`Reply`].

use crate::proto::error::NodeError;
use crate::proto::op::{Op, Reply, Snapshot, Stored};
use crate::transport::resp::Frame;

/// How a reply to an operation reads: all [`parse_reply`] needs of it,
/// taken as its command is written ([`encode`](super::encode)), so that an
/// operation is built once per call, not again for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An inspection of this many keys: a [`Snapshot`].
    Snapshot(usize),
    /// A plain acquire: `+OK`, a script's PTTL or a waiter's refusal, or
    /// nil from a native `SET NX` refused.
    Acquire,
    /// A fenced acquire: `{1, fence}` or `{0, PTTL[, ahead]}`.
    AcquireFenced,
    /// A permit's acquire: an acquire's, or `{"permits", n}`.
    AcquirePermit,
    /// Any other acquire: `+OK`, a PTTL, or a waiter's refusal.
    AcquireOther,
    /// An extension that may restore its key: `2` is [`Reply::Restored`].
    Restore,
    /// Everything else: `1` done, `0` not held.
    Done,
}

impl Shape {
    /// The shape of `op`'s reply.
    pub(crate) fn of(op: &Op<'_>) -> Shape {
        match op {
            Op::Inspect { keys } => Shape::Snapshot(keys.len()),
            Op::Acquire { .. } => Shape::Acquire,
            Op::AcquireFenced { .. } => Shape::AcquireFenced,
            Op::AcquirePermit { .. } => Shape::AcquirePermit,
            Op::AcquireReentrant { .. }
            | Op::AcquireMany { .. }
            | Op::AcquireRead { .. }
            | Op::AcquireWrite { .. } => Shape::AcquireOther,
            Op::Extend { restore: true, .. } => Shape::Restore,
            _ => Shape::Done,
        }
    }
}

/// The reply of an operation of `shape`, from the node's reply `frame`
/// (never an error reply: those are the connection's to classify).
pub(crate) fn parse_reply(shape: Shape, frame: Frame) -> Result<Reply, NodeError> {
    if let Shape::Snapshot(keys) = shape {
        return parse_snapshot(&frame, keys)
            .map(Reply::Snapshot)
            .ok_or_else(|| NodeError::Protocol(format!("{frame:?}").into()));
    }
    let acquire = matches!(
        shape,
        Shape::Acquire | Shape::AcquirePermit | Shape::AcquireOther
    );
    let reply = match (&frame, shape) {
        (Frame::Array(pair), Shape::AcquirePermit)
            if pair.first().and_then(Frame::bytes) == Some(b"permits") =>
        {
            pair.get(1)
                .and_then(Frame::number)
                .map(|permits| Reply::PermitsDiffer { permits })
        }
        (Frame::Ok, _) if acquire => Some(Reply::Done),
        // A script's PTTL (-1: no expiry), or a native `SET NX` refused.
        (Frame::Int(pttl_ms), _) if acquire => Some(held(*pttl_ms, None)),
        // A waiter's refusal: the PTTL and the waiters ahead of it.
        (Frame::Array(pair), _) if acquire => match pair.as_slice() {
            [Frame::Int(pttl_ms), Frame::Int(ahead)] => Some(held(*pttl_ms, Some(*ahead))),
            _ => None,
        },
        (Frame::Nil, Shape::Acquire) => Some(Reply::Held {
            pttl_ms: None,
            ahead: None,
        }),
        (Frame::Array(pair), Shape::AcquireFenced) => match pair.as_slice() {
            [Frame::Int(1), Frame::Int(fence)] => u64::try_from(*fence).ok().map(Reply::Fence),
            [Frame::Int(0), Frame::Int(pttl_ms)] => Some(held(*pttl_ms, None)),
            [Frame::Int(0), Frame::Int(pttl_ms), Frame::Int(ahead)] => {
                Some(held(*pttl_ms, Some(*ahead)))
            }
            _ => None,
        },
        (Frame::Int(1), _) if !acquire => Some(Reply::Done),
        (Frame::Int(2), Shape::Restore) => Some(Reply::Restored),
        (Frame::Int(0), _) if !acquire => Some(Reply::NotHeld),
        _ => None,
    };
    reply.ok_or_else(|| NodeError::Protocol(format!("{frame:?}").into()))
}

/// A refusal with the holder's PTTL as Redis reports it (negative: no
/// expiry), and for a waiter in line the waiters ahead of it.
fn held(pttl_ms: i64, ahead: Option<i64>) -> Reply {
    Reply::Held {
        pttl_ms: u64::try_from(pttl_ms).ok(),
        ahead: ahead.and_then(|a| u32::try_from(a).ok()),
    }
}

/// What `inspect.lua` returns for `keys` keys: the node's `TIME`, then one
/// entry per key.
fn parse_snapshot(frame: &Frame, keys: usize) -> Option<Snapshot> {
    let Frame::Array(items) = frame else {
        return None;
    };
    if items.len() != keys + 2 {
        return None;
    }
    let secs: u64 = items[0].number()?;
    let micros: u64 = items[1].number()?;
    let stored = items[2..]
        .iter()
        .map(|entry| {
            let Frame::Array(entry) = entry else {
                return None;
            };
            let kind = String::from_utf8_lossy(entry.first()?.bytes()?).into_owned();
            let pttl: i64 = entry.get(1)?.number()?;
            let pttl_ms = u64::try_from(pttl).ok();
            let rest = &entry[2..];
            let bytes = |f: &Frame| f.bytes().map(<[u8]>::to_vec);
            Some(match kind.as_str() {
                "none" => Stored::Absent,
                "string" => Stored::Text {
                    value: bytes(rest.first()?)?,
                    pttl_ms,
                },
                "hash" => Stored::Hash {
                    fields: rest
                        .chunks(2)
                        .map(|pair| Some((bytes(pair.first()?)?, bytes(pair.get(1)?)?)))
                        .collect::<Option<_>>()?,
                    pttl_ms,
                },
                "zset" => Stored::Scored {
                    members: rest
                        .chunks(2)
                        .map(|pair| Some((bytes(pair.first()?)?, pair.get(1)?.number()?)))
                        .collect::<Option<_>>()?,
                    pttl_ms,
                },
                _ => Stored::Other { kind },
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Snapshot::new(secs * 1000 + micros / 1000, stored))
}
