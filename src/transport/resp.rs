//! RESP2, the Redis protocol, both ways: commands out (arrays of bulk
//! strings, written straight into a connection's buffer) and replies in
//! (parsed incrementally from the bytes read so far). Pure: no I/O.
//!
//! Only what a lock client needs, and bounded: a reply nests at most
//! [`MAX_DEPTH`] arrays, holds at most [`MAX_ELEMENTS`] elements per array
//! and [`MAX_BULK`] bytes per string; anything else is a protocol error,
//! and the connection that sent it is dropped.
//!
//! ```text
//! command  *3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n
//! replies  +OK\r\n  -ERR …\r\n  :42\r\n  $3\r\nabc\r\n  $-1\r\n  *2\r\n:1\r\n:7\r\n
//! ```

use std::fmt;

/// The deepest nesting of arrays accepted in a reply.
pub(crate) const MAX_DEPTH: usize = 8;
/// The most elements one array of a reply may have.
pub(crate) const MAX_ELEMENTS: usize = 1 << 20;
/// The longest string a reply may carry (Redis' own limit is 512 MB).
pub(crate) const MAX_BULK: usize = 64 << 20;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// `+OK`, the commonest status (no allocation).
    Ok,
    /// Another status line (`+PONG`, `+QUEUED`…).
    Status(String),
    /// An error reply: its whole line (`MOVED 3999 127.0.0.1:7002`).
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// A null bulk string or null array.
    Nil,
    Array(Vec<Frame>),
}

impl Frame {
    /// The bytes of a bulk or status reply.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Ok => Some(b"OK"),
            Frame::Status(s) => Some(s.as_bytes()),
            Frame::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// An integer, or a string holding one (a score, a `TIME` field).
    pub(crate) fn number<T: std::str::FromStr + TryFrom<i64>>(&self) -> Option<T> {
        match self {
            Frame::Int(n) => T::try_from(*n).ok(),
            other => std::str::from_utf8(other.bytes()?).ok()?.parse().ok(),
        }
    }
}

/// A reply that breaks the protocol (or its bounds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed reply: {}", self.0)
    }
}

/// Starts a command of `args` arguments.
pub(crate) fn command(buf: &mut Vec<u8>, args: usize) {
    header(buf, b'*', args as u64);
}

/// One argument.
pub(crate) fn arg(buf: &mut Vec<u8>, arg: &[u8]) {
    header(buf, b'$', arg.len() as u64);
    buf.extend_from_slice(arg);
    buf.extend_from_slice(b"\r\n");
}

/// One argument made of `parts` one after the other (no copy into a
/// buffer of its own).
pub(crate) fn arg_parts(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    header(buf, b'$', parts.iter().map(|p| p.len() as u64).sum());
    for part in parts {
        buf.extend_from_slice(part);
    }
    buf.extend_from_slice(b"\r\n");
}

/// One argument, a number in decimal.
pub(crate) fn arg_u64(buf: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let text = decimal(n, &mut digits);
    arg(buf, text);
}

/// A whole command from its arguments (off the hot path: a query).
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    command(&mut buf, args.len());
    for a in args {
        arg(&mut buf, a);
    }
    buf
}

fn header(buf: &mut Vec<u8>, kind: u8, n: u64) {
    let mut digits = [0u8; 20];
    buf.push(kind);
    buf.extend_from_slice(decimal(n, &mut digits));
    buf.extend_from_slice(b"\r\n");
}

fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

/// Parses one reply from the start of `buf`: the reply and how many bytes it
/// took, `None` if `buf` does not hold a whole one yet.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, Malformed> {
    let mut at = 0;
    match frame(buf, &mut at, 0)? {
        Some(frame) => Ok(Some((frame, at))),
        None => Ok(None),
    }
}

/// The line starting at `*at` (without its CRLF), moving `*at` past it.
fn line<'a>(buf: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = &buf[*at..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    *at += end + 2;
    Some(&rest[..end])
}

fn int(text: &[u8]) -> Result<i64, Malformed> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Malformed(format!("not a number: {:?}", String::from_utf8_lossy(text))))
}

