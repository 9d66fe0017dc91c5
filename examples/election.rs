//! Leader election: three candidates in one process (as three hosts would
//! be), each leading for a moment and resigning; an observer prints every
//! change of leader with its term.
//!
//! ```text
//! scripts/nodes up
//! REDQUORUM_NODES=$(scripts/nodes urls) cargo run --example election
//! ```
//!
//! Each leader gets a term larger than every earlier leader's: what it would
//! pass to the storage it writes to (docs/election.md, docs/fencing.md).

use std::time::Duration;

use futures::StreamExt;
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::Redlock;
use redquorum::election::{Election, LeaderState};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(v) => v.split(',').map(str::to_owned).collect(),
        Err(_) => (1..=5)
            .map(|i| format!("redis://127.0.0.1:700{i}"))
            .collect(),
    };
    let name = format!("example:scheduler:{}", std::process::id());

    // The observer: every change, pushed by releases, polled otherwise.
    let watcher = Redlock::connect(&urls).await?;
    let election = Election::new(&watcher, &name)?;
    let mut changes = Box::pin(election.observe());
    let observer = tokio::spawn(async move {
        // It samples: a first leader that comes and goes between two reads
        // may go unseen; every hand-over after a resignation is seen.
        while let Some(state) = changes.next().await {
            match state {
                LeaderState::Leading(leader) => {
                    println!(
                        "observer: term {} led by {}",
                        leader.term,
                        leader.label.as_deref().unwrap_or("?")
                    );
                }
                LeaderState::Vacant => println!("observer: no leader"),
                _ => println!("observer: unknown (too few nodes answered)"),
            }
        }
    });

    // Three candidates, two terms each.
    let mut candidates = Vec::new();
    for host in ["host-a", "host-b", "host-c"] {
        let redlock = Redlock::connect(&urls).await?;
        let name = name.clone();
        candidates.push(tokio::spawn(async move {
            let election = Election::new(&redlock, &name).expect("a name");
            let options = AcquireOptions::new().label(host);
            for _ in 0..2 {
                let term = election
                    .lead_with(
                        Duration::from_secs(5),
                        &options,
                        &LeaseOptions::new(),
                        |lease| async move {
                            // The leader's work, fenced by its term.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            lease.fence().expect("a term")
                        },
                    )
                    .await
                    .expect("led");
                println!("{host}: led term {term}, resigned");
            }
        }));
    }
    for candidate in candidates {
        candidate.await?;
    }
    observer.abort();
    println!("at the end: {:?}", election.leader().await?);
    watcher.shutdown().await;
    Ok(())
}
