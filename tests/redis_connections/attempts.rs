//! A node's connection attempts and the calls that wait for them: a probe
//! tries a node down at once, and a probe made while an attempt is under
//! way gets an attempt of its own, the calls kept for it in their order.

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{NodeHealth, Redlock};
use redquorum_test_support::checks::eventually_ok;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::support::proxy::Proxy;
use super::support::*;
use super::{SERIAL, TTL, in_flight_to, proxies};

/// A client whose link to node 1 is in a connection attempt that stalls
/// (its proxy holds new connections: `set_cut`) until the connect timeout,
/// 500 ms, and a probe, made during that attempt, that kicked the link: the
/// calls made from now on queue for the next attempt. The connection is
/// closed for 50 ms (the fault's shape); the probe is made once the proxy
/// holds the stalled attempt's connection, and waits at most 5 s. Returns
/// the proxy's count of connections before that attempt, for
/// [`heal_during_the_next_attempt`].
async fn kicked_during_a_stalled_attempt(
    proxies: &[Proxy],
) -> (Redlock, JoinHandle<Vec<NodeHealth>>, u64) {
    // A patient node timeout: the checks are about which attempt a call
    // waits for, not about time (with the 50 ms default, a loaded machine
    // once timed every node out of the refused round).
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .connect_timeout(Duration::from_millis(500))
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    // The connection ends; new ones are held (not answered) from now on.
    proxies[0].set_cut(true);
    proxies[0].set_down(true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = proxies[0].accepted();
    proxies[0].set_down(false);
    assert!(
        proxies[0]
            .wait_accepted(before + 1, Duration::from_secs(5))
            .await,
        "no attempt reached node 1's proxy within 5 s"
    );
    // Polled once here, the probe kicks every link and queues its `PING`
    // before this returns: calls made from then on queue for the next
    // attempt (before the kick, the link, down since the refused attempts,
    // refuses them at once). Then it goes on in a task.
    let mut probe = Box::pin({
        let redlock = redlock.clone();
        async move { redlock.nodes().probe(Duration::from_secs(5)).await }
    });
    assert!(futures::poll!(probe.as_mut()).is_pending());
    (redlock, tokio::spawn(probe), before)
}

/// Node 1 comes back once the attempt after the stalled one has reached its
/// proxy (the second connection since `before`): that attempt, the last
/// the kept calls get, sees the node up whatever the machine's load, where
/// a fixed sleep once healed it too late for it (a suite run on a loaded
/// machine: `no answer within 500ms (connecting)`).
async fn heal_during_the_next_attempt(proxy: &Proxy, before: u64) {
    assert!(
        proxy
            .wait_accepted(before + 2, Duration::from_secs(5))
            .await,
        "no attempt followed the stalled one within 5 s"
    );
    proxy.set_cut(false);
}

/// A probe made while a connection attempt is already under way gets an
/// attempt of its own when that one fails: node 1's attempt stalls (the
/// proxy holds new connections) until the connect timeout, the probe comes
/// in meanwhile, and the node is reachable again during the next attempt.
/// Before: the probe's `PING` failed with the attempt begun before it
/// (`Connection reset by peer` in a suite run, where the proxy refused a
/// connection just before the node came back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_during_a_failing_attempt_gets_an_attempt_of_its_own() {
    let _serial = SERIAL.lock().await;
    let proxies = proxies(Duration::ZERO).await;
    let (_redlock, probe, before) = kicked_during_a_stalled_attempt(&proxies).await;
    heal_during_the_next_attempt(&proxies[0], before).await;
    let health = probe.await.unwrap();
    assert!(
        health[0].is_reachable(),
        "the probe saw only the attempt begun before it: {:?}",
        health[0]
    );
}

/// The calls kept for a kicked attempt keep their order: an acquire made
/// while node 1's attempt stalls, refused by the others, and its undo
/// "behind" it both wait for the next attempt, the undo still behind. Before
/// (within this series): the undo went ahead, among the releases kept for
/// the next connection, and the acquire then set a key nobody would delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_kept_for_a_kicked_attempt_stays_behind_its_acquire() {
    let _serial = SERIAL.lock().await;
    let proxies = proxies(Duration::ZERO).await;
    let resource = unique("kept-order");
    let key = lock_key(&resource);
    // Another holder on nodes 3-5: a round is refused.
    let mut conns = raw_all().await;
    for conn in &mut conns[2..] {
        let _: () = conn.set_ex(&key, "another-holder", 30).await.unwrap();
    }
    let (redlock, probe, before) = kicked_during_a_stalled_attempt(&proxies).await;
    let refused = redlock.try_lock(&resource, TTL).await;
    assert!(
        matches!(refused, Err(redquorum::LockError::Taken { .. })),
        "{refused:?}"
    );
    // The acquire waits for node 1, not refused (else the check below
    // would see nothing to order).
    assert!(
        in_flight_to(&redlock, &proxies[0]) >= 1,
        "node 1's acquire was refused, not kept for the next attempt"
    );
    // The node comes back during the next attempt.
    heal_during_the_next_attempt(&proxies[0], before).await;
    assert!(probe.await.unwrap()[0].is_reachable());
    // Node 1 took the acquire, then the undo: nothing of ours is left.
    let mut node1 = raw(0).await;
    eventually_ok(
        &format!("node 1 drops {key} (TTL 30 s), its undo behind its acquire"),
        Duration::from_secs(10),
        async || {
            let value: Option<String> = node1.get(&key).await.unwrap();
            match value {
                None => Ok(()),
                Some(value) => Err(format!("it holds {value:?}")),
            }
        },
    )
    .await;
    for conn in &mut conns[2..] {
        let _: () = conn.del(&key).await.unwrap();
    }
}

/// `probe` finds a node back up on its own: a node down is tried again at
/// once when probed, not after its reconnect backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_nodes_back_within_one_attempt() {
    let _serial = SERIAL.lock().await;
    let proxies = proxies(Duration::ZERO).await;
    let redlock = Redlock::connect(proxies.iter().map(Proxy::url))
        .await
        .unwrap();
    // Up to three rounds, one of which must see every node back within
    // 300 ms: a connection can be slow on a loaded machine (a suite run met
    // one), while a probe that waited out the backoff (up to 1 s, full
    // jitter, on each of five links) would miss in every round.
    let mut missed = Vec::new();
    for round in 0..3 {
        for proxy in &proxies {
            proxy.set_down(true);
        }
        // Down, and backing off: a few failed attempts.
        let start = Instant::now();
        loop {
            let health = redlock.nodes().probe(Duration::from_millis(50)).await;
            if health.iter().all(|h| !h.is_reachable()) && start.elapsed() > Duration::from_secs(2)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for proxy in &proxies {
            proxy.set_down(false);
        }
        let back = Instant::now();
        // Room for the reconnection and its handshake, far below the
        // reconnect backoff that a probe waiting for it would meet.
        let health = redlock.nodes().probe(Duration::from_millis(300)).await;
        let took = back.elapsed();
        println!("round {round}: probe after the nodes came back: {took:?}");
        if health.iter().all(|h| h.is_reachable()) {
            return;
        }
        missed.push(health);
    }
    panic!("no first probe after the nodes came back saw them all: {missed:?}");
}
