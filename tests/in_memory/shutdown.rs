//! `Redlock::shutdown` settles everything the client still holds: dropped
//! locks and keep-alives (whose aborted task drops its lock after the
//! shutdown began), leases, permits, read/write holds and leaderships —
//! including those owned by tasks still running, whose work sees the lease
//! lost. In-memory nodes; the same code runs against Redis.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, five};
use redquorum::{LockError, LockOptions, Semaphore, election::Election};

const TTL: Duration = Duration::from_secs(30);

fn keys_left(nodes: &[Arc<MemoryNode>]) -> usize {
    nodes.iter().map(|n| n.live_keys()).sum()
}

/// Before: 20 dropped keep-alives left 20 keys on every node for their TTL
/// (their tasks, aborted, dropped their locks after the shutdown had
/// closed the nodes to calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_keep_alives_leave_nothing_after_shutdown() {
    let (nodes, redlock) = five().await;
    let mut kept = Vec::new();
    for i in 0..20 {
        let lock = redlock.lock(&format!("ka:{i}"), TTL).await.unwrap();
        kept.push(lock.keep_alive().unwrap());
    }
    assert!(keys_left(&nodes) >= 60, "a quorum of each holds it");
    drop(kept);
    redlock.shutdown().await;
    assert_eq!(keys_left(&nodes), 0);
}

/// Every kind, held by tasks that run on: each released by the shutdown,
/// and each lease's work told it is lost — `run`'s, a semaphore's `run`,
/// `Election::lead`'s and a campaign's leadership (`lost()`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_every_kind_owned_by_running_tasks_are_released() {
    let (nodes, redlock) = five().await;
    let plain = redlock.lock("plain", TTL).await.unwrap();
    let fenced = redlock.lock_fenced("fenced", TTL).await.unwrap();
    let reentrant = redlock.lock_reentrant("re", TTL, "me").await.unwrap();
    let many = redlock.lock_many(&["m1", "m2"], TTL).await.unwrap();
    let read = redlock.read_lock("doc", TTL).await.unwrap();
    let write = redlock.write_lock("other-doc", TTL).await.unwrap();
    let permit = Semaphore::new(&redlock, "api", 2)
        .unwrap()
        .try_acquire(TTL)
        .await
        .unwrap();
    let election = Election::new(&redlock, "leader").unwrap();
    let leadership = election.campaign(TTL, &LockOptions::new()).await.unwrap();
    let leadership_lost = tokio::spawn(leadership.lost());
    let (started_tx, mut started) = tokio::sync::mpsc::channel(3);
    let worker = {
        let redlock = redlock.clone();
        let started_tx = started_tx.clone();
        tokio::spawn(async move {
            redlock
                .run("leased", TTL, |lease| async move {
                    let _ = started_tx.send(()).await;
                    lease.lost().await;
                })
                .await
        })
    };
    let permit_worker = {
        let permits = Semaphore::new(&redlock, "api", 2).unwrap();
        let started_tx = started_tx.clone();
        tokio::spawn(async move {
            permits
                .run(TTL, |lease| async move {
                    let _ = started_tx.send(()).await;
                    lease.lost().await;
                })
                .await
        })
    };
    let leader = {
        let election = Election::new(&redlock, "leader-2").unwrap();
        tokio::spawn(async move {
            election
                .lead(TTL, &LockOptions::new(), |lease| async move {
                    let _ = started_tx.send(()).await;
                    lease.lost().await;
                })
                .await
        })
    };
    for _ in 0..3 {
        started.recv().await.unwrap();
    }
    // Locks owned by a task that runs on past the shutdown.
    let owner = tokio::spawn(async move {
        let held = (
            plain, fenced, reentrant, many, read, write, permit, leadership,
        );
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(held);
    });
    assert!(keys_left(&nodes) > 0);
    redlock.shutdown().await;
    assert_eq!(keys_left(&nodes), 0, "keys left after shutdown");
    for (what, work) in [
        ("run", worker),
        ("Semaphore::run", permit_worker),
        ("Election::lead", leader),
    ] {
        let ended = tokio::time::timeout(Duration::from_secs(5), work)
            .await
            .unwrap_or_else(|_| panic!("{what}'s work was not told"))
            .unwrap();
        assert!(
            matches!(ended, Err(LockError::Lost { .. })),
            "{what}: {ended:?}"
        );
    }
    tokio::time::timeout(Duration::from_secs(5), leadership_lost)
        .await
        .expect("the leadership's lost() resolved")
        .unwrap();
    owner.abort();
}

/// Explicit releases racing a shutdown on another thread: each is either
/// found by the shutdown, which releases it itself, or handed to the nodes
/// before the shutdown closes them. Before, a release that left the table
/// of holds just before the shutdown looked, and made its calls just after
/// the nodes were closed, was refused and left its keys for their TTL.
/// The two sides start together, the releases after a varying spin, so that
/// the rounds sweep the ways they can interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_racing_a_shutdown_leave_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for round in 0..3_000u32 {
        let (nodes, redlock) = five().await;
        let mut locks = Vec::new();
        for i in 0..2 {
            locks.push(redlock.lock(&format!("race:{i}"), TTL).await.unwrap());
        }
        let go = Arc::new(AtomicBool::new(false));
        let spins = (round * 7) % 400;
        let releases = {
            let go = Arc::clone(&go);
            tokio::spawn(async move {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                for _ in 0..spins {
                    std::hint::spin_loop();
                }
                futures::future::join_all(locks.into_iter().map(|lock| lock.release())).await
            })
        };
        tokio::task::yield_now().await;
        go.store(true, Ordering::Release);
        redlock.shutdown().await;
        let released = releases.await.unwrap();
        // A release may still be refused (its thread preempted between
        // looking and calling while the shutdown released the lock and
        // closed the nodes): the keys are what must not be left.
        let refused = released.iter().filter(|r| r.is_err()).count();
        assert_eq!(
            keys_left(&nodes),
            0,
            "round {round}: keys left ({refused} releases refused)"
        );
    }
}
