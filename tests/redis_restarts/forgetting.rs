//! Restarts that look durable but forget — AOF switched off at run time,
//! a wiped volume, `FLUSHALL` then a restart — and the dataset mark that
//! lets a client trusting durable restarts tell them from a kept dataset.

use super::*;

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

/// The end of a test whose nodes 1–3 forgot `lock`'s key: no contender
/// ([`contenders_granted`]) is granted while `lock` is valid; then the lock
/// is released and nodes 1–3 [`adopt`]ed (their data was lost on purpose,
/// the next tests' clients may count them).
/// A client trusting durable restarts holding `resource` for 30 s, its
/// grant settled on every node.
async fn held(resource: &str) -> (Redlock, redquorum::Lock) {
    let holder = patient().build().await.unwrap();
    let lock = holder
        .lock(resource, Duration::from_secs(30))
        .await
        .expect("healthy nodes grant");
    settled(&holder).await;
    (holder, lock)
}

async fn no_second_holder(resource: &str, lock: redquorum::Lock, known: &[&Redlock]) {
    let granted = contenders_granted(resource, known).await;
    let valid = lock.is_valid();
    lock.release().await.unwrap();
    for node in 1..=3 {
        adopt(node);
    }
    assert!(valid, "the holder's lock outlived the checks");
    assert_eq!(granted, 0, "a second holder while the first was valid");
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
        // SIGKILL, then start with the durable config.
        tokio::task::block_in_place(|| drop(Killed::new(node)));
    }
    assert_eq!(
        holding_token(&lock_key(&resource), lock.token()).await,
        2,
        "nodes 1-3 came back without the key"
    );
    no_second_holder(&resource, lock, &[&known_default, &known_trusting]).await;
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
    let (_holder, lock) = held(&resource).await;
    for node in 1..=3 {
        wipe_restart(node);
    }
    no_second_holder(&resource, lock, &[]).await;
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
    let (_holder, lock) = held(&resource).await;
    let mut conns = raw_all().await;
    for conn in &mut conns[..3] {
        let _: () = redis::cmd("FLUSHALL").query_async(conn).await.unwrap();
    }
    for node in 1..=3 {
        tokio::task::block_in_place(|| drop(Killed::new(node)));
    }
    assert_eq!(holding_token(&lock_key(&resource), lock.token()).await, 2);
    no_second_holder(&resource, lock, &[&known_default, &known_trusting]).await;
}
