//! A release whose connection fails before its answer is sent again on the
//! node's next connection: a proxy resets node 1's connection on exactly
//! the release call (the bytes never reach the node), and node 1 must not
//! keep the key for its TTL — for a held lock's release and for a refused
//! acquisition's undo. Then the same with `CLIENT KILL` on the real nodes
//! while locks are taken and released.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum_test_support::checks::eventually_ok;
use support::*;

const TTL: Duration = Duration::from_secs(30);

/// `CLIENT KILL` reaches every test's connections: one test at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The release's name in its `FCALL` (or its source in an `EVAL`): what the
/// proxy resets on.
const RELEASE: &[u8] = b"redquorum_release_";

/// Waits (at most 5 s; the key's TTL is 30 s) until node `i` (0-based) no
/// longer has `key`.
async fn until_gone(i: usize, key: &str) {
    let mut conn = raw(i).await;
    let what = format!("node {} drops {key} after its release was cut", i + 1);
    eventually_ok(&what, Duration::from_secs(5), async || {
        let value: Option<String> = conn.get(key).await.unwrap();
        match value {
            None => Ok(()),
            Some(value) => Err(format!("it holds {value:?}")),
        }
    })
    .await;
}

/// Before: `release()` returned Ok and node 1 kept the key for the whole
/// TTL (the release died with its connection and was never sent again).
#[tokio::test]
async fn a_release_cut_with_its_connection_is_sent_again() {
    let _turn = TURN.lock().await;
    let (proxies, redlock) = proxied(Duration::from_secs(1)).await;
    let resource = unique("resend-release");
    let key = lock_key(&resource);
    let lock = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .expect("healthy nodes grant");
    proxies[0].reset_on(RELEASE);
    lock.release().await.expect("a quorum released");
    // The release returns at its quorum: node 1's may still be on its way.
    for node in 0..5 {
        until_gone(node, &key).await;
    }
    assert_eq!(proxies[0].resets(), 1, "the release call was cut");
}

/// The same for the undo of a refused acquisition: another holder on nodes
/// 3–5, nodes 1 and 2 grant, the round is refused and takes back what
/// nodes 1 and 2 granted; node 1's undo is cut.
#[tokio::test]
async fn a_refused_rounds_undo_cut_with_its_connection_is_sent_again() {
    let _turn = TURN.lock().await;
    let (proxies, redlock) = proxied(Duration::from_secs(1)).await;
    let resource = unique("resend-undo");
    let key = lock_key(&resource);
    let mut conns = raw_all().await;
    for conn in &mut conns[2..] {
        let _: () = conn.set_ex(&key, "another-holder", 30).await.unwrap();
    }
    proxies[0].reset_on(RELEASE);
    let refused = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await;
    assert!(
        matches!(refused, Err(redquorum::LockError::Taken { .. })),
        "{refused:?}"
    );
    // The undo goes on after the refusal: read the cut once node 1 is clean.
    for node in 0..2 {
        until_gone(node, &key).await;
    }
    assert_eq!(proxies[0].resets(), 1, "the undo call was cut");
    for conn in &mut conns[2..] {
        let _: () = conn.del(&key).await.unwrap();
    }
}

/// The same for a waiter that gives up: the place in line it kept on each
/// node while it waited is left by a release whose call to node 1 is cut
/// (a waiter long gone would otherwise be handed the lock there).
#[tokio::test]
async fn a_waiters_line_leave_cut_with_its_connection_is_sent_again() {
    let _turn = TURN.lock().await;
    let holder = redlock().await;
    let resource = unique("resend-line");
    let held = holder.lock(&resource, TTL).await.unwrap();
    let (proxies, waiter) = proxied(Duration::from_secs(1)).await;
    proxies[0].reset_on(RELEASE);
    let waiting = tokio::spawn({
        let resource = resource.clone();
        async move {
            let options = redquorum::LockOptions::new().wait(Duration::from_secs(2));
            waiter.lock_with(&resource, TTL, &options).await.map(drop)
        }
    });
    let line = format!("{}:line", lock_key(&resource));
    let mut conn = raw(0).await;
    let in_line = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let line = line.clone();
        async move { conn.zcard::<_, usize>(&line).await.unwrap() }
    };
    let start = Instant::now();
    while in_line(&mut conn).await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the waiter never got in line"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waited = waiting.await.unwrap();
    assert!(
        matches!(waited, Err(redquorum::LockError::Timeout { .. })),
        "{waited:?}"
    );
    let start = Instant::now();
    while in_line(&mut conn).await != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "node 1 kept the waiter's place after its line-leave was cut"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(proxies[0].resets(), 1, "the line-leave call was cut");
    held.release().await.unwrap();
}

