//! Leases on the five real nodes: kept alive past their TTL, lost (and the
//! work stopped) when a majority is cut off, watchdogs, extension caps.
//!
//! A majority is "frozen" by cutting this client's links to three nodes
//! through test proxies, so these tests never disturb the shared cluster.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::LeaseOptions;
use redquorum::{InputError, LockError, LockOptions, Redlock};
use support::proxy::Proxy;
use support::*;
use tokio::time::Instant;

/// A client whose five links go through proxies the test can cut.
async fn proxied() -> (Vec<Proxy>, Redlock) {
    support::proxied(Duration::from_millis(50)).await
}

async fn holders(resource: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for mut conn in raw_all().await {
        out.push(conn.get(lock_key(resource)).await.unwrap());
    }
    out
}

#[tokio::test]
async fn lease_is_kept_for_three_ttls() {
    let (redlock, rival) = (support::redlock().await, support::redlock().await);
    let resource = unique("lease-kept");
    // A second: an extension every third of it, with room for a loaded
    // machine's stalls (a TTL of 300 ms left 100 ms).
    let ttl = Duration::from_secs(1);
    let started = Instant::now();
    let out = redlock
        .run(&resource, ttl, |lease| {
            let resource = resource.clone();
            let rival = rival.clone();
            async move {
                // Time passing is what is tested: 3.3 TTLs of work.
                for _ in 0..33 {
                    tokio::time::sleep(ttl / 10).await;
                    assert!(lease.is_valid(), "lease lapsed at {:?}", started.elapsed());
                    assert!(
                        matches!(
                            rival.try_lock(&resource, ttl).await,
                            Err(LockError::Taken { .. })
                        ),
                        "a rival got the resource"
                    );
                }
                let on_nodes = holders(&resource).await;
                assert!(
                    on_nodes.iter().all(|h| h.as_deref() == Some(lease.token())),
                    "{on_nodes:?}"
                );
                lease.fence()
            }
        })
        .await
        .unwrap();
    assert!(started.elapsed() > 3 * ttl);
    assert_eq!(out, None, "not fenced");
    // Released at the end: free for the rival.
    rival
        .try_lock(&resource, ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn lease_lost_to_a_majority_cut_stops_the_work() {
    let (proxies, redlock) = proxied().await;
    let resource = unique("lease-lost");
    let ttl = Duration::from_millis(600);
    let completed = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cut_at = Arc::new(std::sync::Mutex::new(None));

    let (work_completed, work_steps, work_cut_at) =
        (completed.clone(), steps.clone(), cut_at.clone());
    let result = redlock
        .run(&resource, ttl, |lease| async move {
            for step in 0..200 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                // Every step must happen while the lease is valid.
                work_steps
                    .lock()
                    .unwrap()
                    .push((Instant::now(), lease.deadline()));
                if step == 10 {
                    for p in &proxies[..3] {
                        p.set_cut(true);
                    }
                    *work_cut_at.lock().unwrap() = Some(Instant::now());
                }
            }
            work_completed.store(true, Ordering::SeqCst);
        })
        .await;
    let returned = Instant::now();

    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    assert!(
        !completed.load(Ordering::SeqCst),
        "the work completed after the lease was lost"
    );
    let steps = steps.lock().unwrap();
    for (at, deadline) in steps.iter() {
        assert!(
            at.into_std() < *deadline,
            "a step ran after the lease's deadline"
        );
    }
    let cut_at = cut_at.lock().unwrap().expect("cut happened");
    // Stopped within the TTL of the cut, plus slack for `run`'s release
    // (which waits its node timeout for the cut nodes) and scheduling.
    let stopped_after = returned - cut_at;
    assert!(
        stopped_after < ttl + Duration::from_millis(500),
        "stopped {stopped_after:?} after the cut"
    );
    assert!(steps.len() < 200);
}

#[tokio::test]
async fn lost_signal_reaches_subtasks() {
    let (proxies, redlock) = proxied().await;
    let resource = unique("lease-signal");
    let ttl = Duration::from_millis(400);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let result = redlock
        .run(&resource, ttl, |lease| async move {
            let lost = lease.lost();
            let watcher = tokio::spawn(async move {
                lost.await;
                Instant::now()
            });
            let _ = tx.send(watcher);
            for p in &proxies[..3] {
                p.set_cut(true);
            }
            std::future::pending::<()>().await;
        })
        .await;
    assert!(matches!(result, Err(LockError::Lost { .. })));
    let signalled_at = rx.await.unwrap().await.unwrap();
    assert!(signalled_at <= Instant::now());
}

#[tokio::test]
async fn extension_cap_ends_the_lease_at_its_deadline() {
    let redlock = redlock().await;
    let resource = unique("lease-cap");
    let ttl = Duration::from_millis(300);
    let options = LeaseOptions::new().max_extensions(1);
    let started = Instant::now();
    let result = redlock
        .run_with(
            &resource,
            ttl,
            &LockOptions::new(),
            &options,
            |_lease| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
            },
        )
        .await;
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    // One extension at ttl/3, then the deadline (under 1 s): well before
    // the work's 10 s, with room for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn run_returns_the_output_and_releases() {
    let redlock = redlock().await;
    let resource = unique("lease-output");
    let out = redlock
        .run_with(
            &resource,
            Duration::from_secs(5),
            &LockOptions::new().fenced(),
            &LeaseOptions::new(),
            |lease| async move { (lease.resource().to_owned(), lease.fence()) },
        )
        .await
        .unwrap();
    assert_eq!(out.0, resource);
    assert!(out.1.is_some_and(|f| f > 0));
    assert!(holders(&resource).await.iter().all(Option::is_none));
}

