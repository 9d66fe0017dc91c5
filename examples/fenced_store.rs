//! Fencing tokens stop a holder that paused past its lease.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example fenced_store
//! ```
//!
//! A small store keeps the highest fencing token it has seen and rejects
//! writes carrying a lower one. Holder A takes the lock, then "pauses" (a GC
//! pause, a stalled VM) past its validity; holder B takes the lock with a
//! larger token and writes; A wakes up, still believing it holds the lock,
//! and its write is rejected. Exits non-zero if the stale write gets through.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redquorum::Redlock;

/// The protected resource: accepts a write only with a token at least as
/// large as every token it has seen.
#[derive(Debug, Default)]
struct FencedStore {
    highest: u64,
    value: String,
}

impl FencedStore {
    fn write(&mut self, token: u64, value: &str) -> Result<(), String> {
        if token < self.highest {
            return Err(format!(
                "rejected: token {token} is older than {}",
                self.highest
            ));
        }
        self.highest = token;
        self.value = value.to_owned();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let store = Arc::new(Mutex::new(FencedStore::default()));
    // The counter persists (no TTL): tokens keep increasing across runs.
    let resource = "example:ledger";
    let ttl = Duration::from_millis(500);

    let a = Redlock::connect(&urls).await?;
    let b = Redlock::connect(&urls).await?;

    let lock_a = a
        .lock_with(resource, ttl, &redquorum::LockOptions::new().fenced())
        .await?;
    let token_a = lock_a.fence().expect("fenced");
    println!("A holds {resource} with token {token_a}; A pauses...");
    tokio::time::sleep(ttl + Duration::from_millis(200)).await; // the pause
    println!(
        "A's lock is valid: {} (A does not check)",
        lock_a.is_valid()
    );

    let lock_b = b
        .lock_with(
            resource,
            ttl,
            &redquorum::LockOptions::new()
                .fenced()
                .wait(Duration::from_secs(5)),
        )
        .await?;
    let token_b = lock_b.fence().expect("fenced");
    println!("B holds {resource} with token {token_b}");
    store.lock().unwrap().write(token_b, "written by B")?;
    println!("B wrote with token {token_b}: accepted");

    let stale = store.lock().unwrap().write(token_a, "written by A");
    match &stale {
        Ok(()) => println!("A wrote with token {token_a}: ACCEPTED (fencing failed)"),
        Err(e) => println!("A wrote with token {token_a}: {e}"),
    }
    lock_b.release().await?;
    drop(lock_a);
    println!("store holds {:?}", store.lock().unwrap().value);
    if stale.is_ok() {
        return Err("a stale holder's write got through".into());
    }
    Ok(())
}
