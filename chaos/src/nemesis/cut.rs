//! What the `cut` fault checks of a release it cut: the call that never
//! reached the node, read back from the bytes the proxy reset (the plain
//! releases among them, as key and token), and whether a lock key still
//! holds a token.

use std::time::Duration;

/// How soon a release cut on its way must have been sent again and taken
/// effect: a reconnection and one call, with room for a loaded machine,
/// and less than the run's TTL, so that a key left behind is seen before
/// it expires.
pub(crate) const RESENT_WITHIN: Duration = Duration::from_millis(1_500);

/// The plain releases (`FCALL redquorum_release_<version> NUMKEYS KEY…
/// TOKEN …`)
/// among the calls (RESP arrays of bulk strings) in `chunk`, as (key,
/// token); a call cut short at the chunk's end is left out.
pub(crate) fn plain_releases(chunk: &[u8]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = chunk;
    while let Some((call, after)) = resp_array(rest) {
        rest = after;
        let text = |i: usize| call.get(i).map(|b| String::from_utf8_lossy(b).into_owned());
        // `redquorum_release_<version>`; the other kinds' releases
        // (`redquorum_release_many_<version>`, …) hold another `_`.
        let plain = text(1).is_some_and(|f| {
            f.strip_prefix("redquorum_release_")
                .is_some_and(|version| !version.is_empty() && !version.contains('_'))
        });
        if !plain {
            continue;
        }
        let Some(keys) = text(2).and_then(|k| k.parse::<usize>().ok()) else {
            continue;
        };
        if let (Some(key), Some(token)) = (text(3), text(3 + keys)) {
            found.push((key, token));
        }
    }
    found
}

/// One RESP array of bulk strings at the start of `bytes`, and what
/// follows it.
fn resp_array(bytes: &[u8]) -> Option<(Vec<&[u8]>, &[u8])> {
    fn line(bytes: &[u8], tag: u8) -> Option<(usize, &[u8])> {
        let rest = bytes.strip_prefix(&[tag])?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
        Some((n, &rest[end + 2..]))
    }
    let (count, mut rest) = line(bytes, b'*')?;
    let mut items = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (len, after) = line(rest, b'$')?;
        let item = after.get(..len)?;
        rest = after.get(len..)?.strip_prefix(b"\r\n")?;
        items.push(item);
    }
    Some((items, rest))
}

/// Whether a lock key's value is `token`'s: the token alone, or followed
/// by a NUL byte and a label (`src/transport/scripts/ours.lua`).
pub(crate) fn holds_token(value: &[u8], token: &str) -> bool {
    let token = token.as_bytes();
    value == token || (value.starts_with(token) && value.get(token.len()) == Some(&0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(words: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend(format!("${}\r\n{w}\r\n", w.len()).into_bytes());
        }
        out
    }

    #[test]
    fn plain_releases_are_found_among_pipelined_calls() {
        let mut chunk = call(&[
            "FCALL",
            "redquorum_extend_0a1b",
            "1",
            "{a}:lock",
            "t0",
            "2000",
        ]);
        chunk.extend(call(&[
            "FCALL",
            "redquorum_release_0a1b",
            "1",
            "{a}:lock",
            "t1",
        ]));
        chunk.extend(call(&[
            "FCALL",
            "redquorum_release_0a1b",
            "3",
            "{b}:lock",
            "l1",
            "l2",
            "t2",
            "w",
            "9",
        ]));
        chunk.extend(call(&[
            "FCALL",
            "redquorum_release_many_0a1b",
            "1",
            "{c}:lock",
            "t3",
        ]));
        let found = plain_releases(&chunk);
        assert_eq!(
            found,
            [
                ("{a}:lock".into(), "t1".into()),
                ("{b}:lock".into(), "t2".into())
            ]
        );
        // A call cut short at the chunk's end is left out.
        let cut = call(&["FCALL", "redquorum_release_0a1b", "1", "{d}:lock", "t4"]);
        assert!(plain_releases(&cut[..cut.len() - 3]).is_empty());
    }

    #[test]
    fn a_token_is_held_alone_or_before_a_label() {
        assert!(holds_token(b"t1", "t1"));
        assert!(holds_token(b"t1\0worker-3", "t1"));
        assert!(!holds_token(b"t12", "t1"));
        assert!(!holds_token(b"kept:w", "t1"));
    }
}
