//! Semaphores on the five real nodes: 10 contending tasks on 3 permits never
//! exceed 3 valid holders and reach 3, healthy and with one node's links cut
//! (through test proxies, so the shared nodes are not disturbed).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, LockOptions, Redlock};
use support::*;

const PERMITS: u32 = 3;
const TASKS: usize = 10;

/// Holders counted while valid: (most at once, grants).
async fn contend(redlock: &Redlock, name: &str, run: Duration) -> (usize, usize) {
    let semaphore = redlock.semaphore(name, PERMITS).unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + run;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (semaphore, holders, most, grants) = (
                semaphore.clone(),
                holders.clone(),
                most.clone(),
                grants.clone(),
            );
            tokio::spawn(async move {
                let wait = LockOptions::new().wait(Duration::from_secs(5));
                while Instant::now() < end {
                    let permit = semaphore
                        .acquire_with(Duration::from_secs(5), &wait)
                        .await
                        .expect("a permit within 5 s");
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    grants.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    // Counted only while valid: the promise is about valid
                    // permits.
                    assert!(permit.is_valid(), "held past its validity");
                    holders.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (most.load(Ordering::SeqCst), grants.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_on_three_permits_never_exceed_three_and_reach_three() {
    let redlock = redlock().await;
    let (most, grants) = contend(&redlock, &unique("sem"), Duration::from_secs(2)).await;
    println!("healthy: {grants} grants, at most {most} holders");
    assert_eq!(most, PERMITS as usize, "{grants} grants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_node_changes_nothing() {
    let (proxies, redlock) = proxied(Duration::from_millis(200)).await;
    proxies[2].set_cut(true);
    let (most, grants) = contend(&redlock, &unique("sem-cut"), Duration::from_secs(2)).await;
    println!("node 3 cut off: {grants} grants, at most {most} holders");
    assert_eq!(most, PERMITS as usize, "{grants} grants");
}

#[tokio::test]
async fn bad_permit_counts_are_typed() {
    let redlock = redlock().await;
    for permits in [0, redquorum::semaphore::MAX_PERMITS + 1] {
        assert_eq!(
            redlock.semaphore("s", permits).unwrap_err(),
            ConfigError::InvalidPermits(permits)
        );
    }
    assert_eq!(
        redlock.semaphore("", 3).unwrap_err(),
        ConfigError::EmptyResource
    );
}
