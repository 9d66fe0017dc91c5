//! The commands for each node operation: Lua scripts that make them atomic,
//! and a native `SET NX PX` for a plain acquire that needs nothing more
//! (Redis runs it in about half the time of the script).
//!
//! Where the server offers functions (Redis 7+, Valkey; `FUNCTION LOAD`
//! allowed), every new connection loads the scripts as one library before
//! it takes a call — `redquorum_<version hash>`, one function per script,
//! loaded once per server and kept across restarts with persistence — and
//! calls go as `FCALL`: the node neither receives nor hashes the source on
//! every call. A `SCRIPT FLUSH` leaves functions alone. Elsewhere a
//! connection sends `EVAL` of each script's source (comments stripped, once
//! per process), which needs nothing loaded.
//!
//! Never `EVALSHA` with a retry: a call retried after `NOSCRIPT` goes out
//! *after* calls made later on the same connection, so a release could run
//! before the acquire it follows. One message per call keeps every node's
//! calls in the order they were made. If the library is deleted under a
//! live connection (`FUNCTION FLUSH`), the calls already sent fail like any
//! error reply and that connection sends `EVAL` from then on, in order; the
//! next connection loads the library again. Functions that only extend or
//! delete are flagged `allow-oom`: like `EVAL` of them, they run on a node
//! out of memory.
//!
//! A command is written straight into its connection's output buffer, in
//! RESP ([`encode`]), when the connection's task takes the call: nothing is
//! allocated per call. [`parse_reply`] reads the node's reply as the
//! operation's [`Reply`](crate::node::Reply).

use std::sync::LazyLock;

mod reply;
#[cfg(test)]
mod tests;

pub(crate) use reply::parse_reply;

use crate::node::{Op, Waiter};
use crate::resp;

/// A script's source without its comment lines, computed on first use, its
/// function's name in the library, and its function's flags: `allow-oom`
/// where it may run on a node out of memory (it only shortens or deletes,
/// as `EVAL` would allow), `no-writes` where it only reads.
struct Lua {
    source: LazyLock<String>,
    function: LazyLock<String>,
    flags: &'static str,
}

/// The flags of a function that writes.
const WRITES: &str = "";
/// …that only shortens or deletes.
const ALLOW_OOM: &str = "'allow-oom'";
/// …that only reads.
const READ_ONLY: &str = "'no-writes', 'allow-oom'";

macro_rules! lua {
    // A script, after the preludes it uses (`ours.lua`: a key's token and
    // label; `line.lua`: the line of waiters).
    ($name:ident, $file:literal, $fname:literal, $flags:expr $(, $prelude:literal)*) => {
        static $name: Lua = Lua {
            source: LazyLock::new(|| {
                strip_comments(concat!($(include_str!($prelude),)* include_str!($file)))
            }),
            function: LazyLock::new(|| format!("redquorum_{}_{}", $fname, &*VERSION)),
            flags: $flags,
        };
    };
}

