//! The commands for each node operation: Lua scripts that make them atomic,
//! and a native `SET NX PX` for a plain acquire that needs nothing more
//! (Redis runs it in about half the time of the script).
//!
//! Scripts are loaded (`SCRIPT LOAD`) on every new connection before it
//! takes a call, and then sent as `EVALSHA`: the node neither receives nor
//! hashes the source on every call. A call is never retried: a `NOSCRIPT`
//! (after a `SCRIPT FLUSH`) fails that call like any error reply — a retry
//! would go out *after* calls made later on the same connection, so a
//! release could run before the acquire it follows — and the connection is
//! renewed, which loads the scripts again. One message per call keeps every
//! node's calls in the order they were made. Where `SCRIPT LOAD` is not
//! allowed (an ACL without it), that connection sends `EVAL` of the source
//! (comments stripped, once per process), which needs nothing loaded.
//!
//! Commands are built in reused buffers: a fresh `redis::Cmd` grows its two
//! vectors six times while an `EVALSHA` is written into it, on every call to
//! every node. A cleared one keeps its capacity, so once a few spares exist,
//! building a command allocates nothing.

use std::ops::Deref;
use std::sync::{LazyLock, Mutex, PoisonError};

use redis::Cmd;

use crate::node::Op;

/// A script's source without its comment lines, and its SHA-1, computed on
/// first use.
struct Lua {
    source: LazyLock<String>,
    sha: LazyLock<String>,
}

macro_rules! lua {
    ($name:ident, $file:literal) => {
        static $name: Lua = Lua {
            source: LazyLock::new(|| strip_comments(include_str!($file))),
            sha: LazyLock::new(|| redis::Script::new(&$name.source).get_hash().to_owned()),
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

lua!(ACQUIRE, "scripts/acquire.lua");
lua!(EXTEND, "scripts/extend.lua");
lua!(RELEASE, "scripts/release.lua");
lua!(ACQUIRE_REENTRANT, "scripts/acquire_reentrant.lua");
lua!(EXTEND_REENTRANT, "scripts/extend_reentrant.lua");
lua!(RELEASE_REENTRANT, "scripts/release_reentrant.lua");
lua!(ACQUIRE_MANY, "scripts/acquire_many.lua");
lua!(EXTEND_MANY, "scripts/extend_many.lua");
lua!(RELEASE_MANY, "scripts/release_many.lua");
lua!(ACQUIRE_FENCED, "scripts/acquire_fenced.lua");
lua!(FENCE_WRITEBACK, "scripts/fence_writeback.lua");

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

/// Every script, for `SCRIPT LOAD` on a new connection: (source, SHA-1).
pub(crate) fn all() -> impl Iterator<Item = (&'static str, &'static str)> {
    [
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
    ]
    .into_iter()
    .map(|lua| (lua.source.as_str(), lua.sha.as_str()))
}

/// The command for `op`: `EVALSHA` of its script where the connection has
/// them loaded (`loaded`), else `EVAL` of its source; or a native `SET`
/// for a plain acquire.
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
    };
    let cmd = &mut command.0;
    if loaded {
        cmd.arg("EVALSHA").arg(lua.sha.as_str());
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
        } => {
            cmd.arg(keys.len()).arg(keys).arg(token).arg(ttl_ms);
        }
        Op::ReleaseMany { keys, token } => {
            cmd.arg(keys.len()).arg(keys).arg(token);
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
    fn loaded_scripts_go_by_hash() {
        let op = Op::Release {
            key: "{r}:lock",
            token: "t",
        };
        let by_hash = command(&op, true);
        let packed = String::from_utf8_lossy(&by_hash.get_packed_command()).into_owned();
        assert!(packed.contains("EVALSHA") && packed.contains(RELEASE.sha.as_str()));
        assert!(!packed.contains("redis.call"));
        let by_source = command(&op, false);
        let packed = String::from_utf8_lossy(&by_source.get_packed_command()).into_owned();
        assert!(packed.contains("EVAL") && packed.contains("redis.call"));
        assert_eq!(all().count(), 11);
        assert!(all().all(|(_, sha)| sha.len() == 40));
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
