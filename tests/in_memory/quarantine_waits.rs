//! Waiters through a quarantine of every node, on paused time: a waiting
//! call sleeps until a quorum could count again instead of trying round
//! after round, and is not woken by its own refused round's undo. Counts
//! the calls each node gets while every node is quarantined (a round is
//! an acquire and its undo, two calls; a semaphore's pass tries each
//! slot), with release notifications on and off, and the fencing counter
//! a fenced lock and a campaign's term reach. The same on real nodes:
//! tests/redis_restarts/.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, client_with};
use redquorum::AcquireOptions;
use redquorum::LockOptions;
use redquorum::RwLock;
use redquorum::{Redlock, Semaphore, election::Election};

/// How long every node stays quarantined.
const QUARANTINE: Duration = Duration::from_secs(4);
const TTL: Duration = Duration::from_secs(10);
/// The most rounds a wait through the quarantine may make.
const MAX_ROUNDS: u64 = 30;
/// Calls on one node past which a waiter spins: the test stops there
/// (on paused time a spinning waiter would never let the clock move).
const SPIN: u64 = 2_000;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fenced,
    Write,
    Permit,
    Campaign,
}

/// What one waiter did through the quarantine.
#[derive(Debug)]
struct Through {
    /// Calls on node 0 while every node was quarantined.
    calls: u64,
    /// The fence (or term) it was granted with, if fenced.
    counter: Option<u64>,
}

async fn through(kind: Kind, notify: bool) -> Through {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    for n in &nodes {
        n.report_releases(notify);
        n.quarantine(true);
    }
    let redlock = client_with(&nodes, Redlock::builder().notify_waiters(notify)).await;
    let start = nodes[0].applied();
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let wait = AcquireOptions::new().wait(Duration::from_secs(60));
            match kind {
                Kind::Plain => redlock
                    .lock_with("job", TTL, &wait.into())
                    .await
                    .map(|l| l.fence()),
                Kind::Fenced => {
                    let options = LockOptions::from(wait).fenced();
                    redlock
                        .lock_with("job", TTL, &options)
                        .await
                        .map(|l| l.fence())
                }
                Kind::Write => RwLock::new(&redlock, "doc")
                    .unwrap()
                    .write_with(TTL, &wait)
                    .await
                    .map(|l| l.fence()),
                Kind::Permit => {
                    let semaphore = Semaphore::new(&redlock, "api", 2).unwrap();
                    semaphore.acquire_with(TTL, &wait).await.map(|p| {
                        std::mem::forget(p);
                        None
                    })
                }
                Kind::Campaign => {
                    let election = Election::new(&redlock, "leader").unwrap();
                    let leadership = election.campaign(TTL).await?;
                    let term = leadership.term();
                    std::mem::forget(leadership);
                    Ok(Some(term))
                }
            }
        })
    };
    tokio::select! {
        biased;
        () = nodes[0].wait_until(|n| n.applied() > start + SPIN) => {
            panic!("{kind:?} (notifications {notify}): {SPIN} calls on one node within the quarantine")
        }
        () = tokio::time::sleep(QUARANTINE) => {}
    }
    let calls = nodes[0].applied() - start;
    println!("{kind:?} (notifications {notify}): {calls} calls on one node in the quarantine");
    for n in &nodes {
        n.quarantine(false);
    }
    let counter = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: not granted once the quarantine ended"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    Through { calls, counter }
}

/// The bound of the review: at most [`MAX_ROUNDS`] rounds through a 4 s
/// quarantine, notifications costing at most a fifth more than polling.
/// (A fenced lock's counter and a campaign's term are floored at the
/// node's clock, docs/fencing.md §8: their values no longer count rounds;
/// the calls do.)
#[tokio::test(start_paused = true)]
async fn a_waiter_sleeps_through_a_quarantine_of_every_node() {
    for kind in [
        Kind::Plain,
        Kind::Fenced,
        Kind::Write,
        Kind::Permit,
        Kind::Campaign,
    ] {
        let quiet = through(kind, false).await;
        let notified = through(kind, true).await;
        println!("{kind:?}: polling {quiet:?}, notified {notified:?}");
        // A round is two calls; a semaphore's pass tries its two slots.
        let per_round = if matches!(kind, Kind::Permit) { 4 } else { 2 };
        for (how, run) in [("polling", &quiet), ("notified", &notified)] {
            let rounds = run.calls.div_ceil(per_round);
            assert!(
                rounds <= MAX_ROUNDS,
                "{kind:?} {how}: {rounds} rounds through a {QUARANTINE:?} quarantine ({run:?})"
            );
            if matches!(kind, Kind::Fenced | Kind::Campaign) {
                assert!(
                    run.counter.is_some_and(|c| c > 0),
                    "{kind:?} {how}: {run:?}"
                );
            }
        }
        assert!(
            notified.calls * 5 <= quiet.calls * 6 + per_round,
            "{kind:?}: notified {} calls, polling {}",
            notified.calls,
            quiet.calls
        );
    }
}
