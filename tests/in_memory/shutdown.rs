//! `Redlock::shutdown` settles everything the client still holds: dropped
//! locks and keep-alives (whose aborted task drops its lock after the
//! shutdown began), leases, permits, read/write holds and leaderships —
//! including those owned by tasks still running, whose work sees the lease
//! lost. In-memory nodes; the same code runs against Redis.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, Until, five};
use redquorum::AcquireOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
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
    let fenced = redlock
        .lock_with("fenced", TTL, &redquorum::LockOptions::new().fenced())
        .await
        .unwrap();
    let reentrant = ReentrantLock::new(&redlock, "re", "me")
        .unwrap()
        .lock(TTL)
        .await
        .unwrap();
    let many = redlock.lock_many(&["m1", "m2"], TTL).await.unwrap();
    let read = RwLock::new(&redlock, "doc")
        .unwrap()
        .read(TTL)
        .await
        .unwrap();
    let write = RwLock::new(&redlock, "other-doc")
        .unwrap()
        .write(TTL)
        .await
        .unwrap();
    let permit = Semaphore::new(&redlock, "api", 2)
        .unwrap()
        .try_acquire(TTL)
        .await
        .unwrap();
    let election = Election::new(&redlock, "leader").unwrap();
    let leadership = election.campaign(TTL).await.unwrap();
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
                .lead(TTL, |lease| async move {
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

/// What the tasks of [`acquisitions_racing_a_shutdown_are_settled`] got
/// and keep: a task that runs on keeps whatever it was granted.
type Kept = Arc<std::sync::Mutex<Vec<Box<dyn std::any::Any + Send>>>>;

/// `outcome`'s hold kept (as a task running on would), its error returned.
fn keep<T: Send + 'static>(kept: &Kept, outcome: Result<T, LockError>) -> Result<(), LockError> {
    outcome.map(|held| kept.lock().unwrap().push(Box::new(held)))
}

/// Acquisitions in flight when `shutdown` is called, and waiters between
/// two attempts (a writer's intent and places in line on the nodes), of
/// every kind: each is undone (or, granted, released) before `shutdown`
/// returns, its caller gets [`LockError::ShutDown`] at once (a campaign
/// that would wait forever too), and a call made after is refused alike.
/// The nodes are frozen while the acquisitions are made, so that every one
/// is in flight when the shutdown begins; they are thawed once it has
/// begun, and apply every acquire in flight before the shutdown's release.
/// Before: the acquires in flight were granted after the shutdown had
/// released the client's holds — their locks, owned by tasks that run on,
/// kept their keys for the TTL — and the waiters kept waiting (their
/// attempts refused as `NotConnected`), their places in line left. Locks
/// held at least a while (`LockOptions::hold_at_least`) keep their keys as
/// promised.
#[tokio::test]
async fn acquisitions_racing_a_shutdown_are_settled() {
    let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
    let redlock = redquorum::Redlock::builder()
        .custom_nodes(
            nodes
                .iter()
                .map(|n| Arc::clone(n) as Arc<dyn redquorum::node::Node>),
        )
        .node_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let bound = Duration::from_secs(10);
    // 'static: the tasks borrow them.
    let wait: &'static AcquireOptions = Box::leak(Box::new(
        AcquireOptions::new().wait(Duration::from_secs(600)),
    ));
    let at_least: &'static LockOptions = Box::leak(Box::new(LockOptions::new().hold_at_least(TTL)));
    let plain_wait: &'static LockOptions = Box::leak(Box::new(wait.clone().into()));
    let kept: Kept = Arc::default();
    let mut tasks: Vec<(&str, tokio::task::JoinHandle<Result<(), LockError>>)> = Vec::new();
    macro_rules! task {
        ($what:expr, |$r:ident| $body:expr) => {{
            let ($r, kept) = (redlock.clone(), Arc::clone(&kept));
            let handle = tokio::spawn(async move { keep(&kept, $body.await) });
            tasks.push(($what, handle));
        }};
    }
    // Locks held at least a while: one released, one held at the
    // shutdown; both keys stay.
    redlock
        .lock_with("promised", TTL, at_least)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let promised = redlock
        .lock_with("promised-2", TTL, at_least)
        .await
        .unwrap();
    // Holders, and waiters for what they hold: parked between attempts.
    let reader = RwLock::new(&redlock, "doc")
        .unwrap()
        .read(TTL)
        .await
        .unwrap();
    let held = redlock.lock("held", TTL).await.unwrap();
    let permit = Semaphore::new(&redlock, "api", 1)
        .unwrap()
        .try_acquire(TTL)
        .await
        .unwrap();
    let leadership = Election::new(&redlock, "leader")
        .unwrap()
        .campaign(TTL)
        .await
        .unwrap();
    task!("waiting writer", |r| RwLock::new(&r, "doc")
        .unwrap()
        .write_with(TTL, wait));
    task!("waiting lock", |r| r.lock_with("held", TTL, plain_wait));
    task!("waiting permit", |r| Semaphore::new(&r, "api", 1)
        .unwrap()
        .acquire_with(TTL, wait));
    task!("waiting candidate", |r| Election::new(&r, "leader")
        .unwrap()
        .campaign(TTL));
    for line in [
        "{held}:lock:line",
        "{doc}:rw:line",
        "{api}:permits:line",
        "{leader}:lock:line",
    ] {
        for node in &nodes {
            node.until(bound, line, |n| n.waiting(line) == 1).await;
        }
    }
    // Acquisitions of every kind, in flight on frozen nodes.
    for node in &nodes {
        node.freeze();
    }
    let before: usize = redlock
        .nodes()
        .iter()
        .map(|n| (n.name(), n.in_flight()))
        .map(|(_, calls)| calls)
        .sum();
    task!("lock", |r| r.lock("plain", TTL));
    task!("fenced", |r| r.lock_with(
        "fenced",
        TTL,
        &redquorum::LockOptions::new().fenced()
    ));
    task!("reentrant", |r| ReentrantLock::new(&r, "re", "me")
        .unwrap()
        .lock(TTL));
    task!("many", |r| r.lock_many(&["m1", "m2"], TTL));
    task!("read", |r| RwLock::new(&r, "doc-2").unwrap().read(TTL));
    task!("write", |r| RwLock::new(&r, "doc-3").unwrap().write(TTL));
    task!("permit", |r| Semaphore::new(&r, "api-2", 2)
        .unwrap()
        .acquire(TTL));
    task!("campaign", |r| Election::new(&r, "leader-2")
        .unwrap()
        .campaign(TTL));
    task!("waiting lock in flight", |r| r
        .lock_with("plain-2", TTL, plain_wait));
    task!("hold_at_least", |r| r.lock_with("kept", TTL, at_least));
    // Each of the ten makes its first round on every node.
    tokio::time::timeout(bound, async {
        while redlock
            .nodes()
            .iter()
            .map(|n| (n.name(), n.in_flight()))
            .map(|(_, calls)| calls)
            .sum::<usize>()
            < before + 50
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("every acquisition in flight");
    // The shutdown begins (this runtime has one thread: it runs until it
    // waits for the nodes), then the nodes apply what they hold back.
    let shutdown = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.shutdown().await }
    });
    tokio::task::yield_now().await;
    for node in &nodes {
        node.thaw();
    }
    tokio::time::timeout(bound, shutdown)
        .await
        .expect("shutdown returned")
        .unwrap();
    // Their keys and their periods' marks; the mark of the one in flight
    // (`kept`, never granted to its caller) is taken back.
    let promises = |nodes: &[Arc<MemoryNode>]| {
        let promised = [
            "{promised}:lock",
            "{promised-2}:lock",
            "{promised}:period",
            "{promised-2}:period",
        ];
        for node in nodes {
            for key in promised {
                assert!(node.holder(key).is_some(), "{key} kept");
            }
        }
        promised.len() * nodes.len()
    };
    assert_eq!(
        keys_left(&nodes),
        promises(&nodes),
        "keys left when shutdown returned"
    );
    for (what, task) in tasks {
        let outcome = tokio::time::timeout(bound, task)
            .await
            .unwrap_or_else(|_| panic!("{what} still running after shutdown"))
            .unwrap();
        assert!(
            matches!(outcome, Err(LockError::ShutDown)),
            "{what}: {outcome:?}"
        );
    }
    let later = redlock.lock("later", TTL).await;
    assert!(matches!(later, Err(LockError::ShutDown)), "{later:?}");
    assert_eq!(
        keys_left(&nodes),
        promises(&nodes),
        "keys left after the callers returned"
    );
    drop((reader, held, permit, leadership, promised, kept));
}
