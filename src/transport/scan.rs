//! Finding keys on a node by pattern (`SCAN`), for the listing of what is
//! held (`Redlock::list`): outside every round, read only, bounded.
//!
//! Bounds: at most `limit` keys kept, at most [`MAX_SCAN_CALLS`] `SCAN`
//! calls of [`SCAN_COUNT`] each per node, each answered within the time
//! given or the scan ends with the node's error.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::error::NodeError;
use crate::transport::link::Link;
use crate::transport::resp::{self, Frame};

/// How many keys one `SCAN` call looks at (its `COUNT` hint).
pub(crate) const SCAN_COUNT: u64 = 1000;

/// The most `SCAN` calls of one scan of one node (a million keys looked at
/// with [`SCAN_COUNT`]): past it the scan stops, its list partial.
pub(crate) const MAX_SCAN_CALLS: usize = 1000;

/// The keys matching `pattern` on `link`'s node (a glob, as `SCAN MATCH`
/// reads it), at most `limit`; whether the scan was cut short (the limit,
/// or [`MAX_SCAN_CALLS`]). Each call answered within `within`.
pub(crate) async fn scan(
    link: &Arc<Link>,
    pattern: &str,
    limit: usize,
    within: Duration,
) -> Result<(Vec<String>, bool), NodeError> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..MAX_SCAN_CALLS {
        let mut command = Vec::new();
        resp::command(&mut command, 6);
        resp::arg(&mut command, b"SCAN");
        resp::arg_u64(&mut command, cursor);
        resp::arg(&mut command, b"MATCH");
        resp::arg(&mut command, pattern.as_bytes());
        resp::arg(&mut command, b"COUNT");
        resp::arg_u64(&mut command, SCAN_COUNT);
        let frame = tokio::time::timeout(within, link.query(command, None))
            .await
            .map_err(|_| NodeError::TimedOut)??;
        let (next, found) = scanned(&frame)
            .ok_or_else(|| NodeError::Protocol(format!("SCAN answered {frame:?}").into()))?;
        for key in found {
            if keys.len() == limit {
                return Ok((keys, true));
            }
            keys.push(key);
        }
        if next == 0 {
            return Ok((keys, false));
        }
        cursor = next;
    }
    Ok((keys, true))
}

/// A `SCAN` reply: the next cursor and the keys.
fn scanned(frame: &Frame) -> Option<(u64, Vec<String>)> {
    let Frame::Array(items) = frame else {
        return None;
    };
    let [cursor, Frame::Array(keys)] = items.as_slice() else {
        return None;
    };
    let keys = keys
        .iter()
        .filter_map(|k| Some(String::from_utf8_lossy(k.bytes()?).into_owned()))
        .collect();
    Some((cursor.number()?, keys))
}

/// `text` as a glob that matches it exactly (`SCAN MATCH`'s special
/// characters escaped).
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_scan_reply_and_escapes_globs() {
        let reply = Frame::Array(vec![
            Frame::Bulk(b"17".to_vec()),
            Frame::Array(vec![Frame::Bulk(b"{a}:lock".to_vec())]),
        ]);
        assert_eq!(scanned(&reply), Some((17, vec!["{a}:lock".to_owned()])));
        assert_eq!(scanned(&Frame::Ok), None);
        assert_eq!(literal("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
