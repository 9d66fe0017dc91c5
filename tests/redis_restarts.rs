//! Nodes that restart and forget, on the five real nodes: the delayed
//! restart kept by the client. Nodes restarted empty and without
//! persistence (`scripts/nodes bare-restart N`) are quarantined for the
//! longest TTL, so a contender is refused while a holder's keys are gone
//! from a majority; a lease is kept through every node restarting empty one
//! after another; with the quarantine off (the negative control) a second
//! holder gets in. Also: missing permissions and evicting policies are
//! found at connect.
//!
//! The tests change the shared nodes, so they take turns, and every node
//! they restart bare is restarted durable (and empty) again by a guard, so
//! that later tests meet durable nodes.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Redlock};
use support::acl::AclUser;
use support::*;
use tokio::sync::Mutex;

static TURN: Mutex<()> = Mutex::const_new(());

/// Nodes (1-based) restarted bare for as long as this lives; restarted
/// durable and empty on drop, even when the test fails.
struct Bare(Vec<usize>);

impl Bare {
    fn restart(&mut self, node: usize) {
        nodes_script(&["bare-restart", &node.to_string()]);
        self.0.push(node);
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        for node in &self.0 {
            restore_durable(*node);
        }
    }
}

/// Probes `redlock` (every 50 ms, at most `bound`) until `done` holds of
/// its nodes' health; that health.
async fn until_health(
    redlock: &Redlock,
    bound: Duration,
    what: &str,
    done: impl Fn(&[redquorum::NodeHealth]) -> bool,
) -> Vec<redquorum::NodeHealth> {
    let start = Instant::now();
    loop {
        let health = redlock.probe(Duration::from_secs(1)).await;
        if done(&health) {
            return health;
        }
        assert!(
            start.elapsed() < bound,
            "{what} within {bound:?}: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 10 s) until `redlock` has reconnected to `nodes` (1-based)
/// and sees each quarantined.
async fn until_quarantined(redlock: &Redlock, nodes: &[usize]) {
    let quarantined = |health: &[redquorum::NodeHealth]| {
        nodes
            .iter()
            .all(|n| health[n - 1].quarantined_for.is_some())
    };
    let what = format!("nodes {nodes:?} seen quarantined");
    let health = until_health(redlock, Duration::from_secs(10), &what, quarantined).await;
    for n in nodes {
        assert_eq!(health[n - 1].durable, Some(false), "{:?}", health[n - 1]);
    }
}

/// A quarantine ends no sooner than `max_ttl` after the restart, wherever
/// the handshake falls against the server's whole seconds. The server's
/// `uptime_in_seconds` is its clock's whole seconds less its start's whole
/// seconds: started at x.98 s and asked at (x+1).05 s, it says 1 s where
/// 0.07 s passed. Here each node is started just before a whole second of
/// the wall clock while the client's proxy to it is down, and the proxy
/// comes back up just after that second. Taking the uptime at its word
/// ended the quarantine up to a second early (seen failing; a chaos run on
/// the Valkey nodes had found the overlap that allows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_lasts_max_ttl_from_the_restart_wherever_the_second_falls() {
    let _turn = TURN.lock().await;
    let mut bare = Bare(Vec::new());
    let max_ttl = Duration::from_secs(3);
    let proxies = node_proxies().await;
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(proxy::Proxy::url))
        .node_timeout(Duration::from_secs(1))
        .max_ttl(max_ttl)
        .build()
        .await
        .unwrap();
    let until_wall_ms = |ms: u64| {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(
            (ms + 1_000 - u64::from(wall.subsec_millis())) % 1_000,
        ))
    };
    for node in 1..=3 {
        let proxy = &proxies[node - 1];
        proxy.set_down(true);
        // Down first, so that the restart below is only the start.
        nodes_script(&["kill", &node.to_string()]);
        until_wall_ms(960).await;
        // The new process starts after this instant.
        let before = Instant::now();
        bare.restart(node);
        let restarted_in = before.elapsed();
        until_wall_ms(50).await;
        proxy.set_down(false);
        until_quarantined(&redlock, &[node]).await;
        let health = redlock.probe(Duration::from_secs(1)).await;
        let seen = Instant::now();
        let left = health[node - 1]
            .quarantined_for
            .expect("quarantined since the line above");
        // `left` was read during the probe, so the end is at most `seen +
        // left`: it must be at least `max_ttl` after `before`.
        let end = seen + left;
        println!(
            "node {node}: started in {restarted_in:?}, quarantined until {:?} after",
            end - before
        );
        assert!(
            end >= before + max_ttl,
            "node {node}'s quarantine ends {:?} after its start, before max_ttl {max_ttl:?}",
            end - before
        );
    }
}

