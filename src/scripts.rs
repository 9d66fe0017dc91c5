//! The Lua scripts that make each node operation atomic.
//!
//! Each script is hashed once per process; calls go by SHA (`EVALSHA`) and
//! fall back to `EVAL` — which also re-caches the script — when the node
//! answers `NOSCRIPT` (after `SCRIPT FLUSH` or a restart).

use std::sync::LazyLock;

use redis::Script;

use crate::node::Op;

const ACQUIRE_SRC: &str = include_str!("scripts/acquire.lua");
const EXTEND_SRC: &str = include_str!("scripts/extend.lua");
const RELEASE_SRC: &str = include_str!("scripts/release.lua");

// Hashed on first use, once per process.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SRC));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SRC));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SRC));

/// How a script is called: by SHA first, by source after `NOSCRIPT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Sha,
    Source,
}

/// The packed `EVALSHA`/`EVAL` command for `op`.
pub(crate) fn command(op: &Op<'_>, call: Call) -> redis::Cmd {
    let (script, source) = match op {
        Op::Acquire { .. } => (&*ACQUIRE, ACQUIRE_SRC),
        Op::Extend { .. } => (&*EXTEND, EXTEND_SRC),
        Op::Release { .. } => (&*RELEASE, RELEASE_SRC),
    };
    let mut cmd = match call {
        Call::Sha => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash());
            cmd
        }
        Call::Source => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(source);
            cmd
        }
    };
    match *op {
        Op::Acquire { key, token, ttl_ms } | Op::Extend { key, token, ttl_ms } => {
            cmd.arg(1).arg(key).arg(token).arg(ttl_ms);
        }
        Op::Release { key, token } => {
            cmd.arg(1).arg(key).arg(token);
        }
    }
    cmd
}
