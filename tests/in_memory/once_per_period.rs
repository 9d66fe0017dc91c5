//! Once per period (ShedLock's `lockAtLeastFor`): a job run under
//! `LockOptions::hold_at_least` keeps its lock until that time even when
//! the work ends sooner, so a replica whose cron fires a little late finds
//! it held and does not run the same slot again. Without it a lock only
//! keeps two runs from overlapping (the control).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::memory::{client_over, five};
use redquorum::LeaseOptions;
use redquorum::{InputError, LockError, LockOptions, Redlock};

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

#[tokio::test]
async fn hold_at_least_beyond_the_ttl_is_bad_input() {
    let (_nodes, redlock) = five().await;
    let long = LockOptions::new().hold_at_least(Duration::from_secs(30));
    assert!(matches!(
        redlock.lock_with("r", Duration::from_secs(10), &long).await,
        Err(LockError::Input(InputError::HoldAtLeastAboveTtl { .. }))
    ));
    // On a shared lock it does not compile: `AcquireOptions` has no
    // `hold_at_least` (a compile_fail example in `LockOptions`' docs).
}
