//! A service replica that leads while elected and ends cleanly: run two or
//! three of these at once (as the replicas of a service would be), stop the
//! leader with Ctrl-C or `kill -TERM`, and watch another take over at once.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example service   # in two terminals
//! ```
//!
//! `REDQUORUM_ELECTION` names the election (default
//! `example:service:scheduler`). `test-support/tests/redis_examples.rs` runs two
//! of these and stops the leader with SIGTERM.
//!
//! The lifecycle, in the spirit of client-go's leader election callbacks:
//! `lead` campaigns (waiting in line), runs the work as leader
//! (*started leading*), and returns when the work ends or the leadership
//! is lost (*stopped leading*); the loop stands again. On SIGTERM the
//! leading future is dropped — the work with it — and `shutdown` releases
//! the leadership on every node before the process ends: the next replica,
//! woken by the release, leads within a round trip instead of a TTL.

use std::time::Duration;

use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::{LockError, Redlock, election::Election};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let replica = format!("replica-{}", std::process::id());
    let redlock = Redlock::connect(&urls).await?;
    let name = std::env::var("REDQUORUM_ELECTION")
        .unwrap_or_else(|_| "example:service:scheduler".to_owned());
    let election = Election::new(&redlock, &name)?;
    let options = AcquireOptions::new().label(&replica);

    let leading = async {
        loop {
            let replica = replica.as_str();
            let led = election
                .lead_with(
                    Duration::from_secs(10),
                    &options,
                    &LeaseOptions::new(),
                    |lease| async move {
                        // Started leading: the term fences what the work writes.
                        let term = lease.fence().expect("a leadership has a term");
                        println!("{replica}: leading, term {term}");
                        loop {
                            // The scheduler's work, one tick at a time.
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            println!("{replica}: tick (term {term})");
                        }
                    },
                )
                .await;
            // Stopped leading: lost (the work was dropped) or an error.
            match led {
                Err(LockError::Lost { .. }) => {
                    println!("{replica}: leadership lost; standing again")
                }
                Err(e) => {
                    eprintln!("{replica}: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(never) => match never {},
            }
        }
    };
    tokio::select! {
        () = leading => {}
        () = terminated() => println!("{replica}: stopping"),
    }
    // The leading future is dropped: its work stops. Last, before the
    // runtime ends: the leadership is released on every node.
    redlock.shutdown().await;
    println!("{replica}: resigned");
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
