//! Permit hand-off: a holder of a 1-permit semaphore releases while another
//! client waits (`acquire_with` + `LockOptions::wait`); the time from the
//! release to the waiter's permit, healthy and with node 3 frozen. Then the
//! same for a read/write lock: three readers release together while a
//! writer waits (`RwLock::write_with`); the time from the last release to the
//! writer's lock.
//!
//! ```text
//! scripts/nodes up
//! export REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=$PWD/scripts/nodes
//! cargo run --profile bench -p redquorum-bench --bin permits
//! ```

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::AcquireOptions;
use redquorum::RwLock;
use redquorum::{KeyLayout, Redlock, Semaphore};
use redquorum_bench::listening;

const HANDOFFS: usize = 100;

fn main() {
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .expect("REDQUORUM_NODES: five node URLs")
        .split(',')
        .map(str::to_owned)
        .collect();
    let script = std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| redquorum_bench::repo("scripts/nodes"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let holder = Redlock::builder()
            .restart_quarantine(false)
            .nodes(&urls)
            .build()
            .await
            .expect("connect");
        let waiter = Redlock::builder()
            .restart_quarantine(false)
            .nodes(&urls)
            .build()
            .await
            .expect("connect");
        let mut conns = listening::connections(&urls).await;
        let mut healthy = handoffs(&holder, &waiter, &mut conns, "healthy").await;
        let mut rw_healthy = rw_handoffs(&holder, &waiter, &mut conns, "healthy").await;
        run(&script, "freeze");
        let mut frozen = handoffs(&holder, &waiter, &mut conns, "frozen").await;
        let mut rw_frozen = rw_handoffs(&holder, &waiter, &mut conns, "frozen").await;
        run(&script, "thaw");
        let (h, f) = (p(&mut healthy, 50), p(&mut frozen, 50));
        println!(
            "permit hand-off over {HANDOFFS} hand-offs: healthy p50 {h:.2} ms p99 {:.2} ms; \
             node 3 frozen p50 {f:.2} ms p99 {:.2} ms; frozen / healthy p50 {:.2}x",
            p(&mut healthy, 99),
            p(&mut frozen, 99),
            f / h
        );
        let (h, f) = (p(&mut rw_healthy, 50), p(&mut rw_frozen, 50));
        println!(
            "readers-to-writer hand-off over {HANDOFFS} hand-offs: healthy p50 {h:.2} ms \
             p99 {:.2} ms; node 3 frozen p50 {f:.2} ms p99 {:.2} ms; frozen / healthy p50 {:.2}x",
            p(&mut rw_healthy, 99),
            p(&mut rw_frozen, 99),
            f / h
        );
    });
}

/// `HANDOFFS` hand-offs from three readers, released together, to a waiting
/// writer: the time from the last release to the writer's lock.
async fn rw_handoffs(
    holder: &Redlock,
    waiter: &Redlock,
    conns: &mut [MultiplexedConnection],
    tag: &str,
) -> Vec<Duration> {
    let name = format!("bench:rw:{tag}:{}", std::process::id());
    let [writer_key, ..] = KeyLayout::default().rw_keys(&name);
    let ttl = Duration::from_secs(10);
    let mut samples = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let mut readers = Vec::new();
        for _ in 0..3 {
            readers.push(
                RwLock::new(holder, &name)
                    .unwrap()
                    .read(ttl)
                    .await
                    .expect("read lock"),
            );
        }
        let (waiter, resource) = (waiter.clone(), name.clone());
        let waiting = tokio::spawn(async move {
            let wait = AcquireOptions::new().wait(Duration::from_secs(10));
            let writer = RwLock::new(&waiter, &resource)
                .unwrap()
                .write_with(ttl, &wait)
                .await
                .expect("the writer's lock");
            let got = Instant::now();
            writer.release().await.expect("release");
            got
        });
        listening::until_listening(conns, &writer_key, holder.nodes().quorum()).await;
        futures::future::try_join_all(readers.into_iter().map(redquorum::Lock::release))
            .await
            .expect("release");
        let released = Instant::now();
        let got = waiting.await.expect("writer");
        samples.push(got.saturating_duration_since(released));
    }
    samples
}

fn run(script: &str, action: &str) {
    let ok = std::process::Command::new(script)
        .args([action, "3"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "scripts/nodes {action} 3 failed");
}

/// `HANDOFFS` hand-offs: the time from each release to the waiter's permit.
async fn handoffs(
    holder: &Redlock,
    waiter: &Redlock,
    conns: &mut [MultiplexedConnection],
    tag: &str,
) -> Vec<Duration> {
    let name = format!("bench:permits:{tag}:{}", std::process::id());
    let theirs = Semaphore::new(waiter, &name, 1).expect("semaphore");
    let ours = Semaphore::new(holder, &name, 1).expect("semaphore");
    let slot_key = ours.slot_key(0);
    let mut samples = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let held = ours.acquire(Duration::from_secs(10)).await.expect("permit");
        let theirs = theirs.clone();
        let waiting = tokio::spawn(async move {
            let wait = AcquireOptions::new().wait(Duration::from_secs(10));
            let permit = theirs
                .acquire_with(Duration::from_secs(10), &wait)
                .await
                .expect("the waiter's permit");
            let got = Instant::now();
            permit.release().await.expect("release");
            got
        });
        listening::until_listening(conns, &slot_key, holder.nodes().quorum()).await;
        let released = Instant::now();
        held.release().await.expect("release");
        let got = waiting.await.expect("waiter");
        samples.push(got.saturating_duration_since(released));
    }
    samples
}

fn p(samples: &mut [Duration], q: usize) -> f64 {
    samples.sort_unstable();
    samples[(samples.len() - 1) * q / 100].as_secs_f64() * 1e3
}