/// `source` without whole-line `--` comments and blank lines: what the
/// node needs, in fewer bytes per call.
fn strip_comments(source: &str) -> String {
    source
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

lua!(
    ACQUIRE,
    "scripts/acquire.lua",
    "acquire",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    EXTEND,
    "scripts/extend.lua",
    "extend",
    ALLOW_OOM,
    "scripts/ours.lua"
);
lua!(
    RELEASE,
    "scripts/release.lua",
    "release",
    ALLOW_OOM,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    ACQUIRE_REENTRANT,
    "scripts/acquire_reentrant.lua",
    "acquire_reentrant",
    WRITES
);
lua!(
    EXTEND_REENTRANT,
    "scripts/extend_reentrant.lua",
    "extend_reentrant",
    ALLOW_OOM
);
lua!(
    RELEASE_REENTRANT,
    "scripts/release_reentrant.lua",
    "release_reentrant",
    ALLOW_OOM
);
lua!(
    ACQUIRE_MANY,
    "scripts/acquire_many.lua",
    "acquire_many",
    WRITES,
    "scripts/ours.lua"
);
lua!(
    EXTEND_MANY,
    "scripts/extend_many.lua",
    "extend_many",
    ALLOW_OOM,
    "scripts/ours.lua"
);
lua!(
    RELEASE_MANY,
    "scripts/release_many.lua",
    "release_many",
    ALLOW_OOM,
    "scripts/ours.lua"
);
lua!(
    ACQUIRE_FENCED,
    "scripts/acquire_fenced.lua",
    "acquire_fenced",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    FENCE_WRITEBACK,
    "scripts/fence_writeback.lua",
    "fence_writeback",
    WRITES,
    "scripts/ours.lua"
);
lua!(
    ACQUIRE_READ,
    "scripts/acquire_read.lua",
    "acquire_read",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    EXTEND_READ,
    "scripts/extend_read.lua",
    "extend_read",
    ALLOW_OOM
);
lua!(
    RELEASE_READ,
    "scripts/release_read.lua",
    "release_read",
    ALLOW_OOM
);
lua!(
    ACQUIRE_WRITE,
    "scripts/acquire_write.lua",
    "acquire_write",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    RELEASE_WRITE,
    "scripts/release_write.lua",
    "release_write",
    ALLOW_OOM,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    ACQUIRE_PERMIT,
    "scripts/acquire_permit.lua",
    "acquire_permit",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(
    EXTEND_PERMIT,
    "scripts/extend_permit.lua",
    "extend_permit",
    ALLOW_OOM,
    "scripts/ours.lua"
);
lua!(
    RELEASE_PERMIT,
    "scripts/release_permit.lua",
    "release_permit",
    ALLOW_OOM,
    "scripts/ours.lua",
    "scripts/line.lua"
);
lua!(INSPECT, "scripts/inspect.lua", "inspect", READ_ONLY);

/// Every script.
const ALL: [&Lua; 20] = [
    &ACQUIRE,
    &EXTEND,
    &RELEASE,
    &ACQUIRE_REENTRANT,
    &EXTEND_REENTRANT,
    &RELEASE_REENTRANT,
    &ACQUIRE_MANY,
    &EXTEND_MANY,
    &RELEASE_MANY,
    &ACQUIRE_FENCED,
    &FENCE_WRITEBACK,
    &ACQUIRE_READ,
    &EXTEND_READ,
    &RELEASE_READ,
    &ACQUIRE_WRITE,
    &RELEASE_WRITE,
    &ACQUIRE_PERMIT,
    &EXTEND_PERMIT,
    &RELEASE_PERMIT,
    &INSPECT,
];

/// The library's body: each script's source, unchanged, as a function
/// whose parameters are named as a script's globals; `{v}` for the version.
fn body() -> String {
    let mut body = String::new();
    for (lua, fname) in ALL.iter().zip(NAMES) {
        let flags = lua.flags;
        body.push_str(&format!(
            "redis.register_function{{function_name='redquorum_{fname}_{{v}}', \
             callback=function(KEYS, ARGV)\n{}\nend, flags={{{flags}}}}}\n",
            &*lua.source
        ));
    }
    body
}

/// The functions' names, in the order of [`ALL`].
const NAMES: [&str; 20] = [
    "acquire",
    "extend",
    "release",
    "acquire_reentrant",
    "extend_reentrant",
    "release_reentrant",
    "acquire_many",
    "extend_many",
    "release_many",
    "acquire_fenced",
    "fence_writeback",
    "acquire_read",
    "extend_read",
    "release_read",
    "acquire_write",
    "release_write",
    "acquire_permit",
    "extend_permit",
    "release_permit",
    "inspect",
];

/// 12 hex digits of a 64-bit FNV-1a hash of the whole library (sources,
/// wrappers and flags): names the library and its functions, so that two
/// versions never clash and a changed library is never taken for a loaded
/// one.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let hash = body().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")[..12].to_owned()
});

/// The library's source for `FUNCTION LOAD`.
pub(crate) static LIBRARY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "#!lua name=redquorum_{v}\n{}",
        body().replace("{v}", &VERSION),
        v = &*VERSION
    )
});

/// Writes the command for `op` into `out`: `FCALL` of its function where the
/// connection has the library loaded (`loaded`), else `EVAL` of its source;
/// or a native `SET` for a plain acquire.
pub(crate) fn encode(op: &Op<'_>, loaded: bool, out: &mut Vec<u8>) {
    if let Op::Acquire {
        key,
        token,
        label,
        ttl_ms,
        holder_ttl: false,
        waiter: None,
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
    // single keys, `rest` a slice of them (a line, or an op's key list).
    let mut args = Args::default();
    let (first, rest): (&[&str], &[String]) = match *op {
        Op::Acquire {
            key,
            token,
            label,
            ttl_ms,
            line,
            waiter,
            ..
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
            (&[key][..], in_line(&mut args, line, waiter))
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
        } => {
            args.push(Arg::Str(token));
            if line.len() == 2 {
                push_leaving(&mut args, waiter);
            }
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
            ttl_ms,
            waiter,
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
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
        Op::ReleaseRead {
            keys,
            token,
            waiter,
        }
        | Op::ReleaseWrite {
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
        } => {
            args.push(Arg::Str(token))
                .push(Arg::Num(ttl_ms))
                .push(Arg::Str(label));
            (&[key, fence_key][..], in_line(&mut args, line, waiter))
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
    let key_count = first.len() + rest.len();
    resp::command(out, 3 + key_count + args.len);
    if loaded {
        resp::arg(out, b"FCALL");
        resp::arg(out, lua.function.as_bytes());
    } else {
        resp::arg(out, b"EVAL");
        resp::arg(out, lua.source.as_bytes());
    }
    resp::arg_u64(out, key_count as u64);
    for key in first.iter().copied().chain(rest.iter().map(String::as_str)) {
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