fn frame(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Frame>, Malformed> {
    let Some(&kind) = buf.get(*at) else {
        return Ok(None);
    };
    let start = *at;
    *at += 1;
    let Some(head) = line(buf, at) else {
        *at = start;
        return Ok(None);
    };
    let text = || String::from_utf8_lossy(head).into_owned();
    Ok(Some(match kind {
        b'+' if head == b"OK" => Frame::Ok,
        b'+' => Frame::Status(text()),
        b'-' => Frame::Error(text()),
        b':' => Frame::Int(int(head)?),
        b'$' => {
            let len = int(head)?;
            if len < 0 {
                return Ok(Some(Frame::Nil));
            }
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_BULK {
                return Err(Malformed(format!("a string of {len} bytes")));
            }
            if buf.len() < *at + len + 2 {
                *at = start;
                return Ok(None);
            }
            let bytes = buf[*at..*at + len].to_vec();
            if &buf[*at + len..*at + len + 2] != b"\r\n" {
                return Err(Malformed("a string without its CRLF".into()));
            }
            *at += len + 2;
            Frame::Bulk(bytes)
        }
        b'*' => {
            let len = int(head)?;
            if len < 0 {
                return Ok(Some(Frame::Nil));
            }
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_ELEMENTS || depth >= MAX_DEPTH {
                return Err(Malformed(format!("an array of {len} at depth {depth}")));
            }
            let mut items = Vec::with_capacity(len.min(64));
            for _ in 0..len {
                match frame(buf, at, depth + 1)? {
                    Some(item) => items.push(item),
                    None => {
                        *at = start;
                        return Ok(None);
                    }
                }
            }
            Frame::Array(items)
        }
        other => {
            return Err(Malformed(format!("type byte {:?}", char::from(other))));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands() {
        let mut buf = Vec::new();
        command(&mut buf, 3);
        arg(&mut buf, b"SET");
        arg(&mut buf, b"k");
        arg_u64(&mut buf, 10_000);
        assert_eq!(buf, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n10000\r\n");
        assert_eq!(encode(&[b"PING"]), b"*1\r\n$4\r\nPING\r\n");
        let mut digits = [0; 20];
        assert_eq!(decimal(0, &mut digits), b"0");
        assert_eq!(decimal(u64::MAX, &mut digits), b"18446744073709551615");
    }

    #[test]
    fn parses_every_reply_kind() {
        let all = b"+OK\r\n+PONG\r\n-MOVED 1 h:2\r\n:-7\r\n$3\r\na\rb\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n*-1\r\n";
        let mut at = 0;
        let mut frames = Vec::new();
        while let Some((frame, used)) = parse(&all[at..]).unwrap() {
            frames.push(frame);
            at += used;
        }
        assert_eq!(at, all.len());
        assert_eq!(
            frames,
            [
                Frame::Ok,
                Frame::Status("PONG".into()),
                Frame::Error("MOVED 1 h:2".into()),
                Frame::Int(-7),
                Frame::Bulk(b"a\rb".to_vec()),
                Frame::Nil,
                Frame::Array(vec![Frame::Int(1), Frame::Bulk(Vec::new())]),
                Frame::Nil,
            ]
        );
    }

    #[test]
    fn an_incomplete_reply_waits_for_more_at_every_cut() {
        let whole = b"*3\r\n$5\r\nhello\r\n*1\r\n:42\r\n+OK\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse(&whole[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (frame, used) = parse(whole).unwrap().unwrap();
        assert_eq!(used, whole.len());
        assert_eq!(
            frame,
            Frame::Array(vec![
                Frame::Bulk(b"hello".to_vec()),
                Frame::Array(vec![Frame::Int(42)]),
                Frame::Ok
            ])
        );
    }

    #[test]
    fn malformed_and_unbounded_replies_are_errors() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$3\r\nabcd\r\n",
            b"*9999999999\r\n",
            b"$99999999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
        let ok = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
        assert!(parse(ok.as_bytes()).unwrap().is_some());
    }
}
