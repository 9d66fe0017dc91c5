//! What a node's snapshot says of a lock's keys: a holding, the live
//! readers.

use std::time::Duration;

use super::{Holder, Holding, TimeLeft};
use crate::proto::error::NodeError;
use crate::proto::op::{KEPT, READERS_TURN, Snapshot, Stored};

/// A lock key as a holding (its fence unknown yet); `whole`: its value is
/// the token alone, NUL bytes and all (interop keys).
pub(super) fn holding(key: Option<&Stored>, whole: bool) -> Result<Holding, NodeError> {
    let text = |value: &[u8]| String::from_utf8_lossy(value).into_owned();
    let (holder, pttl_ms, holds, label) = match key {
        None => return Err(NodeError::Protocol("a key missing in a snapshot".into())),
        Some(Stored::Absent) => {
            return Ok(Holding {
                holder: None,
                time_left: None,
                holds: None,
                fence: None,
                granted_fence: None,
                label: None,
            });
        }
        Some(Stored::Text { value, pttl_ms }) => {
            let value = text(value);
            if value == READERS_TURN {
                (Holder::Kept("readers".into()), *pttl_ms, None, None)
            } else if let Some(waiter) = value.strip_prefix(KEPT) {
                (Holder::Kept(waiter.to_owned()), *pttl_ms, None, None)
            } else if whole {
                (Holder::Token(value), *pttl_ms, None, None)
            } else {
                // The token, and after a NUL byte the holder's label (and,
                // for a fenced lock, after another its fence: read by
                // `stored_fence`).
                let mut parts = value.splitn(3, '\0');
                let token = parts.next().unwrap_or_default().to_owned();
                let label = parts.next().map(str::to_owned);
                let label = label.filter(|l| !l.is_empty() || parts.next().is_none());
                (Holder::Token(token), *pttl_ms, None, label)
            }
        }
        // A reentrant lock: its owner's count, beside one field per hold
        // (named byte 255 and the hold's token) and its label (byte 254).
        Some(Stored::Hash { fields, pttl_ms }) => {
            let label = fields
                .iter()
                .find(|(name, _)| name.as_slice() == [0xfe])
                .map(|(_, label)| text(label));
            match fields
                .iter()
                .find(|(name, _)| !matches!(name.first(), Some(0xfe | 0xff)))
            {
                Some((owner, count)) => (
                    Holder::Owner(text(owner)),
                    *pttl_ms,
                    text(count).parse().ok(),
                    label,
                ),
                None => (Holder::Foreign("hash".into()), *pttl_ms, None, None),
            }
        }
        Some(Stored::Scored { pttl_ms, .. }) => {
            (Holder::Foreign("zset".into()), *pttl_ms, None, None)
        }
        Some(Stored::Other { kind }) => (Holder::Foreign(kind.clone()), None, None, None),
    };
    Ok(Holding {
        holder: Some(holder),
        time_left: Some(TimeLeft::of(pttl_ms)),
        holds,
        fence: None,
        granted_fence: None,
        label,
    })
}

/// The fence a fenced lock's key stores with its token and label (`token
/// \0 label \0 fence`, written by the grant's write-back and by restores):
/// the holder's own, whatever the node's counter says since.
pub(super) fn stored_fence(key: Option<&Stored>) -> Option<u64> {
    let Some(Stored::Text { value, .. }) = key else {
        return None;
    };
    let mut parts = value.splitn(3, |b| *b == 0);
    let (_, _, fence) = (parts.next()?, parts.next()?, parts.next()?);
    std::str::from_utf8(fence).ok()?.parse().ok()
}

/// The live readers in a read/write lock's snapshot (`[writer, readers,
/// intent]`): a reader lives while its score is at least the node's time,
/// as `acquire_read.lua` counts them.
pub(super) fn readers(snapshot: &Snapshot) -> Result<Vec<(String, Duration)>, NodeError> {
    match snapshot.keys.get(1) {
        Some(Stored::Scored { members, .. }) => Ok(members
            .iter()
            .filter(|(_, expiry)| *expiry >= snapshot.now_ms)
            .map(|(token, expiry)| {
                (
                    String::from_utf8_lossy(token).into_owned(),
                    Duration::from_millis(expiry - snapshot.now_ms),
                )
            })
            .collect()),
        Some(Stored::Absent) => Ok(Vec::new()),
        Some(other) => Err(NodeError::Server(
            format!("the readers key is not a sorted set: {other:?}").into(),
        )),
        None => Err(NodeError::Protocol("a key missing in a snapshot".into())),
    }
}