/// `CLIENT KILL` of the client's connections every 100 ms on every node
/// while 4 tasks lock and release (and drop) for 5 s: once the kills stop
/// and the releases settle, no key is left on any node. Before, 3–20 keys
/// were left per 20 s run (an outside review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_left_when_connections_are_killed_under_releases() {
    let _turn = TURN.lock().await;
    let redlock = redlock().await;
    let prefix = unique("resend-kill");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut conns = raw_all().await;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                for conn in &mut conns {
                    // Every client connection but this one (SKIPME yes).
                    let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"][..])
                        .query_async(conn)
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (redlock, prefix) = (redlock.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < deadline {
                let resource = format!("{prefix}:{t}:{n}");
                n += 1;
                if let Ok(lock) = redlock.try_lock(&resource, TTL).await {
                    let _ = lock.release().await;
                }
            }
            n
        }));
    }
    let mut made = 0;
    for task in tasks {
        made += task.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    killer.await.unwrap();
    redlock.shutdown().await;
    // Whatever is still on its way lands within a grace or two.
    let mut conns = raw_all().await;
    eventually_ok("no keys left", Duration::from_secs(5), async || {
        let mut left = 0;
        for conn in &mut conns {
            let keys: Vec<String> = conn.keys(format!("{{{prefix}:*")).await.unwrap();
            left += keys.len();
        }
        match left {
            0 => Ok(()),
            _ => Err(format!("{left} keys left of {made} locks")),
        }
    })
    .await;
    eprintln!("{made} locks under CLIENT KILL every 100 ms: 0 keys left");
}

/// A lock on every node, taken through proxies (node timeout 200 ms) on a
/// resource named after `name`, then node 1 taken down ("the process is
/// gone"): the grant's calls settle first, so node 1 holds the key.
async fn held_with_node_1_down(
    name: &str,
) -> (
    Vec<support::proxy::Proxy>,
    redquorum::Redlock,
    redquorum::Lock,
) {
    let (proxies, redlock) = proxied(Duration::from_millis(200)).await;
    let lock = redlock
        .lock(&unique(name), TTL)
        .await
        .expect("healthy nodes grant");
    settled(&redlock).await;
    proxies[0].set_down(true);
    (proxies, redlock, lock)
}

/// `shutdown()` sends a release its node's link still keeps before it
/// returns: node 1 is down while a lock is released (its release is kept
/// for the next connection, the link waiting out a backoff grown to its
/// cap), comes back, and the client shuts down; then the runtime ends, as
/// a process's does after `shutdown()`. Before: `shutdown()` returned after
/// one node timeout without an answer, the link still asleep in its
/// backoff, and node 1 kept the key for its TTL.
#[test]
fn shutdown_sends_the_releases_a_link_keeps_before_it_returns() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let key = runtime.block_on(async {
        let _turn = TURN.lock().await;
        let (proxies, redlock, lock) = held_with_node_1_down("resend-shutdown").await;
        let resource = lock.resource().to_owned();
        // Down for 2 s: the link's attempts fail and its backoff grows to
        // its cap (1 s), well past the node timeout.
        tokio::time::sleep(Duration::from_secs(2)).await;
        lock.release().await.expect("nodes 2-5 released");
        proxies[0].set_down(false);
        redlock.shutdown().await;
        lock_key(&resource)
    });
    drop(runtime);
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    check.block_on(async {
        let mut conn = raw(0).await;
        let value: Option<String> = conn.get(&key).await.unwrap();
        assert!(
            value.is_none(),
            "node 1 kept {key} after shutdown() returned: {value:?}"
        );
    });
}

/// The same with node 1 still down at the shutdown: the link's attempt
/// made at once is refused, and `shutdown()` returns one attempt later
/// (bounded: the connect timeout and a node timeout), leaving the key to
/// its TTL on the node it could not reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_node_still_down_returns() {
    let _turn = TURN.lock().await;
    let (_proxies, redlock, lock) = held_with_node_1_down("resend-shutdown-down").await;
    let resource = lock.resource().to_owned();
    lock.release().await.expect("nodes 2-5 released");
    tokio::time::timeout(Duration::from_secs(10), redlock.shutdown())
        .await
        .expect("shutdown() returned though node 1 stays down");
    let mut conn = raw(0).await;
    let value: Option<String> = conn.get(lock_key(&resource)).await.unwrap();
    assert!(
        value.is_some(),
        "node 1 was down: its key waits for its TTL"
    );
    let _: () = conn.del(lock_key(&resource)).await.unwrap();
}
