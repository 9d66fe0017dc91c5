//! Nodes that restart and forget, on the five real nodes: the delayed
//! restart kept by the client. Nodes restarted empty and without
//! persistence (`scripts/nodes bare-restart N`) are quarantined for the
//! longest TTL, so a contender is refused while a holder's keys are gone
//! from a majority; a lease is kept through every node restarting empty one
//! after another; with the quarantine off (the negative control) a second
//! holder gets in. Also: missing permissions and evicting policies are
//! found at connect. The modules: restarts that look durable but forget
//! (`forgetting`), tokens and terms across them (`counters`), waiters
//! through a quarantine (`waits`) and a rolling restart by the runbook
//! (`runbook`).
//!
//! The tests change the shared nodes, so they take turns, and every node
//! they restart bare is restarted durable (and empty) again by a guard, so
//! that later tests meet durable nodes.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Redlock};
use redquorum_test_support::checks::eventually_ok;
use support::acl::AclUser;
use support::*;
use tokio::sync::Mutex;

mod counters;
mod forgetting;
mod runbook;
mod waits;

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

/// Probes `redlock` (as [`eventually_ok`], at most `bound`) until `done`
/// holds of its nodes' health; that health.
async fn until_health(
    redlock: &Redlock,
    bound: Duration,
    what: &str,
    done: impl Fn(&[redquorum::NodeHealth]) -> bool,
) -> Vec<redquorum::NodeHealth> {
    eventually_ok(what, bound, async || {
        let health = redlock.nodes().probe(Duration::from_secs(1)).await;
        if done(&health) {
            Ok(health)
        } else {
            Err(format!("{health:?}"))
        }
    })
    .await
}

/// Waits (at most 10 s) until `redlock` has reconnected to `nodes` (1-based)
/// and sees each quarantined.
/// A client of the five nodes with `max_ttl` that trusts no restart (the
/// default rule), its node timeout patient as the suite's. Its `max_ttl`
/// is not the suite's deployment's (60 s), so it keeps no deployment
/// record: these tests are about quarantines (tests/redis_agreement.rs
/// has the record's).
fn untrusting(max_ttl: Duration) -> redquorum::Builder {
    Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_secs(1))
        .max_ttl(max_ttl)
        .deployment_record(false)
}

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
        .deployment_record(false)
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
        let health = redlock.nodes().probe(Duration::from_secs(1)).await;
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
    let second = eventually_ok("the control gets in", Duration::from_secs(10), || {
        unguarded.try_lock(&resource, ttl)
    })
    .await;
    assert!(
        lock.is_valid() && second.is_valid(),
        "two valid holders at once"
    );
    second.release().await.unwrap();
    drop(lock);
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
    let health = redlock.nodes().probe(Duration::from_secs(1)).await;
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
