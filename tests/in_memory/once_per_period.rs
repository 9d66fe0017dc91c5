//! Once per period (ShedLock's `lockAtLeastFor`): a job run under
//! `LockOptions::hold_at_least` keeps its lock until that time even when
//! the work ends sooner, so a replica whose cron fires a little late finds
//! it held and does not run the same slot again. Without it a lock only
//! keeps two runs from overlapping (the control).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::memory::{Until, client_over, five, five_failing};
use redquorum::LeaseOptions;
use redquorum::node::Op;
use redquorum::{InputError, LockError, LockOptions, NodeError, Redlock};

/// The lock's TTL in the tests of a period beyond it.
const TTL: Duration = Duration::from_secs(10);
/// 23 hours: a nightly job's period.
const DAY_ISH: Duration = Duration::from_secs(23 * 3600);
/// How long a test waits for a node to show what a background call did.
const BOUND: Duration = Duration::from_secs(30);

/// Two replicas fire the nightly job 2.5 s apart; it takes 1 s. Returns
/// how many times it ran.
async fn nightly_runs(options: LockOptions) -> usize {
    let (nodes, first) = five().await;
    let second = client_over(&nodes).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let replica = |client: Redlock, late: Duration| {
        let (runs, options) = (Arc::clone(&runs), options.clone());
        async move {
            tokio::time::sleep(late).await;
            let ran = client
                .run_with(
                    "nightly",
                    Duration::from_secs(60),
                    &options,
                    &LeaseOptions::new(),
                    |_lease| async {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        runs.fetch_add(1, Ordering::SeqCst);
                    },
                )
                .await;
            match ran {
                Ok(()) | Err(LockError::Taken { .. }) => {}
                Err(e) => panic!("replica: {e}"),
            }
        }
    };
    tokio::join!(
        replica(first, Duration::ZERO),
        replica(second, Duration::from_millis(2500))
    );
    runs.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn a_job_held_at_least_its_period_runs_once_per_slot() {
    let once = LockOptions::new().hold_at_least(Duration::from_secs(30));
    assert_eq!(nightly_runs(once).await, 1);
}

/// The control: a lock alone lets the late replica run the slot again.
#[tokio::test(start_paused = true)]
async fn without_it_a_late_replica_runs_the_slot_again() {
    assert_eq!(nightly_runs(LockOptions::new()).await, 2);
}

/// The lock stays until the time, then expires by itself (no release
/// needed, none made later).
#[tokio::test(start_paused = true)]
async fn the_lock_stays_until_the_time_then_expires() {
    let (nodes, redlock) = five().await;
    let options = LockOptions::new().hold_at_least(Duration::from_secs(5));
    let lock = redlock
        .lock_with("report", Duration::from_secs(20), &options)
        .await
        .unwrap();
    lock.release().await.unwrap();
    let key = redlock.key_layout().lock_key("report");
    assert!(
        nodes.iter().all(|n| n.holder(&key).is_some()),
        "released at once"
    );
    tokio::time::sleep(Duration::from_millis(4900)).await;
    assert!(matches!(
        redlock.try_lock("report", Duration::from_secs(1)).await,
        Err(LockError::Taken { .. })
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = redlock
        .try_lock("report", Duration::from_secs(1))
        .await
        .expect("expired at 5 s");
    again.release().await.unwrap();
}

/// A period far longer than the TTL and than `max_ttl` (the default, 60 s):
/// the grant's mark keeps the slot taken for 23 h after a job of a second,
/// with no key of the holder living past its TTL.
#[tokio::test(start_paused = true)]
async fn a_period_beyond_max_ttl_keeps_the_slot_taken() {
    let (nodes, first) = five().await;
    let second = client_over(&nodes).await;
    let nightly = LockOptions::new().hold_at_least(DAY_ISH);
    let lock = first.lock_with("nightly", TTL, &nightly).await.unwrap();
    lock.release().await.unwrap();
    let key = first.key_layout().plain_key("nightly");
    assert!(
        nodes.iter().all(|n| n.holder(&key).is_none()),
        "the lock key is released: only the mark stands"
    );
    tokio::time::sleep(Duration::from_secs(22 * 3600)).await;
    assert!(matches!(
        second.lock_with("nightly", TTL, &nightly).await,
        Err(LockError::Taken { .. })
    ));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let next = second
        .lock_with("nightly", TTL, &nightly)
        .await
        .expect("the next period");
    next.release().await.unwrap();
}

/// A holder that crashes (its lock neither released nor extended) frees
/// the lock within its TTL — a plain lock, which does not read the mark,
/// takes it then — but not the slot: a replica asking for the period is
/// refused until the period ends.
#[tokio::test(start_paused = true)]
async fn a_crashed_holder_frees_the_lock_within_its_ttl_but_not_the_slot() {
    let (nodes, crashed) = five().await;
    let replica = client_over(&nodes).await;
    let hourly = LockOptions::new().hold_at_least(Duration::from_secs(3600));
    let lock = crashed.lock_with("hourly", TTL, &hourly).await.unwrap();
    std::mem::forget(lock); // the process is gone: no release, no extension
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let plain = replica
        .try_lock("hourly", TTL)
        .await
        .expect("the lock lapsed within its TTL");
    plain.release().await.unwrap();
    assert!(matches!(
        replica.lock_with("hourly", TTL, &hourly).await,
        Err(LockError::Taken { .. })
    ));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let next = replica
        .lock_with("hourly", TTL, &hourly)
        .await
        .expect("the next period");
    next.release().await.unwrap();
}

/// A round refused (two of five granted) takes back the marks it set: the
/// slot is not lost to a round that never held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_round_takes_its_period_marks_back() {
    let (nodes, links, redlock) = five_failing(
        |op| matches!(op, Op::Acquire { .. }),
        || NodeError::NotConnected("link down (test)".into()),
    )
    .await;
    for link in &links[2..] {
        link.fail(true);
    }
    let hourly = LockOptions::new().hold_at_least(Duration::from_secs(3600));
    assert!(matches!(
        redlock.lock_with("hourly", TTL, &hourly).await,
        Err(LockError::Unavailable { .. })
    ));
    let mark = redlock.key_layout().period_key("hourly", true).unwrap();
    for node in &nodes {
        node.until(BOUND, "the mark taken back", |n| n.holder(&mark).is_none())
            .await;
    }
    for link in &links {
        link.fail(false);
    }
    let lock = redlock
        .lock_with("hourly", TTL, &hourly)
        .await
        .expect("the slot was not lost");
    // The grant's quorum holds the mark (the other nodes' calls may still
    // be on their way on a loaded machine).
    let marked = nodes.iter().filter(|n| n.holder(&mark).is_some()).count();
    assert!(marked >= 3, "marked on {marked} nodes");
    lock.release().await.unwrap();
}

/// What an empty restart costs (docs/guarantees.md, "Once per period"): a
/// grant that reached exactly a quorum (nodes 0–2), one of whose nodes then
/// restarts empty. While it sits out its quarantine the slot stays taken;
/// once it counts again, a quorum lacks the mark and the slot can run again
/// within the period — a repeated slot, and only after the first lock
/// lapsed: never two holders at once.
#[tokio::test(start_paused = true)]
async fn an_empty_restart_costs_at_most_a_repeated_slot() {
    let (nodes, links, redlock) = five_failing(
        |op| matches!(op, Op::Acquire { .. }),
        || NodeError::NotConnected("link down (test)".into()),
    )
    .await;
    let hourly = LockOptions::new().hold_at_least(Duration::from_secs(3600));
    for link in &links[3..] {
        link.fail(true);
    }
    let first = redlock.lock_with("hourly", TTL, &hourly).await.unwrap();
    for link in &links[3..] {
        link.fail(false);
    }
    // Node 0 restarts empty: quarantined for max_ttl (60 s by default).
    nodes[0].wipe();
    nodes[0].quarantine(true);
    let refused = redlock.lock_with("hourly", TTL, &hourly).await;
    assert!(
        matches!(refused, Err(LockError::Taken { .. })),
        "{refused:?}"
    );
    tokio::time::sleep(redquorum::DEFAULT_MAX_TTL).await;
    nodes[0].quarantine(false);
    assert!(!first.is_valid(), "the first lock lapsed within its TTL");
    let again = redlock
        .lock_with("hourly", TTL, &hourly)
        .await
        .expect("a quorum lacks the mark: the slot runs again");
    again.release().await.unwrap();
}

#[tokio::test]
async fn hold_at_least_of_zero_is_bad_input() {
    let (_nodes, redlock) = five().await;
    let zero = LockOptions::new().hold_at_least(Duration::ZERO);
    assert!(matches!(
        redlock.lock_with("r", TTL, &zero).await,
        Err(LockError::Input(InputError::InvalidHoldAtLeast(_)))
    ));
    // On a shared lock it does not compile: `AcquireOptions` has no
    // `hold_at_least` (a compile_fail example in `LockOptions`' docs).
}
