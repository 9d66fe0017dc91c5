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
//! operation's [`Reply`](crate::transport::node::Reply).

use std::sync::LazyLock;

mod encode;
mod reply;
#[cfg(test)]
mod tests;

pub(crate) use encode::encode;
pub(crate) use reply::{Shape, parse_reply};

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
    // label; `line.lua`: the line of waiters; `notify.lua`: a release
    // published; `period.lua`: a period's mark).
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
    "scripts/line.lua",
    "scripts/period.lua"
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
    "scripts/line.lua",
    "scripts/notify.lua",
    "scripts/period.lua"
);
lua!(
    RELEASE_AFTER,
    "scripts/release_after.lua",
    "release_after",
    ALLOW_OOM,
    "scripts/ours.lua"
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
    ALLOW_OOM,
    "scripts/notify.lua"
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
    "scripts/ours.lua",
    "scripts/notify.lua"
);
lua!(
    ACQUIRE_FENCED,
    "scripts/acquire_fenced.lua",
    "acquire_fenced",
    WRITES,
    "scripts/ours.lua",
    "scripts/line.lua",
    "scripts/period.lua"
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
    "scripts/line.lua",
    "scripts/notify.lua"
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
    ALLOW_OOM,
    "scripts/line.lua",
    "scripts/notify.lua"
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
    "scripts/line.lua",
    "scripts/notify.lua"
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
    "scripts/line.lua",
    "scripts/notify.lua"
);
lua!(INSPECT, "scripts/inspect.lua", "inspect", READ_ONLY);
lua!(PROBE, "scripts/probe.lua", "probe", READ_ONLY);
lua!(STAMP, "scripts/stamp.lua", "stamp", WRITES);
lua!(
    DEPLOYMENT,
    "scripts/deployment.lua",
    "deployment",
    ALLOW_OOM
);

