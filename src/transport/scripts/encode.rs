//! Each operation's command, in RESP, written straight into a connection's
//! output buffer: `FCALL` of its function, `EVAL` of its source, or a
//! native `SET` for a plain acquire (see the [module docs](super)).

use super::Shape;
use super::{
    ACQUIRE, ACQUIRE_FENCED, ACQUIRE_MANY, ACQUIRE_PERMIT, ACQUIRE_READ, ACQUIRE_REENTRANT,
    ACQUIRE_WRITE, EXTEND, EXTEND_MANY, EXTEND_PERMIT, EXTEND_READ, EXTEND_REENTRANT,
    FENCE_WRITEBACK, INSPECT, RELEASE, RELEASE_AFTER, RELEASE_MANY, RELEASE_PERMIT, RELEASE_READ,
    RELEASE_REENTRANT, RELEASE_WRITE,
};
use crate::proto::op::{Op, Period, Waiter};
use crate::transport::resp;

/// Writes the command for `op` into `out`: `FCALL` of its function where the
/// connection has the library loaded (`loaded`), else `EVAL` of its source;
/// or a native `SET` for a plain acquire. Returns how its reply reads.
pub(crate) fn encode(op: &Op<'_>, loaded: bool, out: &mut Vec<u8>) -> Shape {
    write(op, loaded, out);
    Shape::of(op)
}

/// [`encode`]'s writing.
fn write(op: &Op<'_>, loaded: bool, out: &mut Vec<u8>) {
    if let Op::Acquire {
        key,
        token,
        label,
        ttl_ms,
        holder_ttl: false,
        waiter: None,
        period: None,
        ..
    } = *op
    {
        resp::command(out, 6);
        resp::arg(out, b"SET");
        resp::arg(out, key.as_bytes());
        // The token, and the label after a NUL byte (see `ours.lua`).
        match label {
            "" => resp::arg(out, token.as_bytes()),
            label => resp::arg_parts(out, &[token.as_bytes(), b"\0", label.as_bytes()]),
        }
        for arg in [&b"NX"[..], b"PX"] {
            resp::arg(out, arg);
        }
        resp::arg_u64(out, ttl_ms);
        return;
    }
    let lua = match op {
        Op::Acquire { .. } => &ACQUIRE,
        Op::Extend { .. } => &EXTEND,
        Op::Release { .. } => &RELEASE,
        Op::ReleaseAfter { .. } => &RELEASE_AFTER,
        Op::AcquireReentrant { .. } => &ACQUIRE_REENTRANT,
        Op::ExtendReentrant { .. } => &EXTEND_REENTRANT,
        Op::ReleaseReentrant { .. } => &RELEASE_REENTRANT,
        Op::AcquireMany { .. } => &ACQUIRE_MANY,
        Op::ExtendMany { .. } => &EXTEND_MANY,
        Op::ReleaseMany { .. } => &RELEASE_MANY,
        Op::AcquireFenced { .. } => &ACQUIRE_FENCED,
        Op::FenceWriteBack { .. } => &FENCE_WRITEBACK,
        Op::AcquireRead { .. } => &ACQUIRE_READ,
        Op::ExtendRead { .. } => &EXTEND_READ,
        Op::ReleaseRead { .. } => &RELEASE_READ,
        Op::AcquireWrite { .. } => &ACQUIRE_WRITE,
        Op::ReleaseWrite { .. } => &RELEASE_WRITE,
        Op::AcquirePermit { .. } => &ACQUIRE_PERMIT,
        Op::ExtendPermit { .. } => &EXTEND_PERMIT,
        Op::ReleasePermit { .. } => &RELEASE_PERMIT,
        Op::Inspect { .. } => &INSPECT,
    };
    // Keys, then arguments: as the scripts read KEYS and ARGV. `first` are
    // single keys, `rest` a slice of them (a line, or an op's key list),
    // `last` a period's mark (period.lua).
    let mut args = Args::default();
    let mut last = None;
    let (first, rest): (&[&str], &[String]) = match *op {
        Op::Acquire {
            key,
            token,
            label,
            ttl_ms,
            line,
            waiter,
            period,
            ..
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
            let line = in_line(&mut args, line, waiter);
            last = with_period(&mut args, period);
            (&[key][..], line)
        }
        Op::Extend {
            key,
            token,
            label,
            ttl_ms,
            restore,
        } => {
            args.push(Arg::Str(token)).push(Arg::Num(ttl_ms));
            if restore {
                args.push(Arg::Str(label));
            }
            (&[key][..], &[])
        }
        Op::Release {
            key,
            token,
            line,
            waiter,
            period,
        } => {
            args.push(Arg::Str(token));
            if line.len() == 2 {
                push_leaving(&mut args, waiter);
            }
            last = period;
            (&[key][..], line)
        }
        Op::AcquireReentrant {
            key,
            owner,
            label,
            hold,
            ttl_ms,
        } => {
            args.push(Arg::Str(owner))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(hold))
                .push(Arg::Str(label));
            (&[key][..], &[])
        }
        Op::ExtendReentrant { key, owner, ttl_ms } => {
            args.push(Arg::Str(owner)).push(Arg::Num(ttl_ms));
            (&[key][..], &[])
        }
        Op::ReleaseReentrant { key, owner, hold } => {
            args.push(Arg::Str(owner)).push(Arg::Str(hold));
            (&[key][..], &[])
        }
        Op::AcquireMany {
            keys,
            token,
            label,
            ttl_ms,
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
            (&[][..], keys)
        }
        Op::ExtendMany {
            keys,
            token,
            ttl_ms,
        }
        | Op::ExtendRead {
            keys,
            token,
            ttl_ms,
        }
        | Op::ExtendPermit {
            keys,
            token,
            ttl_ms,
        } => {
            args.push(Arg::Str(token)).push(Arg::Num(ttl_ms));
            (&[][..], keys)
        }
        Op::AcquireRead {
            keys,
            token,
            ttl_ms,
            waiter,
        } => {
            args.push(Arg::Str(token)).push(Arg::Num(ttl_ms));
            push_waiter(&mut args, waiter);
            (&[][..], keys)
        }
        Op::AcquireWrite {
            keys,
            token,
            label,
            intent,
            ttl_ms,
            waiter,
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label))
                .push(Arg::Str(intent));
            push_waiter(&mut args, waiter);
            (&[][..], keys)
        }
        Op::AcquirePermit {
            keys,
            token,
            label,
            ttl_ms,
            permits,
            waiter,
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Num(u64::from(permits)))
                .push(Arg::Str(label));
            push_waiter(&mut args, waiter);
            (&[][..], keys)
        }
        Op::ReleaseMany { keys, token } => {
            args.push(Arg::Str(token));
            (&[][..], keys)
        }
        Op::ReleaseWrite {
            keys,
            token,
            intent,
            waiter,
        } => {
            args.push(Arg::Str(token)).push(Arg::Str(intent));
            push_leaving(&mut args, waiter);
            (&[][..], keys)
        }
        Op::ReleaseRead {
            keys,
            token,
            waiter,
        }
        | Op::ReleasePermit {
            keys,
            token,
            waiter,
        } => {
            args.push(Arg::Str(token));
            push_leaving(&mut args, waiter);
            (&[][..], keys)
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
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
            let line = in_line(&mut args, line, waiter);
            last = with_period(&mut args, period);
            (&[key, fence_key][..], line)
        }
        Op::ReleaseAfter {
            key,
            token,
            after_ms,
        } => {
            args.push(Arg::Str(token)).push(Arg::Num(after_ms));
            (&[key][..], &[])
        }
        Op::FenceWriteBack {
            key,
            fence_key,
            token,
            fence,
        } => {
            args.push(Arg::Str(token)).push(Arg::Num(fence));
            (&[key, fence_key][..], &[])
        }
        Op::Inspect { keys } => (&[][..], keys),
    };
    let key_count = first.len() + rest.len() + usize::from(last.is_some());
    resp::command(out, 3 + key_count + args.len);
    if loaded {
        resp::arg(out, b"FCALL");
        resp::arg(out, lua.function.as_bytes());
    } else {
        resp::arg(out, b"EVAL");
        resp::arg(out, lua.source.as_bytes());
    }
    resp::arg_u64(out, key_count as u64);
    let keys = first.iter().copied().chain(rest.iter().map(String::as_str));
    for key in keys.chain(last) {
        resp::arg(out, key.as_bytes());
    }
    for arg in &args.items[..args.len] {
        match *arg {
            Arg::Str(text) => resp::arg(out, text.as_bytes()),
            Arg::Num(n) => resp::arg_u64(out, n),
        }
    }
}

