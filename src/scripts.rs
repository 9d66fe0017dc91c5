//! The Lua scripts that make each node operation atomic.
//!
//! Each script is hashed once per process; calls go by SHA (`EVALSHA`) and
//! fall back to `EVAL` — which also re-caches the script — when the node
//! answers `NOSCRIPT` (after `SCRIPT FLUSH` or a restart).

use std::sync::LazyLock;

use redis::Script;

use crate::node::Op;

/// A script's source and its SHA-1, computed on first use.
struct Lua {
    source: &'static str,
    script: LazyLock<Script>,
}

macro_rules! lua {
    ($name:ident, $file:literal) => {
        static $name: Lua = Lua {
            source: include_str!($file),
            script: LazyLock::new(|| Script::new(include_str!($file))),
        };
    };
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

/// How a script is called: by SHA first, by source after `NOSCRIPT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Sha,
    Source,
}

/// The `EVALSHA`/`EVAL` command for `op`.
pub(crate) fn command(op: &Op<'_>, call: Call) -> redis::Cmd {
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
    let mut cmd = match call {
        Call::Sha => redis::cmd("EVALSHA"),
        Call::Source => redis::cmd("EVAL"),
    };
    match call {
        Call::Sha => cmd.arg(lua.script.get_hash()),
        Call::Source => cmd.arg(lua.source),
    };
    match *op {
        Op::Acquire { key, token, ttl_ms } | Op::Extend { key, token, ttl_ms } => {
            cmd.arg(1).arg(key).arg(token).arg(ttl_ms);
        }
        Op::Release { key, token } => {
            cmd.arg(1).arg(key).arg(token);
        }
        Op::AcquireReentrant { key, owner, ttl_ms }
        | Op::ExtendReentrant { key, owner, ttl_ms } => {
            cmd.arg(1).arg(key).arg(owner).arg(ttl_ms);
        }
        Op::ReleaseReentrant { key, owner } => {
            cmd.arg(1).arg(key).arg(owner);
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
    cmd
}