#[tokio::test]
async fn bad_extension_intervals_are_typed_errors() {
    let redlock = redlock().await;
    let ttl = Duration::from_secs(1);
    for every in [Duration::ZERO, ttl, Duration::from_secs(60)] {
        let options = LeaseOptions::new().extend_every(every);
        let result = redlock
            .run_with(
                "never-locked",
                ttl,
                &LockOptions::new(),
                &options,
                |_| async { unreachable!() },
            )
            .await;
        assert!(
            matches!(
                result,
                Err(LockError::Input(InputError::InvalidExtendInterval { .. }))
            ),
            "{every:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn keep_alive_extends_until_released() {
    let redlock = redlock().await;
    let resource = unique("watchdog");
    let ttl = Duration::from_secs(1);
    let lock = redlock.lock(&resource, ttl).await.unwrap();
    let token = lock.token().to_owned();
    let watchdog = lock.keep_alive().unwrap();
    tokio::time::sleep(3 * ttl).await; // time passing is what is tested
    assert!(watchdog.lease().is_valid());
    assert!(
        holders(&resource)
            .await
            .iter()
            .all(|h| h.as_deref() == Some(token.as_str()))
    );
    watchdog.release().await.unwrap();
    eventually_gone(&mut raw_all().await, &resource, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn keep_alive_signals_loss_and_drop_releases() {
    let (proxies, redlock) = proxied().await;
    let resource = unique("watchdog-lost");
    let lock = redlock
        .lock(&resource, Duration::from_millis(400))
        .await
        .unwrap();
    let watchdog = lock.keep_alive().unwrap();
    let lost = watchdog.lease().lost();
    for p in &proxies[..3] {
        p.set_cut(true);
    }
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("loss signalled");
    assert!(!watchdog.lease().is_valid());
    for p in &proxies[..3] {
        p.set_cut(false);
    }
    drop(watchdog); // releases in the background
    eventually_gone(&mut raw_all().await, &resource, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn dropping_run_ends_the_lease_for_subtasks() {
    let redlock = support::redlock().await;
    let resource = unique("lease-dropped");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = redlock.run(&resource, Duration::from_secs(30), |lease| async move {
        let _ = tx.send(lease.clone());
        std::future::pending::<()>().await;
    });
    let lease = tokio::select! {
        _ = run => unreachable!("the work never finishes"),
        lease = rx => lease.unwrap(),
    };
    // The run future is gone: the lease must end, not linger until its TTL,
    // and it was not lost.
    let end = tokio::time::timeout(Duration::from_secs(1), lease.ended())
        .await
        .expect("ended() resolves once run is dropped");
    assert_eq!(end, redquorum::LeaseEnd::Finished);
    assert!(!lease.is_valid());
    assert!(!lease.is_lost());
    eventually_gone(&mut raw_all().await, &resource, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_finished_lease_is_ended_not_lost() {
    use futures::FutureExt;
    let redlock = support::redlock().await;
    let resource = unique("lease-finished");
    let lease = redlock
        .run(
            &resource,
            Duration::from_secs(30),
            |lease| async move { lease },
        )
        .await
        .expect("run");
    assert_eq!(lease.ended().await, redquorum::LeaseEnd::Finished);
    assert!(!lease.is_lost());
    // The work finished: nothing was lost, so lost() never fires.
    assert!(
        lease.lost().now_or_never().is_none(),
        "lost() fired for a lease whose work simply finished"
    );
}
