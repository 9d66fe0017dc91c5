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
//! Commands are built in reused buffers: a fresh `redis::Cmd` grows its two
//! vectors six times while an `EVALSHA` is written into it, on every call to
//! every node. A cleared one keeps its capacity, so once a few spares exist,
//! building a command allocates nothing.

use std::ops::Deref;
use std::sync::{LazyLock, Mutex, PoisonError};

use redis::Cmd;

use crate::node::Op;

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
    ($name:ident, $file:literal, $fname:literal, $flags:expr) => {
        static $name: Lua = Lua {
            source: LazyLock::new(|| strip_comments(include_str!($file))),
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

lua!(ACQUIRE, "scripts/acquire.lua", "acquire", WRITES);
lua!(EXTEND, "scripts/extend.lua", "extend", ALLOW_OOM);
lua!(RELEASE, "scripts/release.lua", "release", ALLOW_OOM);
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
    WRITES
);
lua!(
    EXTEND_MANY,
    "scripts/extend_many.lua",
    "extend_many",
    ALLOW_OOM
);
lua!(
    RELEASE_MANY,
    "scripts/release_many.lua",
    "release_many",
    ALLOW_OOM
);
lua!(
    ACQUIRE_FENCED,
    "scripts/acquire_fenced.lua",
    "acquire_fenced",
    WRITES
);
lua!(
    FENCE_WRITEBACK,
    "scripts/fence_writeback.lua",
    "fence_writeback",
    WRITES
);
lua!(
    ACQUIRE_READ,
    "scripts/acquire_read.lua",
    "acquire_read",
    WRITES
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
    WRITES
);
lua!(
    RELEASE_WRITE,
    "scripts/release_write.lua",
    "release_write",
    ALLOW_OOM
);
lua!(INSPECT, "scripts/inspect.lua", "inspect", READ_ONLY);

/// Every script.
const ALL: [&Lua; 17] = [
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
const NAMES: [&str; 17] = [
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
    "inspect",
];

/// The first 12 hex digits of the SHA-1 of the whole library (sources,
/// wrappers and flags): names the library and its functions, so that two
/// versions never clash and a changed library is never taken for a loaded
/// one.
static VERSION: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(&body()).get_hash()[..12].to_owned());

/// The library's source for `FUNCTION LOAD`.
pub(crate) static LIBRARY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "#!lua name=redquorum_{v}\n{}",
        body().replace("{v}", &VERSION),
        v = &*VERSION
    )
});

/// At most this many spare command buffers are kept (about 200 bytes each).
/// One process-wide stock rather than one per thread: a call often starts on
/// one worker thread and ends on another, which would drain one thread's
/// stock into the other's. The lock is held for a push or a pop only.
const SPARES: usize = 64;

static SPARE: Mutex<Vec<Cmd>> = Mutex::new(Vec::new());

/// A command in a reused buffer, which goes back to the spares when dropped.
pub(crate) struct Command(Cmd);

impl Command {
    fn new() -> Self {
        let spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner).pop();
        Command(spare.unwrap_or_default())
    }
}

impl Deref for Command {
    type Target = Cmd;

    fn deref(&self) -> &Cmd {
        &self.0
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        let mut cmd = std::mem::take(&mut self.0);
        cmd.clear(); // keeps the capacity
        let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.len() < SPARES {
            spare.push(cmd);
        }
    }
}

/// The command for `op`: `FCALL` of its function where the connection has
/// the library loaded (`loaded`), else `EVAL` of its source; or a native
/// `SET` for a plain acquire.
pub(crate) fn command(op: &Op<'_>, loaded: bool) -> Command {
    let mut command = Command::new();
    if let Op::Acquire {
        key,
        token,
        ttl_ms,
        holder_ttl: false,
    } = *op
    {
        let cmd = &mut command.0;
        cmd.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        return command;
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
        Op::Inspect { .. } => &INSPECT,
    };
    let cmd = &mut command.0;
    if loaded {
        cmd.arg("FCALL").arg(lua.function.as_str());
    } else {
        cmd.arg("EVAL").arg(lua.source.as_str());
    }
    match *op {
        Op::Acquire {
            key, token, ttl_ms, ..
        }
        | Op::Extend { key, token, ttl_ms } => {
            cmd.arg(1).arg(key).arg(token).arg(ttl_ms);
        }
        Op::Release { key, token } => {
            cmd.arg(1).arg(key).arg(token);
        }
        Op::AcquireReentrant {
            key,
            owner,
            hold,
            ttl_ms,
        } => {
            cmd.arg(1).arg(key).arg(owner).arg(ttl_ms).arg(hold);
        }
        Op::ExtendReentrant { key, owner, ttl_ms } => {
            cmd.arg(1).arg(key).arg(owner).arg(ttl_ms);
        }
        Op::ReleaseReentrant { key, owner, hold } => {
            cmd.arg(1).arg(key).arg(owner).arg(hold);
        }
        Op::AcquireMany {
            keys,
            token,
            ttl_ms,
        }
        | Op::ExtendMany {
            keys,
            token,
            ttl_ms,
        }
        | Op::AcquireRead {
            keys,
            token,
            ttl_ms,
        }
        | Op::ExtendRead {
            keys,
            token,
            ttl_ms,
        }
        | Op::AcquireWrite {
            keys,
            token,
            ttl_ms,
        } => {
            cmd.arg(keys.len()).arg(keys).arg(token).arg(ttl_ms);
        }
        Op::ReleaseMany { keys, token }
        | Op::ReleaseRead { keys, token }
        | Op::ReleaseWrite { keys, token } => {
            cmd.arg(keys.len()).arg(keys).arg(token);
        }
        Op::Inspect { keys } => {
            cmd.arg(keys.len()).arg(keys);
        }
        Op::AcquireFenced {
            key,
            fence_key,
            token,
            ttl_ms,
        } => {
            cmd.arg(2).arg(key).arg(fence_key).arg(token).arg(ttl_ms);
        }
        Op::FenceWriteBack {
            key,
            fence_key,
            token,
            fence,
        } => {
            cmd.arg(2).arg(key).arg(fence_key).arg(token).arg(fence);
        }
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_scripts_go_as_functions_of_a_versioned_library() {
        let op = Op::Release {
            key: "{r}:lock",
            token: "t",
        };
        let by_name = command(&op, true);
        let packed = String::from_utf8_lossy(&by_name.get_packed_command()).into_owned();
        assert!(packed.contains("FCALL") && packed.contains(RELEASE.function.as_str()));
        assert!(!packed.contains("redis.call"));
        let by_source = command(&op, false);
        let packed = String::from_utf8_lossy(&by_source.get_packed_command()).into_owned();
        assert!(packed.contains("EVAL") && packed.contains("redis.call"));
        assert!(LIBRARY.starts_with(&format!("#!lua name=redquorum_{}", &*VERSION)));
        for lua in ALL {
            assert!(LIBRARY.contains(&format!("'{}'", &*lua.function)));
        }
    }

    #[test]
    fn comments_are_stripped_and_code_kept() {
        let stripped = strip_comments("-- a comment\n  if x then -- keep\n\n  return 1\nend\n");
        assert_eq!(stripped, "if x then -- keep\nreturn 1\nend");
        for lua in [&ACQUIRE, &RELEASE_REENTRANT, &ACQUIRE_MANY] {
            assert!(!lua.source.contains("\n--"));
            assert!(lua.source.contains("redis.call"));
        }
    }
}
