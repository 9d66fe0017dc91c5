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
use redquorum::AcquireOptions;
use redquorum::RwLock;
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
    let (ttl, wait) = (Duration::from_secs(5), AcquireOptions::new().wait(wait()));
    match kind {
        Kind::Permits => {
            let semaphore = Semaphore::new(redlock, name, 2)?;
            semaphore.acquire_with(ttl, &wait).await.map(Held::Permit)
        }
        Kind::Lock => redlock
            .lock_with(name, ttl, &LockOptions::from(wait))
            .await
            .map(Held::Lock),
        Kind::Writers => RwLock::new(redlock, name)
            .unwrap()
            .write_with(ttl, &wait)
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

/// How many grants the scale case runs for: three turns of every waiter.
const SCALE_WAITERS: usize = 100;

/// `SCALE_WAITERS` waiters on one lock, each holding it 1 ms and asking
/// again at once, until `3 × SCALE_WAITERS` grants: each waiter's grants,
/// and the script calls the nodes ran per grant meanwhile. Patient waits
/// (60 s): a loaded machine slows the run, it never fails it.
async fn scale(fair: bool) -> (Vec<u32>, f64) {
    let redlock = client(fair).await;
    let mut nodes = support::raw_all().await;
    let before = support::script_calls(&mut nodes).await;
    let name = unique("fair-scale");
    let total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let grants: Vec<_> = (0..SCALE_WAITERS)
        .map(|_| {
            let (redlock, name, total) = (redlock.clone(), name.clone(), Arc::clone(&total));
            tokio::spawn(async move {
                let wait = LockOptions::new().wait(Duration::from_secs(60));
                let mut mine = 0;
                use std::sync::atomic::Ordering::SeqCst;
                while total.load(SeqCst) < 3 * SCALE_WAITERS {
                    let lock = redlock
                        .lock_with(&name, Duration::from_secs(5), &wait)
                        .await
                        .expect("a waiter in line is served within 60 s");
                    if total.fetch_add(1, SeqCst) < 3 * SCALE_WAITERS {
                        mine += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    lock.release().await.expect("release");
                }
                mine
            })
        })
        .collect();
    let mut out = Vec::new();
    for g in grants {
        out.push(g.await.unwrap());
    }
    let calls = support::script_calls(&mut nodes).await - before;
    let per_grant = calls as f64 / (3 * SCALE_WAITERS) as f64;
    out.sort_unstable();
    eprintln!(
        "scale ({}): {} waiters, grants min {} median {} max {}, {per_grant:.1} node calls a grant",
        if fair { "in line" } else { "no line" },
        out.len(),
        out[0],
        out[out.len() / 2],
        out[out.len() - 1]
    );
    (out, per_grant)
}

/// A hundred waiters in line take turns: after three turns' worth of
/// grants, every waiter had two to four (a waiter that re-enters the line
/// goes to its back), whatever the time it took; and a release wakes the
/// one waiter the lock is kept for, so that a grant costs a few node calls
/// whatever the number of waiters (about 18 here; 379 when every release
/// woke every waiter). Without a line (the negative control) the grants
/// spread far wider: some waiters pass others many times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waiters_in_line_take_turns() {
    let (fair, per_grant) = scale(true).await;
    assert!(
        fair[0] >= 2 && fair[fair.len() - 1] <= 4,
        "in line, each waiter should have had its turns: {fair:?}"
    );
    // The other test of this file runs beside it: its calls count too.
    assert!(
        per_grant < 60.0,
        "{per_grant:.1} node calls a grant: a herd of waiters"
    );
    let (unfair, _) = scale(false).await;
    assert!(
        unfair[unfair.len() - 1] - unfair[0] > 2,
        "without a line the turns should spread: {unfair:?}"
    );
}
