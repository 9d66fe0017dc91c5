//! Waiters through a quarantine of every node: they sleep until a quorum can
//! count again, rather than spin.

use super::*;
use redquorum::LeaseOptions;

/// Script calls (`EVAL`, `EVALSHA`, `FCALL` and their read-only forms)
/// each node has run, from `INFO commandstats`.
async fn script_calls() -> Vec<u64> {
    let mut calls = Vec::new();
    for mut conn in raw_all().await {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        let n: u64 = info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.split_once(':')?;
                let name = name.strip_prefix("cmdstat_")?;
                [
                    "eval",
                    "evalsha",
                    "eval_ro",
                    "evalsha_ro",
                    "fcall",
                    "fcall_ro",
                ]
                .contains(&name)
                .then_some(())?;
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        calls.push(n);
    }
    calls
}

/// What one client's three waiters made of a quarantine.
#[derive(Debug)]
struct Through {
    fence: u64,
    term: u64,
}

/// A waiting plain lock, a waiting fenced lock and an election campaign
/// on `redlock`, each granted once no quorum is quarantined any more; the
/// fence and the term they were granted.
async fn wait_through(redlock: &Redlock, ttl: Duration) -> Through {
    let wait = redquorum::LockOptions::new().wait(Duration::from_secs(120));
    let (fenced_wait, campaign) = (wait.clone().fenced(), redquorum::AcquireOptions::new());
    let (plain, fenced) = (unique("quarantine-plain"), unique("quarantine-fenced"));
    let election = redquorum::election::Election::new(redlock, &unique("quarantine-term")).unwrap();
    let lease = LeaseOptions::new();
    let (plain, fenced, leader) = tokio::join!(
        redlock.lock_with(&plain, ttl, &wait),
        redlock.lock_with(&fenced, ttl, &fenced_wait),
        election.campaign_with(ttl, &campaign, &lease),
    );
    let (plain, fenced, leader) = (plain.unwrap(), fenced.unwrap(), leader.unwrap());
    let through = Through {
        fence: fenced.fence().unwrap(),
        term: leader.term(),
    };
    plain.release().await.unwrap();
    fenced.release().await.unwrap();
    leader.resign().await.unwrap();
    through
}

/// Waiters sleep through a quarantine of every node. All five restarted
/// bare, two clients (release notifications off and on) each run a
/// waiting plain lock, a waiting fenced lock and a campaign through it:
/// each waiter makes at most 30 rounds (an acquire and its undo, two
/// script calls per node) until a quorum counts again. The review had measured 196-709 script
/// calls per second on each node with notifications on (a waiter woken by
/// its own refused round's undo), a fence counter at 653 and a term at
/// 849, and about 19 calls a second with them off.
///
/// The restarts take seconds each, one after another: `max_ttl` is chosen
/// so that the last node restarted is still quarantined 4 s after the
/// clients are built; a quorum counts again once the third node's
/// quarantine is over, (much) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_sleep_through_a_quarantine_of_every_node() {
    let _turn = TURN.lock().await;
    let ttl = Duration::from_secs(3);
    let mut bare = Bare(Vec::new());
    let first = Instant::now();
    for node in 1..=5 {
        bare.restart(node);
    }
    let max_ttl = Duration::from_secs(first.elapsed().as_secs() + 5);
    let client = |notify| {
        patient()
            .max_ttl(max_ttl)
            .deployment_record(false)
            .notify_waiters(notify)
            .build()
    };
    let (off, on) = (client(false).await.unwrap(), client(true).await.unwrap());
    until_quarantined(&off, &[1, 2, 3, 4, 5]).await;
    until_quarantined(&on, &[1, 2, 3, 4, 5]).await;
    let blocked = off.nodes().probe(Duration::from_secs(1)).await[2]
        .quarantined_for
        .expect("node 3 quarantined");
    let before = script_calls().await;
    let start = Instant::now();
    let (through_off, through_on) = tokio::join!(wait_through(&off, ttl), wait_through(&on, ttl));
    let waited = start.elapsed();
    let after = script_calls().await;
    let calls: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    println!(
        "no quorum for {blocked:?}, waited {waited:?}: script calls per node {calls:?}; \
         notifications off {through_off:?}, on {through_on:?}"
    );
    assert!(
        waited + Duration::from_millis(100) >= blocked,
        "granted in quarantine"
    );
    // Two clients, three waiters each, 30 rounds of two calls, and a few
    // calls past the grants (write-backs, releases, a resignation).
    let most = 2 * 3 * 2 * 30 + 20;
    for (node, n) in calls.iter().enumerate() {
        assert!(*n <= most, "{n} script calls on node {}", node + 1);
    }
    // The counters are floored at the nodes' clocks (docs/fencing.md §8):
    // their values no longer count rounds, the calls above do; the rounds
    // with notifications on against off are counted in memory
    // (tests/in_memory/quarantine_waits.rs).
    for (how, run) in [("off", &through_off), ("on", &through_on)] {
        assert!(
            run.fence > 0 && run.term > 0,
            "notifications {how}: {run:?}"
        );
    }
    off.shutdown().await;
    on.shutdown().await;
    drop(bare);
}