/// A waiter's line keys (`line`, when it has one), its arguments pushed.
fn in_line<'a>(
    args: &mut Args<'a>,
    line: &'a [String],
    waiter: Option<Waiter<'a>>,
) -> &'a [String] {
    if line.len() == 2 && waiter.is_some() {
        push_waiter(args, waiter);
        line
    } else {
        &[]
    }
}

/// A period's mark key, its length pushed last (as period.lua reads it).
fn with_period<'a>(args: &mut Args<'a>, period: Option<Period<'a>>) -> Option<&'a str> {
    let period = period?;
    args.push(Arg::Num(period.ms));
    Some(period.key)
}

/// A waiter's id, ticket and patience, as the scripts read them.
fn push_waiter<'a>(args: &mut Args<'a>, waiter: Option<Waiter<'a>>) {
    if let Some(w) = waiter {
        args.push(Arg::Str(w.id))
            .push(Arg::Num(w.ticket))
            .push(Arg::Num(w.patience_ms));
    }
}

/// A waiter leaving its line: its id and patience, as the release scripts
/// read them (its name in line is made of them).
fn push_leaving<'a>(args: &mut Args<'a>, waiter: Option<Waiter<'a>>) {
    if let Some(w) = waiter {
        args.push(Arg::Str(w.id)).push(Arg::Num(w.patience_ms));
    }
}

/// A script's arguments, inline (at most eight).
#[derive(Default)]
struct Args<'a> {
    items: [Arg<'a>; 8],
    len: usize,
}

impl<'a> Args<'a> {
    fn push(&mut self, arg: Arg<'a>) -> &mut Self {
        self.items[self.len] = arg;
        self.len += 1;
        self
    }
}

/// One script argument.
#[derive(Clone, Copy)]
enum Arg<'a> {
    Str(&'a str),
    Num(u64),
}

impl Default for Arg<'_> {
    fn default() -> Self {
        Arg::Num(0)
    }
}
