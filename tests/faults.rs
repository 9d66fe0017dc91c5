//! Faults on the five real nodes: frozen (docker pause / SIGSTOP), killed and
//! restarted with their AOF, down or frozen at start-up.
//!
//! The tests change the shared cluster, so they take turns through one
//! mutex, and every fault is undone by a guard even when a test fails.

mod support;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Answer, LockError, NodeError, Redlock};
use support::*;
use tokio::sync::Mutex;

static CLUSTER: Mutex<()> = Mutex::const_new(());

/// A frozen node must never stall a round: a generous ceiling, far below
/// what waiting for the frozen node would cost (the TCP response timeout).
const NO_STALL: Duration = Duration::from_millis(750);

async fn client() -> Redlock {
    Redlock::builder()
        .nodes(node_urls())
        .node_timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("connect")
}

/// Polls `f` until it returns true, for at most `bound`.
async fn eventually<F, Fut>(bound: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether node `needed` (1-based) grants: another holder sits on two other
/// nodes, so a lock on `resource` is granted only with `needed`'s vote.
async fn grants_with_node(redlock: &Redlock, resource: &str, needed: usize) -> bool {
    let mut conns = raw_all().await;
    let key = lock_key(resource);
    let others: Vec<usize> = (1..=5).filter(|&n| n != needed).take(2).collect();
    for &n in &others {
        let _: () = conns[n - 1]
            .set_ex(&key, "another-holder", 30)
            .await
            .unwrap();
    }
    let granted = match redlock.try_lock(resource, Duration::from_secs(5)).await {
        Ok(lock) => {
            lock.release().await.unwrap();
            true
        }
        Err(_) => false,
    };
    for &n in &others {
        let _: () = conns[n - 1].del(&key).await.unwrap();
    }
    granted
}

#[tokio::test]
async fn minority_frozen_during_rounds_costs_at_most_the_node_timeout() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("frozen-minority");
    let mut worst = Duration::ZERO;
    for i in 0..60 {
        // Freeze node 5 a third of the way in, thaw it at two thirds.
        let _frozen = (20..40).contains(&i).then(|| Frozen::new(&[5]));
        let start = Instant::now();
        let mut lock = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        lock.extend(Duration::from_secs(5)).await.unwrap();
        lock.release().await.unwrap();
        worst = worst.max(start.elapsed());
    }
    assert!(worst < NO_STALL, "a cycle took {worst:?}");
    // Nothing left behind, on the frozen node either, once it has caught up.
    let mut conns = raw_all().await;
    eventually_snapshot(
        &mut conns,
        &resource,
        &vec![Default::default(); 5],
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn majority_frozen_is_unavailable_then_recovers_without_leftovers() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("frozen-majority");
    {
        let _frozen = Frozen::new(&[1, 2, 3]);
        for _ in 0..5 {
            let start = Instant::now();
            match redlock.try_lock(&resource, Duration::from_secs(5)).await {
                Err(LockError::Unavailable { votes }) => {
                    assert!(votes.failed() >= 3, "{votes}");
                    for (node, answer) in votes.iter().take(3) {
                        assert_eq!(*answer, Answer::Failed(NodeError::TimedOut), "{node}");
                    }
                }
                other => panic!("expected Unavailable, got {other:?}"),
            }
            assert!(start.elapsed() < NO_STALL, "took {:?}", start.elapsed());
        }
    }
    // Thawed: the queued acquires and their releases run in order, and the
    // next round is granted.
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    let mut conns = raw_all().await;
    eventually_snapshot(
        &mut conns,
        &resource,
        &vec![Default::default(); 5],
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn node_down_at_connect_does_not_delay_and_rejoins() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("down-at-start");
    let killed = Killed::new(2);
    let start = Instant::now();
    let redlock = client().await;
    assert!(
        start.elapsed() < NO_STALL,
        "connect took {:?}",
        start.elapsed()
    );

    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    match redlock.try_lock(&resource, Duration::from_millis(50)).await {
        Ok(lock) => drop(lock),
        Err(e) => panic!("four of five nodes must grant: {e}"),
    }

    drop(killed); // node 2 starts again
    let probe = unique("down-at-start-probe");
    eventually(Duration::from_secs(10), "node 2 rejoins", || {
        grants_with_node(&redlock, &probe, 2)
    })
    .await;
}

#[tokio::test]
async fn node_frozen_at_connect_does_not_delay() {
    let _turn = CLUSTER.lock().await;
    let resource = unique("frozen-at-start");
    let frozen = Frozen::new(&[4]);
    let start = Instant::now();
    let redlock = client().await;
    assert!(
        start.elapsed() < NO_STALL,
        "connect took {:?}",
        start.elapsed()
    );
    let start = Instant::now();
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    assert!(
        start.elapsed() < NO_STALL,
        "lock+release took {:?}",
        start.elapsed()
    );
    drop(frozen);
}

/// A node killed and restarted from its AOF keeps our key, loses its script
/// cache (NOSCRIPT → EVAL fallback) and is reconnected in the background.
#[tokio::test]
async fn restarted_node_keeps_keys_and_scripts_still_work() {
    let _turn = CLUSTER.lock().await;
    let redlock = client().await;
    let resource = unique("restart");
    let mut lock = redlock
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    drop(Killed::new(1)); // kill, then start with the same data

    let mut conn = raw(0).await;
    let v: Option<String> = conn.get(lock_key(&resource)).await.unwrap();
    assert_eq!(v.as_deref(), Some(lock.token()), "AOF lost the key");

    // The old connection is dead: the first call to node 1 sees it, the quorum
    // still extends, and the background task reconnects; node 1's script
    // cache is empty, so its first script call falls back to EVAL.
    lock.extend(Duration::from_secs(30)).await.unwrap();
    let probe = unique("restart-probe");
    eventually(Duration::from_secs(10), "node 1 rejoins", || {
        grants_with_node(&redlock, &probe, 1)
    })
    .await;
    lock.extend(Duration::from_secs(30)).await.unwrap();
    lock.release().await.unwrap();
}

/// One node behind a 20 ms link, then cut off: neither slows a round, since
/// the quorum never waits for that node.
#[tokio::test]
async fn slow_or_cut_node_does_not_slow_rounds() {
    let _turn = CLUSTER.lock().await;
    let urls = node_urls();
    let proxy = support::proxy::Proxy::start(urls[0].trim_start_matches("redis://")).await;
    let mut via_proxy = urls.clone();
    via_proxy[0] = proxy.url();
    let redlock = Redlock::builder()
        .nodes(&via_proxy)
        .node_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let resource = unique("slow-link");
    // Healthy link: node 1 takes part.
    assert!(grants_with_node(&redlock, &resource, 1).await);
    proxy.set_latency(Duration::from_millis(20));
    // Slow link: still granted with node 1 needed (40 ms < 200 ms timeout)…
    assert!(grants_with_node(&redlock, &resource, 1).await);
    // …and without needing it, a round does not wait for it.
    for _ in 0..5 {
        let start = Instant::now();
        let lock = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .unwrap();
        lock.release().await.unwrap();
        assert!(
            start.elapsed() < Duration::from_millis(40),
            "{:?}",
            start.elapsed()
        );
    }
    proxy.set_latency(Duration::ZERO);
    proxy.set_cut(true);
    assert!(
        !grants_with_node(&redlock, &resource, 1).await,
        "granted through a cut link"
    );
    proxy.set_cut(false);
    assert!(
        grants_with_node(&redlock, &resource, 1).await,
        "link healed"
    );
}
