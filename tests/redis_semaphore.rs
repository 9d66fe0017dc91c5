//! Semaphores on the five real nodes: 10 contending tasks on 3 permits never
//! exceed 3 valid holders — healthy, with a frozen minority and under random
//! minority faults (through test proxies, so the shared nodes are not
//! disturbed) — and reach 3 healthy and with a frozen minority.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::AcquireOptions;
use redquorum::{InputError, LockError, Redlock, Semaphore};
use support::*;

const PERMITS: u32 = 3;
const TASKS: usize = 10;

/// One test at a time of those that need the machine's time: ten
/// contending tasks of one test starved another's lease keeper of its
/// extensions (a 1 s lease lost in a CI rehearsal).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Holders counted while valid: (most at once, grants, waits that ran out).
///
/// Each waiter waits up to twice the TTL and 2 s more: a wake-up is a hint
/// (docs/design.md, "Fair waiting"), and a waiter that misses one — the
/// report of a release that raced its own round — sleeps until the
/// holder's reported TTL runs out, then asks again. With a wait of one
/// TTL, one missed wake ran a wait out (a CI rehearsal, two nodes frozen,
/// 1 waiter of 10 not served within 5 s), though nothing was wrong.
///
/// A wait that runs out is counted, not a failure: under random faults a
/// waiter can lose its turn several times over (a slot kept for it on some
/// nodes only, docs/design.md "Fair waiting", bounded unfairness), and on a
/// loaded machine that can add up to the whole wait. What is checked is the
/// promise: never more than `PERMITS` valid holders (and, where the callers
/// say so, `PERMITS` reached).
async fn contend(
    redlock: &Redlock,
    name: &str,
    ttl: Duration,
    run: Duration,
) -> (usize, usize, usize) {
    let semaphore = Semaphore::new(redlock, name, PERMITS).unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let timeouts = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + run;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (semaphore, holders, most, grants, timeouts) = (
                semaphore.clone(),
                holders.clone(),
                most.clone(),
                grants.clone(),
                timeouts.clone(),
            );
            tokio::spawn(async move {
                let wait = AcquireOptions::new().wait(ttl * 2 + Duration::from_secs(2));
                while Instant::now() < end {
                    let permit = match semaphore.acquire_with(ttl, &wait).await {
                        Ok(permit) => permit,
                        Err(LockError::Timeout { .. }) => {
                            timeouts.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        Err(e) => panic!("a permit or a timeout: {e:?}"),
                    };
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    grants.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    // Counted only while valid: the promise is about valid
                    // permits.
                    assert!(permit.is_valid(), "held past its validity");
                    holders.fetch_sub(1, Ordering::SeqCst);
                    // Under faults a release may miss its quorum (the keys then
                    // expire at their TTL): not what is checked here.
                    let _ = permit.release().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (
        most.load(Ordering::SeqCst),
        grants.load(Ordering::SeqCst),
        timeouts.load(Ordering::SeqCst),
    )
}

/// Every permit is had at once, and one more is refused: the semaphore is
/// no stricter than its count, and no looser. (Contention alone need not
/// reach the count on a loaded machine: holders of 5 ms may never overlap
/// three deep.)
async fn all_permits_at_once(redlock: &Redlock) {
    let semaphore = Semaphore::new(redlock, &unique("sem-all"), PERMITS).unwrap();
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            semaphore
                .acquire_with(Duration::from_secs(30), &wait)
                .await
                .unwrap(),
        );
    }
    assert!(held.iter().all(|permit| permit.is_valid()));
    assert!(
        semaphore
            .try_acquire(Duration::from_secs(30))
            .await
            .is_err(),
        "a permit beyond {PERMITS}"
    );
    for permit in held {
        let _ = permit.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_on_three_permits_never_exceed_three_and_reach_three() {
    let _serial = SERIAL.lock().await;
    let redlock = redlock().await;
    let (most, grants, timeouts) = contend(
        &redlock,
        &unique("sem"),
        Duration::from_secs(5),
        Duration::from_secs(2),
    )
    .await;
    println!("healthy: {grants} grants, at most {most} holders, {timeouts} timeouts");
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once ({grants} grants)"
    );
    all_permits_at_once(&redlock).await;
    assert_eq!(
        timeouts, 0,
        "every waiter served within twice the TTL and 2 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_minority_changes_nothing() {
    let _serial = SERIAL.lock().await;
    let (proxies, redlock) = proxied(Duration::from_millis(200)).await;
    // Two of five links held: requests pile up unanswered, as to a
    // SIGSTOPped server.
    proxies[1].set_cut(true);
    proxies[3].set_cut(true);
    let (most, grants, timeouts) = contend(
        &redlock,
        &unique("sem-frozen"),
        Duration::from_secs(5),
        Duration::from_secs(2),
    )
    .await;
    println!("nodes 2 and 4 frozen: {grants} grants, at most {most} holders, {timeouts} timeouts");
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once ({grants} grants)"
    );
    all_permits_at_once(&redlock).await;
    assert_eq!(
        timeouts, 0,
        "every waiter served within twice the TTL and 2 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_minority_faults_change_nothing() {
    let _serial = SERIAL.lock().await;
    let (proxies, redlock) = proxied(Duration::from_millis(100)).await;
    let ((most, grants, timeouts), faults) = under_chaos(
        &proxies,
        contend(
            &redlock,
            &unique("sem-chaos"),
            // Short: a permit whose release met a closed link lives on that
            // node until its TTL.
            Duration::from_secs(1),
            Duration::from_secs(3),
        ),
    )
    .await;
    println!(
        "random minority faults ({faults}): {grants} grants, at most {most} holders, \
         {timeouts} waits ran out"
    );
    assert!(faults > 0);
    // The promise under faults is the bound; reaching it takes three
    // holders' 5 ms at once, which random faults on a loaded machine may
    // deny for the whole run (seen in CI: at most 2 in 3 s). The healthy
    // and frozen-minority runs check that it is reached.
    assert!(most <= PERMITS as usize, "{most} holders at once");
    assert!(grants > 0, "no permit at all under minority faults");
}

#[tokio::test]
async fn bad_permit_counts_are_typed() {
    let redlock = redlock().await;
    for permits in [0, redquorum::semaphore::MAX_PERMITS + 1] {
        assert_eq!(
            Semaphore::new(&redlock, "s", permits).unwrap_err(),
            InputError::InvalidPermits(permits)
        );
    }
    assert_eq!(
        Semaphore::new(&redlock, "", 3).unwrap_err(),
        InputError::EmptyResource
    );
}

/// `run` keeps its permit past its TTL while the work runs, and gives it
/// back at the end: the only permit is refused to others meanwhile, then
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_the_permit_for_the_work_and_gives_it_back() {
    let _serial = SERIAL.lock().await;
    let redlock = redlock().await;
    let semaphore = Semaphore::new(&redlock, &unique("sem-run"), 1).unwrap();
    // Long enough that a loaded machine's stall does not miss an
    // extension (300 ms and 1 s leases were lost so in rehearsals, beside
    // the contending tests above, which now wait their turn).
    let ttl = Duration::from_secs(2);
    let other = semaphore.clone();
    let out = semaphore
        .run(ttl, |lease| async move {
            // Work three TTLs long: only extensions keep the permit.
            for _ in 0..3 {
                tokio::time::sleep(ttl).await;
                // Refused (taken, or on a starved host not answered in
                // time): never a second permit of one.
                let refused = other.try_acquire(ttl).await;
                assert!(refused.is_err(), "the only permit given twice");
            }
            assert!(lease.is_valid(), "the permit was not kept");
            lease.resource().to_owned()
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        semaphore.name(),
        "a permit's lease names its semaphore"
    );
    semaphore
        .try_acquire(ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