/// Every script.
const ALL: [&Lua; 24] = [
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
    &PROBE,
    &RELEASE_AFTER,
    &STAMP,
    &DEPLOYMENT,
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
const NAMES: [&str; 24] = [
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
    "probe",
    "release_after",
    "stamp",
    "deployment",
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

/// Every command the scripts call (but `SPUBLISH` and `PUBLISH`, which they
/// call through `pcall`: denied, waiters poll), the native acquire's `SET`, and `INFO`,
/// which tells a restarted node: what a connection's permission probe
/// checks the user may run (the scripts' own `FCALL` or `EVAL` is checked
/// by running the probe). Each with arguments of its arity, `K` standing
/// for a lock key: `redis.acl_check_cmd` checks key patterns on them, and
/// Redis 7.0 crashes when it is handed a command that takes keys without
/// them (seen on 7.0.15, for a user with key patterns).
pub(crate) const COMMANDS: [&[&str]; 25] = [
    &["set", "K", "v"],
    &["get", "K"],
    &["del", "K"],
    &["exists", "K"],
    &["type", "K"],
    &["time"],
    &["incr", "K"],
    &["pexpire", "K", "1"],
    &["pexpireat", "K", "1"],
    &["pttl", "K"],
    &["hdel", "K", "f"],
    &["hexists", "K", "f"],
    &["hgetall", "K"],
    &["hincrby", "K", "f", "1"],
    &["hset", "K", "f", "v"],
    &["hsetnx", "K", "f", "v"],
    &["zadd", "K", "1", "m"],
    &["zcard", "K"],
    &["zincrby", "K", "1", "m"],
    &["zrange", "K", "0", "1"],
    &["zrangebyscore", "K", "0", "1"],
    &["zrem", "K", "m"],
    &["zremrangebyscore", "K", "0", "1"],
    &["zscore", "K", "m"],
    &["info"],
];

/// Writes the permission probe into `out`: `FCALL` of its function where
/// the library is `loaded`, else `EVAL` of its source. Its arguments are
/// each command of [`COMMANDS`], `K` replaced by `key` (a lock key in the
/// client's layout), as its argument count then the command and its
/// arguments. Its reply lists the commands the user may not run (`NOPERM`
/// if the script command itself is denied).
pub(crate) fn encode_probe(loaded: bool, key: &str, out: &mut Vec<u8>) {
    let mut args: Vec<&[u8]> = Vec::with_capacity(4 * COMMANDS.len() + 3);
    if loaded {
        args.push(b"FCALL");
        args.push(PROBE.function.as_bytes());
    } else {
        args.push(b"EVAL");
        args.push(PROBE.source.as_bytes());
    }
    args.push(b"0");
    let counts: Vec<String> = COMMANDS.iter().map(|c| c.len().to_string()).collect();
    for (command, count) in COMMANDS.iter().zip(&counts) {
        args.push(count.as_bytes());
        args.extend(command.iter().map(|a| {
            if *a == "K" {
                key.as_bytes()
            } else {
                a.as_bytes()
            }
        }));
    }
    out.extend(crate::transport::resp::encode(&args));
}

/// Writes the dataset mark's stamp into `out` (`stamp.lua`: since when
/// the node's dataset has been continuous, for clients that trust durable
/// restarts): `FCALL` where the library is `loaded`, else `EVAL`.
pub(crate) fn encode_stamp(loaded: bool, mark: &str, stamp: &Stamp<'_>, out: &mut Vec<u8>) {
    let uptime = stamp.uptime_s.map(|s| s.to_string()).unwrap_or_default();
    let bound = STAMP_KEPT_GAP.as_millis().to_string();
    let every = (STAMP_EVERY.as_millis() / 2).to_string();
    let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
    let (before, acked) = match stamp.acked {
        Some((run, at)) => (run.as_bytes(), at.to_string()),
        None => (&b""[..], String::new()),
    };
    let (command, script): (&[u8], &[u8]) = if loaded {
        (b"FCALL", STAMP.function.as_bytes())
    } else {
        (b"EVAL", STAMP.source.as_bytes())
    };
    out.extend(crate::transport::resp::encode(&[
        command,
        script,
        b"1",
        mark.as_bytes(),
        stamp.run_id.as_bytes(),
        uptime.as_bytes(),
        flag(stamp.durable),
        flag(stamp.known),
        bound.as_bytes(),
        every.as_bytes(),
        before,
        acked.as_bytes(),
    ]));
}

/// A stamp's reply: how long the dataset has been continuous, and the
/// mark's `at` after it (the node's clock at the last stamp it stored, ms):
/// what this client may vouch for after a restart. `None` for anything
/// else (a refusal: no right to the mark's key, an older server).
pub(crate) fn read_stamp(
    reply: &crate::transport::resp::Frame,
) -> Option<(std::time::Duration, u64)> {
    use crate::transport::resp::Frame;
    let Frame::Array(pair) = reply else {
        return None;
    };
    match pair.as_slice() {
        [Frame::Int(continuous), Frame::Int(at)] => Some((
            std::time::Duration::from_millis(u64::try_from(*continuous).unwrap_or(0)),
            u64::try_from(*at).ok()?,
        )),
        _ => None,
    }
}

/// What a stamp of the dataset mark says of the process it is sent to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp<'a> {
    /// The process (`run_id`).
    pub(crate) run_id: &'a str,
    /// Its `uptime_in_seconds`, as read at the handshake.
    pub(crate) uptime_s: Option<u64>,
    /// It persists every write (`appendonly yes`, `appendfsync always`).
    pub(crate) durable: bool,
    /// This client stamped this process before.
    pub(crate) known: bool,
    /// The process this client stamped before this one, and the `at` of
    /// its last stamp there that the node acknowledged: a restart whose
    /// dataset holds that stamp kept every write acknowledged before it.
    pub(crate) acked: Option<(&'a str, u64)>,
}

/// How often a connection of a client that trusts durable restarts stamps
/// its node's dataset mark (the mark's `at` is written at most twice as
/// often, whatever the number of clients).
pub(crate) const STAMP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest gap between the last stamp of a node's previous process and
/// its new process's start that still counts as a dataset kept, for a
/// client that did not see that process's stamps acknowledged: a stamp's
/// period and a quick restart (docs/design.md §4b).
pub(crate) const STAMP_KEPT_GAP: std::time::Duration = std::time::Duration::from_secs(5);

/// How many client addresses a node remembers as members
/// (`deployment.lua`'s `seen:` fields): every spelling of every member's
/// address that clients used, up to this bound.
pub(crate) const SEEN_ADDRESSES: usize = 64;

/// What one call of `deployment.lua` reads and writes (docs/agreement.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeploymentCall<'a> {
    /// The id the node takes if it has none.
    pub(crate) id: &'a str,
    /// The record to write where none is or the one held has a lower
    /// epoch, and the member this node is (a member that lost its data).
    pub(crate) write: Option<(&'a crate::proto::deployment::Record, Option<&'a str>)>,
    /// The client's addresses, to look up.
    pub(crate) addresses: &'a [std::sync::Arc<str>],
    /// Address and member pairs to record where the node knows none.
    pub(crate) known: &'a [(&'a str, &'a str)],
}

/// Writes a call of `deployment.lua` on the record `key` into `out`.
pub(crate) fn encode_deployment(
    loaded: bool,
    key: &str,
    call: &DeploymentCall<'_>,
    out: &mut Vec<u8>,
) {
    let (members, max_ttl, adopt, epoch, next) = match call.write {
        Some((record, adopt)) => (
            record.members().join(","),
            record.max_ttl_ms().to_string(),
            adopt.unwrap_or(""),
            record.epoch().to_string(),
            record.next().join(","),
        ),
        None => (
            String::new(),
            String::new(),
            "",
            String::new(),
            String::new(),
        ),
    };
    let cap = SEEN_ADDRESSES.to_string();
    let k = call.addresses.len().to_string();
    let (command, script): (&[u8], &[u8]) = if loaded {
        (b"FCALL", DEPLOYMENT.function.as_bytes())
    } else {
        (b"EVAL", DEPLOYMENT.source.as_bytes())
    };
    let mut args: Vec<&[u8]> = vec![
        command,
        script,
        b"1",
        key.as_bytes(),
        call.id.as_bytes(),
        members.as_bytes(),
        max_ttl.as_bytes(),
        adopt.as_bytes(),
        cap.as_bytes(),
        epoch.as_bytes(),
        next.as_bytes(),
        k.as_bytes(),
    ];
    args.extend(call.addresses.iter().map(|a| a.as_bytes()));
    for (address, id) in call.known {
        args.push(address.as_bytes());
        args.push(id.as_bytes());
    }
    out.extend(crate::transport::resp::encode(&args));
}

/// A `deployment.lua` reply: the node's reading, or `None` for anything
/// else (an older server, a refusal: see the caller).
pub(crate) fn read_deployment(
    reply: &crate::transport::resp::Frame,
) -> Option<crate::proto::deployment::Reading> {
    use crate::proto::deployment::{Reading, Record};
    use crate::transport::resp::Frame;
    let Frame::Array(items) = reply else {
        return None;
    };
    let text = |frame: &Frame| match frame {
        Frame::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let [id, members, max_ttl, epoch, next, seen @ ..] = items.as_slice() else {
        return None;
    };
    let id = text(id).filter(|id| !id.is_empty())?;
    let members = text(members)?;
    let ids = |list: &str| {
        list.split(',')
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let record = if members.is_empty() {
        None
    } else {
        let max_ttl = text(max_ttl)?.parse().ok()?;
        // A record written before epochs were recorded is the first.
        let epoch = text(epoch).filter(|e| !e.is_empty());
        let epoch = epoch.map_or(Some(0), |e| e.parse().ok())?;
        let next = ids(&text(next)?);
        Some(Record::new(ids(&members), max_ttl).at(epoch, next))
    };
    let seen = seen
        .iter()
        .map(|s| text(s).filter(|s| !s.is_empty()))
        .collect();
    Some(Reading { id, record, seen })
}

/// The plain release's source, as an `EVAL` sends it.
pub(crate) fn release_source() -> &'static str {
    &RELEASE.source
}
