//! A nightly job on three replicas whose cron fires a few seconds apart:
//! it runs once per night, not once per replica.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example cron
//! ```
//!
//! A lock alone only keeps two runs from overlapping: the job takes a
//! second, so a replica that fires 2.5 s late finds the lock free again and
//! runs the same night twice. `LockOptions::hold_at_least` keeps the slot
//! taken until the night is over (ShedLock's `lockAtLeastFor`), however
//! soon the job ends and even if its replica dies: the grant marks the
//! period with a key of its own, so the lock's TTL (10 s here) stays within
//! `max_ttl` (60 s by default) while the period is 23 h. The late replicas
//! find it taken. Exits non-zero if the job ran more than once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
    // Tonight's slot: one name per night, held for the rest of the slot.
    let slot = format!("example:cron:nightly-report:{}", std::process::id());
    let options = LockOptions::new().hold_at_least(Duration::from_secs(23 * 3600));
    let runs = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for (replica, late_ms) in [("replica-a", 0), ("replica-b", 2500), ("replica-c", 4000)] {
        // Each replica is its own process in production; here, its own client.
        let redlock = Redlock::connect(&urls).await?;
        let (slot, options, runs) = (slot.clone(), options.clone(), Arc::clone(&runs));
        replicas.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(late_ms)).await;
            let ran = redlock
                .run_with(
                    &slot,
                    Duration::from_secs(10),
                    &options,
                    &LeaseOptions::new(),
                    |_lease| async {
                        println!("{replica}: running the nightly report");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        runs.fetch_add(1, Ordering::SeqCst);
                    },
                )
                .await;
            match ran {
                Ok(()) => println!("{replica}: done; the slot stays taken for 23 h"),
                Err(LockError::Taken { .. }) => {
                    println!("{replica}: tonight's report already ran elsewhere")
                }
                Err(e) => println!("{replica}: {e}"),
            }
            redlock.shutdown().await;
        }));
    }
    for replica in replicas {
        replica.await?;
    }
    let runs = runs.load(Ordering::SeqCst);
    println!("the report ran {runs} time(s)");
    if runs != 1 {
        return Err(format!("ran {runs} times, not once").into());
    }
    Ok(())
}
