//! Cancelling an operation never leaves a key behind, and the public futures
//! are `Send`. Runs on in-memory nodes whose answers the test holds back at
//! will (see `support/memory.rs`); the same coordinator code runs against
//! Redis in the other suites.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, Until};
use crate::support::settled;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::node::Node;
use redquorum::{Lock, Redlock, Retry, Semaphore};

const BOUND: Duration = Duration::from_secs(5);
const KEY: &str = "{job}:lock";

async fn cluster() -> (Vec<Arc<MemoryNode>>, Redlock) {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        // Long enough that only the test decides when a round ends.
        .node_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    (nodes, redlock)
}

#[tokio::test]
async fn dropping_lock_mid_round_releases_what_it_set() {
    let (nodes, redlock) = cluster().await;
    for n in &nodes[2..] {
        n.freeze(); // three nodes hold their answers: the round stays open
    }
    let lock = redlock.lock("job", Duration::from_secs(60));
    tokio::select! {
        r = lock => panic!("round decided with three nodes silent: {r:?}"),
        _ = async {
            nodes[0].until(BOUND, "key set", |n| n.holder(KEY).is_some()).await;
            nodes[1].until(BOUND, "key set", |n| n.holder(KEY).is_some()).await;
        } => {}
    }
    // The lock future is dropped: its keys must go, on the answering nodes
    // now and on the silent ones once they apply the queued acquire.
    for n in &nodes[..2] {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
    for n in &nodes[2..] {
        n.thaw();
    }
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
    // And the resource is free.
    let lock = redlock
        .try_lock("job", Duration::from_secs(60))
        .await
        .unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn dropping_release_mid_round_still_releases() {
    let (nodes, redlock) = cluster().await;
    let lock = redlock.lock("job", Duration::from_secs(60)).await.unwrap();
    let token = lock.token().to_owned();
    for n in &nodes {
        n.until(BOUND, "key set", |n| {
            n.holder(KEY).as_deref() == Some(&token)
        })
        .await;
        n.freeze();
    }
    let release = lock.release();
    tokio::select! {
        r = release => panic!("release confirmed by closed nodes: {r:?}"),
        _ = tokio::task::yield_now() => {}
    }
    for n in &nodes {
        n.thaw();
    }
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
}

#[tokio::test]
async fn dropping_a_lock_releases_it() {
    let (nodes, redlock) = cluster().await;
    let lock = redlock.lock("job", Duration::from_secs(60)).await.unwrap();
    drop(lock);
    for n in &nodes {
        n.until(BOUND, "key released", |n| n.holder(KEY).is_none())
            .await;
    }
}

/// Every public future can move between threads.
#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let redlock: Option<Redlock> = None;
    if let Some(r) = redlock {
        send(&r.lock("r", Duration::from_secs(1)));
        send(&r.try_lock("r", Duration::from_secs(1)));
        send(&r.lock_with(
            "r",
            Duration::from_secs(1),
            &redquorum::LockOptions::new().wait(Duration::from_secs(1)),
        ));
        send(&Redlock::connect(["redis://127.0.0.1:7001"]));
        send(&Redlock::builder().build());
        let semaphore = Semaphore::new(&r, "s", 3).unwrap();
        send(&semaphore.try_acquire(Duration::from_secs(1)));
        send(&semaphore.acquire(Duration::from_secs(1)));
        send(&semaphore.acquire_with(Duration::from_secs(1), &redquorum::AcquireOptions::new()));
        send(&semaphore.run(Duration::from_secs(1), |_| async {}));
        let options = redquorum::AcquireOptions::new();
        let doc = RwLock::new(&r, "r").unwrap();
        send(&doc.read(Duration::from_secs(1)));
        send(&doc.write(Duration::from_secs(1)));
        send(&doc.read_with(Duration::from_secs(1), &options));
        send(&doc.write_with(Duration::from_secs(1), &options));
        send(&doc.try_read(Duration::from_secs(1)));
        send(&doc.try_write(Duration::from_secs(1)));
        send(&doc.run_read(Duration::from_secs(1), |_| async {}));
        send(&doc.inspect());
        let job = redquorum::ReentrantLock::new(&r, "job", "me").unwrap();
        send(&job.lock(Duration::from_secs(1)));
        send(&r.nodes().probe(Duration::from_secs(1)));
        send(&r.inspect("r"));
        send(&r.shutdown());
    }
    let lock: Option<Lock> = None;
    if let Some(mut l) = lock {
        send(&l.extend(Duration::from_secs(1)));
        send(&l.release());
    }
    fn sync<T: Send + Sync>() {}
    sync::<Redlock>();
    sync::<Lock>();
    sync::<redquorum::LockError>();
    sync::<redquorum::Semaphore>();
    sync::<redquorum::Permit>();
    sync::<redquorum::RwLock>();
    sync::<redquorum::ReentrantLock>();
}

/// A client over five memory nodes that tries once (refusals come back at
/// once) and never times a node out on its own.
async fn patient_cluster() -> (Vec<Arc<MemoryNode>>, Redlock) {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        .node_timeout(Duration::from_secs(30))
        .retry(Retry::none())
        .build()
        .await
        .unwrap();
    (nodes, redlock)
}

/// How many holds each node counts for the reentrant lock on "job".
fn holds(nodes: &[Arc<MemoryNode>]) -> Vec<usize> {
    nodes.iter().map(|n| n.holds(KEY)).collect()
}

/// The bug: a reentrant `release()` cancelled after its requests left went
/// on in the background *and* `Drop` sent a second decrement, giving back
/// the outer hold too — and another owner got the lock.
#[tokio::test]
async fn cancelled_reentrant_release_gives_back_one_hold() {
    let (nodes, redlock) = patient_cluster().await;
    let ttl = Duration::from_secs(60);
    let outer = ReentrantLock::new(&redlock, "job", "A")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let inner = ReentrantLock::new(&redlock, "job", "A")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    settled(&redlock).await;
    assert_eq!(holds(&nodes), [2; 5]);
    // Cancelled after its first poll: the requests have left.
    let mut release = Box::pin(inner.release());
    assert!(futures::poll!(&mut release).is_pending());
    drop(release);
    settled(&redlock).await;
    assert_eq!(holds(&nodes), [1; 5], "exactly one hold given back");
    assert!(outer.is_valid());
    let other = ReentrantLock::new(&redlock, "job", "B")
        .unwrap()
        .lock(ttl)
        .await;
    assert!(other.is_err(), "another owner got a lock A still holds");
    outer.release().await.unwrap();
    settled(&redlock).await;
    assert_eq!(holds(&nodes), [0; 5]);
}

/// The same through a watchdog: `KeepAlive::release` cancelled at once.
#[tokio::test]
async fn cancelled_keep_alive_release_gives_back_one_hold() {
    let (nodes, redlock) = patient_cluster().await;
    let ttl = Duration::from_secs(60);
    let outer = ReentrantLock::new(&redlock, "job", "A")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let inner = ReentrantLock::new(&redlock, "job", "A")
        .unwrap()
        .lock(ttl)
        .await
        .unwrap();
    let watchdog = inner.keep_alive().unwrap();
    // Cancelled wherever its polls land: stopping the watchdog, then the
    // release of the lock it hands back.
    let mut release = Box::pin(watchdog.release());
    for _ in 0..3 {
        let _ = futures::poll!(&mut release);
        tokio::task::yield_now().await;
    }
    drop(release);
    settled(&redlock).await;
    assert_eq!(holds(&nodes), [1; 5], "exactly one hold given back");
    outer.release().await.unwrap();
    settled(&redlock).await;
    assert_eq!(holds(&nodes), [0; 5]);
}

/// Every acquiring operation, cancelled at zero, after its first poll, and
/// mid-round under a frozen majority, leaves nothing on any node — and a
/// reentrant one leaves exactly the holds its owner still has.
#[tokio::test]
async fn cancelled_acquisitions_leave_nothing_behind() {
    #[derive(Debug, Clone, Copy)]
    enum Op {
        TryLock,
        Lock,
        Fenced,
        Many,
        Reentrant,
        Read,
        Write,
        Permit,
    }
    #[derive(Debug, Clone, Copy)]
    enum Cancel {
        /// Dropped before it was ever polled.
        Unpolled,
        /// `tokio::time::timeout(Duration::ZERO, …)`.
        ZeroTimeout,
        AfterFirstPoll,
        FrozenMajority,
    }
    let ttl = Duration::from_secs(60);
    // Whether node `n` holds anything of the lock `op` takes.
    let applied = |op: Op, n: &MemoryNode| match op {
        Op::Read => n.readers("{job}:readers") > 0,
        Op::Write => n.holder("{job}:writer").is_some(),
        Op::Permit => n.holder("{job}:permit:0").is_some(),
        _ => n.holder(KEY).is_some(),
    };
    let ops = [
        Op::TryLock,
        Op::Lock,
        Op::Fenced,
        Op::Many,
        Op::Reentrant,
        Op::Read,
        Op::Write,
        Op::Permit,
    ];
    for op in ops {
        for cancel in [
            Cancel::Unpolled,
            Cancel::ZeroTimeout,
            Cancel::AfterFirstPoll,
            Cancel::FrozenMajority,
        ] {
            let (nodes, redlock) = patient_cluster().await;
            // A reentrant owner already holds once: a cancelled re-entry
            // must leave exactly that hold.
            let outer = match op {
                Op::Reentrant => Some(
                    ReentrantLock::new(&redlock, "job", "A")
                        .unwrap()
                        .lock(ttl)
                        .await
                        .unwrap(),
                ),
                _ => None,
            };
            settled(&redlock).await;
            let call = async {
                match op {
                    Op::TryLock => redlock.try_lock("job", ttl).await,
                    Op::Lock => redlock.lock("job", ttl).await,
                    Op::Fenced => {
                        redlock
                            .lock_with("job", ttl, &redquorum::LockOptions::new().fenced())
                            .await
                    }
                    Op::Many => redlock.lock_many(&["job", "job2"], ttl).await,
                    Op::Reentrant => {
                        ReentrantLock::new(&redlock, "job", "A")
                            .unwrap()
                            .lock(ttl)
                            .await
                    }
                    Op::Read => RwLock::new(&redlock, "job").unwrap().read(ttl).await,
                    Op::Write => RwLock::new(&redlock, "job").unwrap().write(ttl).await,
                    Op::Permit => {
                        let semaphore = Semaphore::new(&redlock, "job", 1).unwrap();
                        semaphore
                            .acquire(ttl)
                            .await
                            .map(redquorum::Permit::into_lock)
                    }
                }
            };
            let mut call = Box::pin(call);
            let mut granted = None;
            match cancel {
                Cancel::Unpolled => {}
                Cancel::ZeroTimeout => {
                    // It may finish before the timer is looked at: then the
                    // lock it returns is released like any other.
                    if let Ok(lock) = tokio::time::timeout(Duration::ZERO, &mut call).await {
                        granted = Some(lock.expect("granted"));
                    }
                }
                Cancel::AfterFirstPoll => {
                    assert!(futures::poll!(&mut call).is_pending(), "{op:?}");
                }
                Cancel::FrozenMajority => {
                    for n in &nodes[2..] {
                        n.freeze();
                    }
                    tokio::select! {
                        r = &mut call => panic!("{op:?} decided with three nodes silent: {r:?}"),
                        () = async {
                            for n in &nodes[..2] {
                                n.until(BOUND, "applied", |n| applied(op, n)).await;
                            }
                        } => {}
                    }
                }
            }
            drop(call);
            drop(granted);
            for n in &nodes {
                n.thaw();
            }
            settled(&redlock).await;
            let want = usize::from(outer.is_some());
            assert_eq!(holds(&nodes), [want; 5], "{op:?} {cancel:?}: holds");
            for n in &nodes {
                let left = [Op::Lock, Op::Read, Op::Write, Op::Permit]
                    .into_iter()
                    .any(|op| applied(op, n))
                    || n.holder("{job2}:lock").is_some()
                    || n.holder("{job}:intent").is_some();
                assert_eq!(
                    left,
                    outer.is_some(),
                    "{op:?} {cancel:?}: keys left on {n:?}"
                );
            }
            if let Some(outer) = outer {
                outer.release().await.unwrap();
            }
        }
    }
}

/// An extend cancelled mid-round under a frozen majority changes nothing
/// the holder relies on: the lock stays valid and held everywhere.
#[tokio::test]
async fn cancelled_extend_keeps_the_lock() {
    let (nodes, redlock) = patient_cluster().await;
    let mut lock = redlock.lock("job", Duration::from_secs(30)).await.unwrap();
    let deadline = lock.deadline();
    for n in &nodes[2..] {
        n.freeze();
    }
    {
        let mut extend = Box::pin(lock.extend(Duration::from_secs(60)));
        assert!(futures::poll!(&mut extend).is_pending());
    }
    for n in &nodes {
        n.thaw();
    }
    settled(&redlock).await;
    assert_eq!(
        lock.deadline(),
        deadline,
        "a cancelled extend moved the deadline"
    );
    for n in &nodes {
        assert_eq!(n.holder(KEY).as_deref(), Some(lock.token()));
    }
    lock.release().await.unwrap();
}
