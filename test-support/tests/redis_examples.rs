//! Examples that run as processes of their own, on the five real nodes:
//! examples/service.rs (a replica that leads and resigns on SIGTERM) and
//! examples/paused_holder.rs (a holder stopped between checking its lock
//! and writing to a fenced store on Redis). Both are this crate's binaries
//! too, so that cargo builds them for these tests.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

use std::time::{Duration, Instant};

use redquorum::LockOptions;
use redquorum_test_support::process::Process;
use redquorum_test_support::{raw, redlock, unique, until_in_line};

/// examples/service.rs as replicas run it: two processes, the first
/// leading, the second in line; SIGTERM to the leader, and the second
/// leads once the first's `shutdown` released the leadership — not at its
/// TTL (10 s). Prints the hand-over (docs/election.md gives figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_example_hands_over_on_sigterm() {
    let name = unique("election-service");
    let env = [("REDQUORUM_ELECTION", name.as_str())];
    let mut first = Process::start(env!("CARGO_BIN_EXE_service"), &env);
    let led = first.until("leading, term").await;
    let mut second = Process::start(env!("CARGO_BIN_EXE_service"), &env);
    // The second is in line (waiting on a release) before the first stops.
    until_in_line(&name).await;
    let stopped = Instant::now();
    first.signal("TERM");
    let leads = second.until("leading, term").await;
    let handover = stopped.elapsed();
    first.until("resigned").await;
    let exit = first.child.wait().await.unwrap();
    eprintln!(
        "service example: the next replica leads {handover:?} after SIGTERM to the leader ({led} -> {leads})"
    );
    assert!(exit.success(), "{exit:?}");
    let term = |line: &str| -> u64 { line.rsplit(' ').next().unwrap().parse().unwrap() };
    assert!(term(&leads) > term(&led), "{led} -> {leads}");
    // Released at SIGTERM, not left to its TTL (10 s); the figure is
    // printed, the bound only tells the two apart on a loaded machine.
    assert!(handover < Duration::from_millis(2500), "{handover:?}");
    second.signal("TERM");
    assert!(second.child.wait().await.unwrap().success());
}

/// The store's write of examples/paused_holder.rs (`STORE_WRITE` there).
const STORE_WRITE: &str = "local highest = tonumber(redis.call('GET', KEYS[1]) or '0') \
    local fence = tonumber(ARGV[1]) \
    if fence < highest then return {0, highest} end \
    redis.call('SET', KEYS[1], ARGV[1]) \
    return {1, highest}";

/// `REDQUORUM_PAUSED_RUNS` runs (default 3): the holder process is stopped
/// (SIGSTOP) right after it checked its lock, stays stopped until a second
/// process — this test — holds the lock and has written with its larger
/// fence, then resumes: its late write is rejected every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_rejected_every_time() {
    let runs: usize = std::env::var("REDQUORUM_PAUSED_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let redlock = redlock().await;
    let mut store = raw(0).await;
    for run in 0..runs {
        let resource = unique("paused-holder");
        let mut holder = Process::start(
            env!("CARGO_BIN_EXE_paused_holder"),
            &[("REDQUORUM_RESOURCE", &resource)],
        );
        let held = holder.until("holding").await;
        holder.until("checked: valid; writing").await;
        holder.signal("STOP");
        let old: u64 = held.rsplit(' ').next().unwrap().parse().unwrap();
        // The other process: waits out the stopped holder's validity.
        let lock = redlock
            .lock_with(
                &resource,
                Duration::from_secs(10),
                &LockOptions::new().fenced().wait(Duration::from_secs(10)),
            )
            .await
            .expect("the paused holder's lock expires");
        let fence = lock.fence().unwrap();
        assert!(fence > old, "run {run}: fence {fence} after {old}");
        let (accepted, _): (u8, u64) = redis::Script::new(STORE_WRITE)
            .key(format!("{resource}:store"))
            .arg(fence)
            .invoke_async(&mut store)
            .await
            .unwrap();
        assert_eq!(accepted, 1, "run {run}: the valid holder's write");
        holder.signal("CONT");
        let verdict = holder.until("write with fence").await;
        eprintln!("run {run}: the paused holder (fence {old}) after fence {fence}: {verdict}");
        assert!(
            verdict.contains(&format!("rejected (highest {fence})")),
            "run {run}: {verdict}"
        );
        assert!(holder.child.wait().await.unwrap().success());
        lock.release().await.unwrap();
    }
}
