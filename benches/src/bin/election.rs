//! Leader election on real nodes: how long a hand-over takes after
//! `resign()` (healthy, and with one of five nodes frozen), how long after a
//! leader's process dies the next one leads (against TTL + one retry pause),
//! and how late `observe()` reports each change.
//!
//! ```text
//! REDQUORUM_NODES=$(scripts/nodes urls) \
//!   cargo run --profile bench -p redquorum-bench --bin election
//! ```
//!
//! `REDQUORUM_BENCH_ROUNDS` sets the hand-overs per figure (default 200).
//! Every client reaches the nodes through its own test proxies, so that a
//! node can be frozen (its links held) or a process "killed" (all its links
//! cut) without touching the shared nodes.

use std::time::{Duration, Instant};

use futures::StreamExt;
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::election::{Election, LeaderState};
use redquorum::{Redlock, Retry};
use redquorum_bench::proxy::Proxy;

const TTL: Duration = Duration::from_secs(2);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * p / 100]
}

/// A client of its own (as a separate process would be) through fresh
/// proxies to `urls`.
async fn client(urls: &[String], retry: Retry) -> (Vec<Proxy>, Redlock) {
    let mut proxies = Vec::new();
    for url in urls {
        proxies.push(Proxy::start(url.trim_start_matches("redis://")).await);
    }
    let redlock = Redlock::builder()
        .restart_quarantine(false)
        .nodes(proxies.iter().map(Proxy::url))
        .retry(retry)
        .node_timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("connect");
    (proxies, redlock)
}

/// Time from `resign()` returning to the waiting candidate's leadership,
/// `rounds` times (the two clients take turns).
async fn hand_overs(a: &Election, b: &Election, rounds: usize) -> Vec<Duration> {
    let options = AcquireOptions::new();
    let mut samples = Vec::with_capacity(rounds);
    let mut leader = a
        .campaign_with(TTL, &options, &LeaseOptions::new())
        .await
        .expect("first leader");
    let mut next_is_b = true;
    for _ in 0..rounds {
        let next = if next_is_b { b.clone() } else { a.clone() };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let candidate = tokio::spawn(async move {
            let _ = tx.send(());
            next.campaign(TTL).await
        });
        rx.await.expect("candidate started");
        // Let the candidate be refused once and listen.
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.resign().await.expect("resign");
        let resigned = Instant::now();
        leader = candidate.await.expect("task").expect("next leader");
        samples.push(resigned.elapsed());
        next_is_b = !next_is_b;
    }
    leader.resign().await.expect("resign");
    samples
}

/// Time from a leader's process "dying" (every link cut: nothing is
/// released) to the next leader, `rounds` times.
async fn after_kill(urls: &[String], rounds: usize) -> Vec<Duration> {
    let name = format!("bench:elect-kill:{}", std::process::id());
    let (_, standby) = client(urls, Retry::default()).await;
    let standby = Election::new(&standby, &name).expect("name");
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (proxies, doomed) = client(urls, Retry::default()).await;
        let leadership = Election::new(&doomed, &name)
            .expect("name")
            .campaign(TTL)
            .await
            .expect("leader");
        let waiting = tokio::spawn({
            let standby = standby.clone();
            async move { standby.campaign(TTL).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        for p in &proxies {
            p.set_down(true);
        }
        let killed = Instant::now();
        let next = waiting.await.expect("task").expect("next leader");
        samples.push(killed.elapsed());
        std::mem::forget(leadership); // dead: it never resigns
        next.resign().await.expect("resign");
    }
    samples
}

/// Time from each change (a grant, a resignation) to `observe()` reporting
/// it, `rounds` changes of each.
async fn observe_delays(election: &Election, rounds: usize) -> Vec<Duration> {
    let mut changes = Box::pin(election.observe());
    assert_eq!(changes.next().await, Some(LeaderState::Vacant));
    let mut samples = Vec::with_capacity(rounds * 2);
    for _ in 0..rounds {
        let leadership = election.campaign(TTL).await.expect("leader");
        let granted = Instant::now();
        let Some(LeaderState::Leading(_)) = changes.next().await else {
            panic!("a leader")
        };
        samples.push(granted.elapsed());
        leadership.resign().await.expect("resign");
        let resigned = Instant::now();
        assert_eq!(changes.next().await, Some(LeaderState::Vacant));
        samples.push(resigned.elapsed());
    }
    samples
}

fn report(what: &str, samples: &mut [Duration]) -> Duration {
    let p50 = percentile(samples, 50);
    println!(
        "{what:<44} n={:<4} p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        samples.len(),
        ms(p50),
        ms(percentile(samples, 90)),
        ms(percentile(samples, 99)),
        ms(*samples.iter().max().unwrap()),
    );
    p50
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .expect("REDQUORUM_NODES: the five nodes' URLs (scripts/nodes urls)")
        .split(',')
        .map(str::to_owned)
        .collect();
    let rounds: usize = std::env::var("REDQUORUM_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let name = format!("bench:elect:{}", std::process::id());

    // Straight to the nodes first: what a deployment sees.
    let direct = || async {
        let redlock = Redlock::builder()
            .restart_quarantine(false)
            .nodes(&urls)
            .node_timeout(Duration::from_millis(50))
            .build()
            .await
            .expect("connect");
        Election::new(&redlock, &format!("{name}:direct")).unwrap()
    };
    let (da, db) = (direct().await, direct().await);
    report(
        "hand-over after resign, healthy, direct",
        &mut hand_overs(&da, &db, rounds).await,
    );
    // Through the proxies, healthy then with a node frozen.
    let (pa, a) = client(&urls, Retry::default()).await;
    let (pb, b) = client(&urls, Retry::default()).await;
    let (ea, eb) = (
        Election::new(&a, &name).unwrap(),
        Election::new(&b, &name).unwrap(),
    );
    let healthy = report(
        "hand-over after resign, healthy, proxied",
        &mut hand_overs(&ea, &eb, rounds).await,
    );
    // One node frozen: both candidates' links to it held.
    pa[4].set_cut(true);
    pb[4].set_cut(true);
    let frozen = report(
        "hand-over after resign, 1 of 5 frozen, proxied",
        &mut hand_overs(&ea, &eb, rounds).await,
    );
    pa[4].set_cut(false);
    pb[4].set_cut(false);
    println!(
        "frozen / healthy p50: {:.2}x",
        frozen.as_secs_f64() / healthy.as_secs_f64()
    );

    let kills = (rounds / 20).max(3);
    report(
        "next leader after the leader is killed",
        &mut after_kill(&urls, kills).await,
    );
    println!(
        "  (bound: TTL {} ms + one retry pause {} ms)",
        TTL.as_millis(),
        Retry::default().max_delay().as_millis()
    );

    let (_, c) = client(&urls, Retry::default()).await;
    let observed = Election::new(&c, &format!("{name}:observed")).unwrap();
    report(
        "observe() after a grant or a resignation",
        &mut observe_delays(&observed, rounds / 2).await,
    );
}
