//! Work under an auto-extended lease, and a watchdog on a held lock.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example lease
//! ```
//!
//! The job runs for longer than its TTL: the lease is extended every third of
//! the TTL while it works, and released when it returns. Were the lease lost
//! (a majority of nodes unreachable past the deadline), the job's future would
//! be dropped at once and `run` would return `LockError::Lost`.

use std::time::{Duration, Instant};

use redquorum::LeaseOptions;
use redquorum::{LockError, LockOptions, Redlock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let redlock = Redlock::connect(&urls).await?;
    let ttl = Duration::from_secs(1);

    // 1. run(): a job three times as long as its TTL, with a fencing token.
    let started = Instant::now();
    let options = LockOptions::new().fenced().wait(Duration::from_secs(10));
    let rows = redlock
        .run_with(
            "example:nightly-report",
            ttl,
            &options,
            &LeaseOptions::new(),
            |lease| async move {
                println!(
                    "holding {} with fencing token {:?}",
                    lease.resource(),
                    lease.fence()
                );
                let mut rows = 0;
                for step in 1..=6 {
                    tokio::time::sleep(Duration::from_millis(500)).await; // one batch
                    rows += 100;
                    println!(
                        "  step {step}: {rows} rows, lease valid for another {:?}",
                        lease.remaining()
                    );
                }
                rows
            },
        )
        .await?;
    println!(
        "job done: {rows} rows in {:?} under a {ttl:?} lease",
        started.elapsed()
    );

    // 2. keep_alive(): a watchdog on a lock you already hold.
    let lock = redlock.lock("example:migration", ttl).await?;
    let watchdog = lock.keep_alive()?;
    let lost = watchdog.lease().lost();
    tokio::select! {
        _ = lost => return Err(LockError::Lost { resource: "example:migration".into() }.into()),
        _ = tokio::time::sleep(Duration::from_millis(2500)) => {
            println!("migration step done; lease still valid: {}", watchdog.lease().is_valid());
        }
    }
    watchdog.release().await?;
    println!("released");
    Ok(())
}