/// A holds a lock (TTL 30 s); nodes 1, 2 and 3 restart empty in quick
/// succession, so A's key is gone from a majority. A contender — one
/// connected before the restarts, and one connecting after — is refused:
/// the restarted nodes' yes does not count. A's extension restores its key
/// there and counts it. With the quarantine off, the contender gets the
/// lock while A's is valid: what the quarantine prevents (seen before it).
#[tokio::test]
async fn a_contender_is_refused_after_three_empty_restarts() {
    let _turn = TURN.lock().await;
    let mut bare = Bare(Vec::new());
    let holder = redlock().await;
    let before = redlock().await;
    let unguarded = patient().restart_quarantine(false).build().await.unwrap();
    let resource = unique("restarts-contender");
    let ttl = Duration::from_secs(30);
    let mut lock = holder
        .lock(&resource, ttl)
        .await
        .expect("healthy nodes grant");
    for node in 1..=3 {
        bare.restart(node);
    }
    let after = redlock().await;
    for contender in [&before, &after] {
        until_quarantined(contender, &[1, 2, 3]).await;
        let refused = contender.try_lock(&resource, ttl).await;
        let error = refused.expect_err("a contender got the lock while the holder's is valid");
        // The quarantined nodes said yes, uncounted. The round decides as
        // soon as a majority cannot be reached: nodes 4 and 5 (held) and
        // one quarantined yes are enough, so only one of nodes 1-3 is sure
        // to have answered; the others answered the same or were not
        // waited for.
        let votes = error.votes().expect("votes");
        assert_eq!(votes.yes(), 0, "{error}");
        assert!(
            votes.count(|a| *a == redquorum::Answer::Quarantined) >= 1,
            "{error}"
        );
        for (n, (_, answer)) in votes.iter().enumerate().take(3) {
            assert!(
                matches!(
                    answer,
                    redquorum::Answer::Quarantined | redquorum::Answer::Undecided
                ),
                "node {}: {answer:?} ({error})",
                n + 1
            );
        }
    }
    assert!(lock.is_valid());
    until_quarantined(&holder, &[1, 2, 3]).await;
    lock.extend(ttl)
        .await
        .expect("the holder's extension counts its restores");
    // The extension returns at its quorum: the last restores land after.
    settled(&holder).await;
    let key = lock_key(&resource);
    assert_eq!(holding_token(&key, lock.token()).await, 5);
    lock.release().await.unwrap();

    // The negative control: the same, the quarantine off (for the holder
    // too, which could not take a new lock with three nodes quarantined).
    let unguarded_holder = patient().restart_quarantine(false).build().await.unwrap();
    let lock = unguarded_holder.lock(&resource, ttl).await.unwrap();
    for node in 1..=3 {
        bare.restart(node);
    }
    let start = Instant::now();
    let second = loop {
        if let Ok(second) = unguarded.try_lock(&resource, ttl).await {
            break second;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the control never got in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        lock.is_valid() && second.is_valid(),
        "two valid holders at once"
    );
    second.release().await.unwrap();
    drop(lock);
}

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
    let (fenced_wait, campaign) = (wait.clone().fenced(), redquorum::LockOptions::new());
    let (plain, fenced) = (unique("quarantine-plain"), unique("quarantine-fenced"));
    let election = redquorum::election::Election::new(redlock, &unique("quarantine-term")).unwrap();
    let (plain, fenced, leader) = tokio::join!(
        redlock.lock_with(&plain, ttl, &wait),
        redlock.lock_with(&fenced, ttl, &fenced_wait),
        election.campaign(ttl, &campaign),
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
    let client = |notify| patient().max_ttl(max_ttl).notify_waiters(notify).build();
    let (off, on) = (client(false).await.unwrap(), client(true).await.unwrap());
    until_quarantined(&off, &[1, 2, 3, 4, 5]).await;
    until_quarantined(&on, &[1, 2, 3, 4, 5]).await;
    let blocked = off.probe(Duration::from_secs(1)).await[2]
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

/// How many of the five nodes hold `token` under `key`.
async fn holding_token(key: &str, token: &str) -> usize {
    let mut held = 0;
    for mut conn in raw_all().await {
        let value: Option<String> = redis::AsyncCommands::get(&mut conn, key).await.unwrap();
        held += usize::from(value.as_deref() == Some(token));
    }
    held
}

/// Durable nodes, then each restarted empty and bare, one after another
/// 1 s apart, under a keep-alive lease and a `run` lease (TTL 10 s) while a
/// contender tries both all the time: both leases are kept, and the
/// contender never holds either while a lease is valid. Runs
/// `REDQUORUM_RESTART_RUNS` times (default 1; the figures in
/// docs/operations.md are from 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_kept_through_a_rolling_empty_restart() {
    let _turn = TURN.lock().await;
    let runs: usize = std::env::var("REDQUORUM_RESTART_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let ttl = Duration::from_secs(10);
    let (mut kept, mut second) = (0, 0);
    for run in 0..runs {
        let mut bare = Bare(Vec::new());
        let holder = redlock().await;
        let contender = redlock().await;
        let kept_alive = unique("restarts-keepalive");
        let ran = unique("restarts-run");
        let keep = holder
            .lock(&kept_alive, ttl)
            .await
            .unwrap()
            .keep_alive()
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let seconds = Arc::new(AtomicUsize::new(0));
        // The contender: both resources, all the time once both leases are
        // held (before, it may win the `run` lease's first round fairly).
        let (leased_tx, leased_rx) = tokio::sync::oneshot::channel::<()>();
        let trying = {
            let (done, seconds) = (Arc::clone(&done), Arc::clone(&seconds));
            let resources = [kept_alive.clone(), ran.clone()];
            async move {
                let _ = leased_rx.await;
                while !done.load(Ordering::Acquire) {
                    for r in &resources {
                        if let Ok(lock) = contender.try_lock(r, ttl).await {
                            seconds.fetch_add(1, Ordering::AcqRel);
                            drop(lock);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let restarts = async {
            for node in 1..=5 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| bare.restart(node));
            }
            // One more extension of each lease after the last restart.
            tokio::time::sleep(ttl / 2).await;
        };
        let leased = holder.run(&ran, ttl, |lease| async move {
            let _ = leased_tx.send(());
            restarts.await;
            lease.is_valid()
        });
        let ((), leased) = tokio::join!(trying, async {
            let out = leased.await;
            done.store(true, Ordering::Release);
            out
        });
        let ok = matches!(leased, Ok(true)) && keep.lease().is_valid() && !keep.lease().is_lost();
        kept += usize::from(ok);
        second += seconds.load(Ordering::Acquire);
        eprintln!(
            "run {run}: run lease {leased:?}, keep-alive valid {}, contender grants {}",
            keep.lease().is_valid(),
            seconds.load(Ordering::Acquire)
        );
        keep.release().await.unwrap();
        drop(bare);
    }
    eprintln!(
        "rolling empty restarts: leases kept in {kept} of {runs} runs, {second} grants to the contender"
    );
    assert_eq!(kept, runs, "a lease was lost");
    assert_eq!(
        second, 0,
        "the contender held a lock while a lease was valid"
    );
}

/// A client logging in as `user` (password `pw`), waiting for every first
/// connection attempt.
async fn build_as(user: &AclUser) -> Result<Redlock, ConfigError> {
    Redlock::builder()
        .nodes(user.urls("pw"))
        .connect_timeout(Duration::from_secs(5))
        .require_quorum(true)
        .build()
        .await
}

/// A user who may not run the scripts: the client refuses to build, naming
/// the node and the command, before any lock is taken (the CLI exits 77).
#[tokio::test]
async fn a_user_without_script_permissions_is_refused_at_connect() {
    // Not beside a bare restart, which forgets the ACL users.
    let _turn = TURN.lock().await;
    let user = AclUser::create(
        "noscripts",
        &[
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-fcall",
            "-function|load",
            "-eval",
        ],
    )
    .await;
    let built = build_as(&user).await;
    match built {
        Err(ConfigError::Permission { node, message }) => {
            assert!(message.contains("eval"), "{message}");
            assert!(node.starts_with("redis://"), "{node}");
            assert!(!node.contains("pw"));
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
    // A command called inside the scripts, denied: named too.
    let user = AclUser::create("nopexpire", &["on", ">pw", "~*", "&*", "+@all", "-pexpire"]).await;
    let built = build_as(&user).await;
    match built {
        Err(ConfigError::Permission { message, .. }) => {
            assert!(message.contains("pexpire"), "{message}");
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
}

/// A node with a memory limit and an evicting policy is named at connect
/// (`probe`, the metric, the log), and refused under `strict`.
#[tokio::test]
async fn an_evicting_policy_is_named_at_connect_and_refused_when_strict() {
    let _turn = TURN.lock().await;
    let mut conn = raw(0).await;
    let set = |conn: &mut redis::aio::MultiplexedConnection, name: &str, value: &str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg(name).arg(value);
        let conn = conn.clone();
        async move {
            let mut conn = conn;
            let _: () = cmd.query_async(&mut conn).await.unwrap();
        }
    };
    set(&mut conn, "maxmemory", "1gb").await;
    set(&mut conn, "maxmemory-policy", "volatile-lru").await;
    let redlock = redlock().await;
    let health = redlock.probe(Duration::from_secs(1)).await;
    let strict = patient()
        .strict(true)
        .connect_timeout(Duration::from_secs(5))
        .require_quorum(true)
        .build()
        .await;
    set(&mut conn, "maxmemory-policy", "noeviction").await;
    set(&mut conn, "maxmemory", "0").await;
    assert_eq!(
        health[0].evicting.as_deref(),
        Some("volatile-lru"),
        "{health:?}"
    );
    assert!(health[1..].iter().all(|h| h.evicting.is_none()));
    match strict {
        Err(ConfigError::Evicting { node, policy }) => {
            assert_eq!(policy, "volatile-lru");
            assert_eq!(node, node_urls()[0]);
        }
        other => panic!("expected an eviction refusal, got {other:?}"),
    }
}

/// Every contender below must be refused while `holder` is valid: a client
/// that knew the old processes and a fresh one, by default and trusting
/// durable restarts. Returns how many were granted.
async fn contenders_granted(resource: &str, known: &[&Redlock]) -> usize {
    let fresh_default = Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let fresh_trusting = patient().build().await.unwrap();
    let mut granted = 0;
    let contenders = known
        .iter()
        .copied()
        .chain([&fresh_default, &fresh_trusting]);
    for (i, contender) in contenders.enumerate() {
        // Connected to every node first (a node still reconnecting counts
        // as a no, which proves nothing).
        let reachable = |health: &[redquorum::NodeHealth]| health.iter().all(|h| h.is_reachable());
        until_health(
            contender,
            Duration::from_secs(10),
            "every node reachable",
            reachable,
        )
        .await;
        match contender.try_lock(resource, Duration::from_secs(5)).await {
            Ok(lock) => {
                granted += 1;
                eprintln!("contender {i} granted while the holder's lock is valid");
                lock.release().await.unwrap();
            }
            Err(e) => eprintln!("contender {i} refused: {e}"),
        }
    }
    granted
}

/// A default client: every restart quarantined.
async fn default_client() -> Redlock {
    Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap()
}

/// AOF switched off at run time on nodes 1–3 (`CONFIG SET appendonly no`),
/// a lock taken on all five, nodes 1–3 restarted with their durable
/// configuration (SIGKILL, then started): they replay the AOF as it was
/// when it was switched off, without the lock's key, while reporting
/// `aof_enabled:1` and `appendfsync always`. No contender — one that knew
/// the old processes or a fresh one, by default or trusting durable
/// restarts — is granted while the lock is valid (an outside review saw a
/// second holder in 4 runs of 4 before every restart was quarantined). The
/// restart comes 6 s after the switch: trusting durable restarts, the
/// dataset mark's last persisted stamp is then older than the 5 s a kept
/// dataset allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_switched_off_then_restarted_admits_no_second_holder() {
    let _turn = TURN.lock().await;
    let resource = unique("restarts-aof-off");
    let ttl = Duration::from_secs(30);
    let known_default = default_client().await;
    let known_trusting = patient().build().await.unwrap();
    let holder = patient().build().await.unwrap();
    let mut conns = raw_all().await;
    for conn in &mut conns[..3] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("no")
            .query_async(conn)
            .await
            .unwrap();
    }
    let lock = holder
        .lock(&resource, ttl)
        .await
        .expect("healthy nodes grant");
    settled(&holder).await;
    assert_eq!(holding_token(&lock_key(&resource), lock.token()).await, 5);
    tokio::time::sleep(Duration::from_secs(6)).await;
    for node in 1..=3 {
        drop(Killed::new(node)); // SIGKILL, then start with the durable config
    }
    assert_eq!(
        holding_token(&lock_key(&resource), lock.token()).await,
        2,
        "nodes 1-3 came back without the key"
    );
    let granted = contenders_granted(&resource, &[&known_default, &known_trusting]).await;
    let valid = lock.is_valid();
    lock.release().await.unwrap();
    for node in 1..=3 {
        adopt(node);
    }
    assert!(valid, "the holder's lock outlived the checks");
    assert_eq!(granted, 0, "a second holder while the first was valid");
}

/// A durable node's data directory lost (what a container without a
/// persistent volume does on every restart), on nodes 1–3, while a lock
/// is held on all five: a fresh client — the CLI is one on every run — is
/// refused, by default and trusting durable restarts (the dataset mark is
/// gone). An outside review saw a fresh client granted in 2 runs of 2 when
/// a durable node met first was trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_durable_node_met_first_admits_no_second_holder() {
    let _turn = TURN.lock().await;
    let resource = unique("restarts-wiped");
    let holder = patient().build().await.unwrap();
    let lock = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .expect("healthy nodes grant");
    settled(&holder).await;
    for node in 1..=3 {
        wipe_restart(node);
    }
    let granted = contenders_granted(&resource, &[]).await;
    let valid = lock.is_valid();
    lock.release().await.unwrap();
    for node in 1..=3 {
        adopt(node);
    }
    assert!(valid, "the holder's lock outlived the checks");
    assert_eq!(
        granted, 0,
        "a fresh client was granted while the lock was valid"
    );
}

/// Waits (at most 20 s) until `redlock` counts every node: no quarantine.
async fn until_counted(redlock: &Redlock) {
    let counted = |health: &[redquorum::NodeHealth]| {
        health
            .iter()
            .all(|h| h.is_reachable() && h.quarantined_for.is_none())
    };
    until_health(
        redlock,
        Duration::from_secs(20),
        "every node counted",
        counted,
    )
    .await;
}

/// Fencing tokens and election terms across restarts that forget, with no
/// lock taken between them: every node restarted empty and bare one after
/// another, then all five at once. Each later token and term is larger
/// than every earlier one: a counter is floored at its node's clock in
/// microseconds, so a node that lost it starts again above every token its
/// clock has seen pass (docs/fencing.md, "Restarts"). An outside review saw
/// 2 of 7 tokens and 2 of 7 terms go back in a rolling restart, and term 1
/// after term 5 when all five restarted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_terms_never_go_back_across_empty_restarts() {
    let _turn = TURN.lock().await;
    let mut bare = Bare(Vec::new());
    let resource = unique("restarts-tokens");
    let max_ttl = Duration::from_secs(2);
    let client = || {
        Redlock::builder()
            .nodes(node_urls())
            .node_timeout(Duration::from_secs(1))
            .max_ttl(max_ttl)
            .build()
    };
    let draw = |redlock: Redlock| {
        let resource = resource.clone();
        async move {
            until_counted(&redlock).await;
            let lock = redlock.lock_fenced(&resource, max_ttl).await.unwrap();
            let token = lock.fence().unwrap();
            lock.release().await.unwrap();
            let election =
                redquorum::election::Election::new(&redlock, &format!("{resource}:election"))
                    .unwrap();
            let leadership = election
                .campaign(max_ttl, &redquorum::LockOptions::new())
                .await
                .unwrap();
            let term = leadership.term();
            leadership.resign().await.unwrap();
            (token, term)
        }
    };
    let mut seen = vec![draw(client().await.unwrap()).await];
    // Quiet rolling: one node after another, nothing taken between.
    for node in 1..=5 {
        tokio::task::block_in_place(|| bare.restart(node));
    }
    seen.push(draw(client().await.unwrap()).await);
    // All five at once.
    tokio::task::block_in_place(|| {
        for node in 1..=5 {
            nodes_script(&["bare-restart", &node.to_string()]);
        }
    });
    seen.push(draw(client().await.unwrap()).await);
    eprintln!("(token, term) after each restart: {seen:?}");
    for pair in seen.windows(2) {
        assert!(pair[1].0 > pair[0].0, "a token went back: {seen:?}");
        assert!(pair[1].1 > pair[0].1, "a term went back: {seen:?}");
    }
}

/// The dataset mark's `at` on node `n` (1-based).
async fn mark_at(n: usize) -> Option<u64> {
    let mut conn = raw(n - 1).await;
    redis::cmd("HGET")
        .arg("redquorum:dataset:2")
        .arg("at")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A client that trusts durable restarts stamps every node's dataset mark
/// about once a second while it is connected, idle or not: what lets a
/// restart that kept its data count at once (docs/design.md §4b).
#[tokio::test]
async fn a_trusting_client_stamps_every_node_every_second() {
    let _turn = TURN.lock().await;
    let client = patient().build().await.unwrap();
    let first: Vec<Option<u64>> = futures::future::join_all((1..=5).map(mark_at)).await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let later: Vec<Option<u64>> = futures::future::join_all((1..=5).map(mark_at)).await;
    for (n, (a, b)) in first.iter().zip(&later).enumerate() {
        let (a, b) = (a.expect("stamped"), b.expect("stamped"));
        assert!(b >= a + 2_000, "node {}: stamped at {a}, then {b}", n + 1);
    }
    drop(client);
}

/// Times a hold was seen valid, `[first, last]`, per holder.
type Tenures = std::sync::Mutex<Vec<(usize, Instant, Instant)>>;

/// Holds longer than `per` at once among `tenures` (times a hold was seen
/// valid): the most that overlap at any instant.
fn most_at_once(tenures: &Tenures) -> usize {
    let tenures = tenures.lock().unwrap();
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for &(_, from, to) in tenures.iter() {
        edges.push((from, 1));
        edges.push((to, -1));
    }
    // Ends before starts at one instant: a hold seen valid until t and one
    // from t do not overlap.
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Watches `lease`-like validity for `hold`, sampling every 50 ms; the
/// span it was seen valid, if it was.
async fn seen_valid(is_valid: impl Fn() -> bool, hold: Duration) -> Option<(Instant, Instant)> {
    let from = Instant::now();
    if !is_valid() {
        return None;
    }
    let mut last = from;
    while from.elapsed() < hold {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !is_valid() {
            break;
        }
        last = Instant::now();
    }
    Some((from, last))
}

/// A rolling restart by docs/operations.md's runbook under the default
/// rule (every restart quarantined): each node killed and started from
/// its AOF, the next only once the last one's quarantine is over. Meanwhile
/// two candidates of one election, four tasks sharing a quota of two
/// permits, and three replicas of a once-per-period job (`hold_at_least`
/// of the period on one resource). At most one leader and two permit
/// holders are ever seen valid at once, the job never runs twice within a
/// period, and it runs in most periods (a restart's round may miss one).
/// With `max_ttl` 3 s the restart of five nodes takes about 5 × (restart +
/// 3 s); with the default 60 s, about 5.5 min (operations.md §8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_by_the_runbook_keeps_one_leader_the_quota_and_the_period() {
    let _turn = TURN.lock().await;
    let max_ttl = Duration::from_secs(3);
    let client = || {
        Redlock::builder()
            .nodes(node_urls())
            .node_timeout(Duration::from_secs(1))
            .max_ttl(max_ttl)
            .build()
    };
    let name = unique("runbook");
    let stop = Arc::new(AtomicBool::new(false));
    let leaders: Arc<Tenures> = Arc::default();
    let permits: Arc<Tenures> = Arc::default();
    let runs: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let period = Duration::from_secs(2);
    let mut tasks = Vec::new();
    for id in 0..2 {
        let (redlock, stop, leaders) = (client().await.unwrap(), stop.clone(), leaders.clone());
        let election =
            redquorum::election::Election::new(&redlock, &format!("{name}:leader")).unwrap();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let wait = redquorum::LockOptions::new().wait(Duration::from_secs(5));
                let _ = election
                    .lead(max_ttl, &wait, |lease| {
                        let leaders = leaders.clone();
                        async move {
                            if let Some((from, to)) =
                                seen_valid(|| lease.is_valid(), Duration::from_millis(1500)).await
                            {
                                leaders.lock().unwrap().push((id, from, to));
                            }
                        }
                    })
                    .await;
            }
        }));
    }
    for id in 0..4 {
        let (redlock, stop, permits) = (client().await.unwrap(), stop.clone(), permits.clone());
        let quota = redquorum::Semaphore::new(&redlock, &format!("{name}:quota"), 2).unwrap();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let wait = redquorum::LockOptions::new().wait(Duration::from_secs(5));
                if let Ok(permit) = quota.acquire_with(max_ttl, &wait).await {
                    if let Some((from, to)) =
                        seen_valid(|| permit.is_valid(), Duration::from_millis(300)).await
                    {
                        permits.lock().unwrap().push((id, from, to));
                    }
                    let _ = permit.release().await;
                }
            }
        }));
    }
    for _ in 0..3 {
        let (redlock, stop, runs) = (client().await.unwrap(), stop.clone(), runs.clone());
        let job = format!("{name}:nightly");
        tasks.push(tokio::spawn(async move {
            let once = redquorum::LockOptions::new().hold_at_least(period);
            while !stop.load(Ordering::Acquire) {
                if let Ok(lock) = redlock.lock_with(&job, max_ttl, &once).await {
                    runs.lock().unwrap().push(Instant::now());
                    let _ = lock.release().await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    let watcher = client().await.unwrap();
    let began = Instant::now();
    for node in 1..=5 {
        tokio::task::block_in_place(|| drop(Killed::new(node)));
        // The runbook: the next node only once this one counts again.
        let start = Instant::now();
        loop {
            let health = watcher.probe(Duration::from_secs(1)).await;
            let h = &health[node - 1];
            if h.is_reachable()
                && h.quarantined_for.is_none()
                && start.elapsed() > Duration::from_secs(1)
            {
                break;
            }
            assert!(start.elapsed() < max_ttl * 5, "node {node}: {h:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let took = began.elapsed();
    stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.unwrap();
    }
    // Every node restarted from its AOF: the later tests' clients, which
    // trust durable restarts, may count them at once (these clients did
    // not stamp the marks that would show it).
    for node in 1..=5 {
        adopt(node);
    }
    let mut runs = runs.lock().unwrap().clone();
    runs.sort();
    let gaps: Vec<Duration> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    let (leaders_at_once, permits_at_once) = (most_at_once(&leaders), most_at_once(&permits));
    println!(
        "rolling restart of five nodes in {took:?}: {} leaderships, at most {leaders_at_once} at once; \
         {} permits held, at most {permits_at_once} at once; {} runs of the job, gaps {gaps:?}",
        leaders.lock().unwrap().len(),
        permits.lock().unwrap().len(),
        runs.len()
    );
    assert_eq!(leaders_at_once, 1, "two leaders at once");
    assert!(
        permits_at_once <= 2,
        "{permits_at_once} permits of 2 at once"
    );
    // The client's clock may run slower than the nodes' by the drift: a
    // period on its clock is at least 99 % of one on theirs.
    for gap in &gaps {
        assert!(
            *gap >= period.mul_f64(0.98),
            "the job ran twice within {gap:?}"
        );
    }
    let periods = took.as_secs_f64() / period.as_secs_f64();
    assert!(
        runs.len() as f64 >= periods * 0.6,
        "{} runs in {periods:.1} periods",
        runs.len()
    );
}

/// `FLUSHALL` on nodes 1–3 while a lock is held there, then a restart of
/// each with its durable config: the flushed data is what the AOF replays.
/// No contender — one that knew the old processes or a fresh one, by
/// default or trusting durable restarts (the mark is gone with the data)
/// — is granted while the lock is valid. An outside review saw a fresh
/// client granted in 2 runs of 2 when durable-looking nodes were trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_then_a_restart_admits_no_second_holder() {
    let _turn = TURN.lock().await;
    let resource = unique("restarts-flushall");
    let known_default = default_client().await;
    let known_trusting = patient().build().await.unwrap();
    let holder = patient().build().await.unwrap();
    let lock = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .expect("healthy nodes grant");
    settled(&holder).await;
    let mut conns = raw_all().await;
    for conn in &mut conns[..3] {
        let _: () = redis::cmd("FLUSHALL").query_async(conn).await.unwrap();
    }
    for node in 1..=3 {
        tokio::task::block_in_place(|| drop(Killed::new(node)));
    }
    assert_eq!(holding_token(&lock_key(&resource), lock.token()).await, 2);
    let granted = contenders_granted(&resource, &[&known_default, &known_trusting]).await;
    let valid = lock.is_valid();
    lock.release().await.unwrap();
    for node in 1..=3 {
        adopt(node);
    }
    assert!(valid, "the holder's lock outlived the checks");
    assert_eq!(granted, 0, "a second holder while the first was valid");
}
