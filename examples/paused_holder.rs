//! A holder process that pauses between checking its lock and writing, and
//! a store on Redis that fencing protects from it.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example paused_holder
//! # in another terminal, once it says "writing": kill -STOP <pid>; wait 3 s;
//! # take the lock elsewhere (redquorum exec --fence example:paused -- …); kill -CONT <pid>
//! ```
//!
//! The process takes a fenced lock, checks that it is still valid, and
//! writes a second later — the moment a GC pause, a stalled VM or a
//! `SIGSTOP` can land in. The store, a key on the first node, keeps the
//! highest fence it accepted and refuses a write with a lower one (one
//! script: compare and set at once). If another process took the lock
//! during the pause and wrote with its larger fence, this late write is
//! rejected: the lock alone cannot stop it, the fence does. It prints
//! `write with fence F: accepted` or `rejected (highest H)`.
//!
//! `REDQUORUM_RESOURCE` names the lock (default `example:paused`), whose
//! store is the key `RESOURCE:store`. `test-support/tests/redis_examples.rs`
//! runs it under `SIGSTOP`.

use std::io::Write;
use std::time::Duration;

use redquorum::Redlock;

/// The fenced store's write: accepted when `ARGV[1]` (the fence) is at
/// least the highest accepted before; returns `{accepted, highest before}`.
pub const STORE_WRITE: &str = "local highest = tonumber(redis.call('GET', KEYS[1]) or '0') \
    local fence = tonumber(ARGV[1]) \
    if fence < highest then return {0, highest} end \
    redis.call('SET', KEYS[1], ARGV[1]) \
    return {1, highest}";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let resource =
        std::env::var("REDQUORUM_RESOURCE").unwrap_or_else(|_| "example:paused".to_owned());
    let redlock = Redlock::connect(&urls).await?;
    let store = redis::Client::open(urls[0].as_str())?;
    let mut store = store.get_multiplexed_async_connection().await?;

    let lock = redlock
        .lock_with(
            &resource,
            Duration::from_secs(2),
            &redquorum::LockOptions::new().fenced(),
        )
        .await?;
    let fence = lock.fence().expect("a fenced lock has a fence");
    say(&format!("holding {resource} with fence {fence}"));
    if lock.is_valid() {
        say("checked: valid; writing");
        // The work before the write: where a pause lands.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (accepted, highest): (u8, u64) = redis::Script::new(STORE_WRITE)
            .key(format!("{resource}:store"))
            .arg(fence)
            .invoke_async(&mut store)
            .await?;
        if accepted == 1 {
            say(&format!("write with fence {fence}: accepted"));
        } else {
            say(&format!(
                "write with fence {fence}: rejected (highest {highest})"
            ));
        }
    }
    // Released if still ours; a lock that expired meanwhile releases nothing.
    let _ = lock.release().await;
    redlock.shutdown().await;
    Ok(())
}

/// One line on stdout, at once (a test reads it through a pipe).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
