//! Fair waiting on real nodes: callers that each hold a lock for a while,
//! give it back and at once ask again never starve the others. The
//! workload: five callers on a 2-permit semaphore (a lock, writers of a
//! read/write lock), each holding 150–350 ms, each waiting at most
//! [`WAIT`]. Without a line (`Builder::fair_waiting(false)`, the negative
//! control) a caller that just released wins again before the woken
//! waiters, and waiters time out although the lock was busy all along.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use redquorum::{Lock, LockError, LockOptions, Permit, Redlock, Semaphore};
use support::{patient, unique};

/// How long the workload runs (`REDQUORUM_FAIR_RUN_SECS` to measure
/// longer).
fn run_for() -> Duration {
    Duration::from_secs(env_or("REDQUORUM_FAIR_RUN_SECS", 8))
}

/// How long a caller waits at most: well above what a caller waits in turn
/// (four others ahead, each 350 ms at most: 700 ms two at a time, 1.4 s
/// one at a time), with room for a loaded machine
/// (`REDQUORUM_FAIR_WAIT_MS` to measure another).
fn wait() -> Duration {
    Duration::from_millis(env_or("REDQUORUM_FAIR_WAIT_MS", 3_000))
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
const CALLERS: usize = 5;

/// What one run saw.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    holds: u32,
    timeouts: u32,
    longest_wait: Duration,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Permits,
    Lock,
    Writers,
}

enum Held {
    Permit(Permit),
    Lock(Lock),
}

impl Held {
    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Permit(p) => p.release().await,
            Held::Lock(l) => l.release().await,
        }
    }
}

async fn take(redlock: &Redlock, kind: Kind, name: &str) -> Result<Held, LockError> {
    let (ttl, wait) = (Duration::from_secs(5), LockOptions::new().wait(wait()));
    match kind {
        Kind::Permits => {
            let semaphore = Semaphore::new(redlock, name, 2)?;
            semaphore.acquire_with(ttl, &wait).await.map(Held::Permit)
        }
        Kind::Lock => redlock.lock_with(name, ttl, &wait).await.map(Held::Lock),
        Kind::Writers => redlock
            .write_lock_with(name, ttl, &wait)
            .await
            .map(Held::Lock),
    }
}

/// Runs the workload of `kind` for [`run_for()`].
async fn workload(redlock: Redlock, kind: Kind, fair: bool) -> Seen {
    let name = unique(&format!("fair-{kind:?}"));
    let until = Instant::now() + run_for();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (redlock, name, seen) = (redlock.clone(), name.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                while Instant::now() < until {
                    let asked = Instant::now();
                    let held = match take(&redlock, kind, &name).await {
                        Ok(held) => held,
                        Err(LockError::Timeout { .. }) => {
                            seen.lock().unwrap().timeouts += 1;
                            continue;
                        }
                        Err(e) => panic!("{kind:?}: {e}"),
                    };
                    {
                        let mut seen = seen.lock().unwrap();
                        seen.holds += 1;
                        seen.longest_wait = seen.longest_wait.max(asked.elapsed());
                    }
                    let hold = rand::rng().random_range(150..=350);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    held.release().await.expect("release");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    if fair {
        // Every caller gave back what it held and left the lines: no key
        // is left on any node, none kept for a waiter, no place in line
        // (within the release's tail).
        support::settled(&redlock).await;
        let mut conns = support::raw_all().await;
        let none = vec![std::collections::BTreeMap::new(); 5];
        support::eventually_snapshot(&mut conns, &name, &none, Duration::from_secs(2)).await;
    }
    let seen = *seen.lock().unwrap();
    let line = if fair { "in line" } else { "no line" };
    eprintln!(
        "{kind:?} ({line}): {} holds, {} timeouts, longest wait {:?}",
        seen.holds, seen.timeouts, seen.longest_wait
    );
    seen
}

async fn client(fair: bool) -> Redlock {
    patient().fair_waiting(fair).build().await.expect("connect")
}

/// Each kind's workload at once, on one client.
async fn every_kind(fair: bool) -> [Seen; 3] {
    let redlock = client(fair).await;
    let (a, b, c) = tokio::join!(
        workload(redlock.clone(), Kind::Permits, fair),
        workload(redlock.clone(), Kind::Lock, fair),
        workload(redlock.clone(), Kind::Writers, fair),
    );
    [a, b, c]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_served_in_turn_never_time_out() {
    let (fair, unfair) = tokio::join!(every_kind(true), every_kind(false));
    for (kind, seen) in [Kind::Permits, Kind::Lock, Kind::Writers].iter().zip(fair) {
        assert_eq!(seen.timeouts, 0, "{kind:?} in line: {seen:?}");
        assert!(seen.holds > 10, "{kind:?} in line: {seen:?}");
    }
    // The negative control: the same callers without a line starve some
    // waiters past their wait.
    let starved: u32 = unfair.iter().map(|s| s.timeouts).sum();
    assert!(starved > 0, "no waiter starved without a line: {unfair:?}");
}
