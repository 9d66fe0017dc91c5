//! Release notifications on a server without sharded pub/sub, end to end.
//!
//! The release scripts publish with `SPUBLISH` and fall back to `PUBLISH`
//! when it errors (`src/transport/scripts/notify.lua`); a listener subscribes with
//! `SUBSCRIBE` instead of `SSUBSCRIBE` when `INFO` reports a Redis older
//! than 7 (`src/transport/pubsub.rs`). There is no Redis 6 here, so a Redis 7 node is
//! made to look like one, one side at a time:
//!
//! - the releasing client logs in as an ACL user that may not use sharded
//!   pub/sub, so the scripts' `SPUBLISH` errors and they `PUBLISH`;
//! - the waiting client reaches each node through a proxy that rewrites the
//!   version in the node's `INFO` replies to a 6.x one of the same length,
//!   so its listeners `SUBSCRIBE`.
//!
//! A waiter that listens polls only at the holder's expiry (its retry
//! ceiling of 1 ms spreads nothing), ten seconds after its last refusal; the
//! release comes once it has been quiet for a while, so woken within a
//! second, it was woken by the notification. The control is
//! the same setup without the rewrite: the listeners `SSUBSCRIBE`, do not
//! hear the `PUBLISH`, and the waiter is granted only when it polls.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::PushKind;
use redis::aio::MultiplexedConnection;
use redquorum::{LockOptions, Redlock, Retry};
use support::acl::AclUser;
use support::proxy::Proxy;
use support::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// How long the holder's keys live: a waiter that is not woken polls only
/// when they would expire.
const HOLD: Duration = Duration::from_secs(10);

/// Woken by a notification: within this of the release.
const PROMPT: Duration = Duration::from_secs(1);

/// A poll comes no earlier than this after the release: `HOLD` after the
/// waiter's last refusal, less the (at most 5 s) wait for it to fall quiet.
const POLLED: Duration = Duration::from_secs(4);

/// The waiter is taken to sleep until the holder's expiry once it has sent
/// no acquire for this long (before its listeners are confirmed, it polls
/// every millisecond or so).
const QUIET: Duration = Duration::from_millis(300);

/// What one hand-off showed.
struct HandOff {
    /// From the holder's release to the waiter's grant.
    after: Duration,
    /// The token a `SUBSCRIBE` on node 1 heard (`PUBLISH`), if any.
    published: Option<String>,
    /// Whether an `SSUBSCRIBE` on node 1 heard the release (`SPUBLISH`).
    spublished: bool,
    /// `INFO` replies each proxy rewrote.
    rewritten: Vec<u64>,
    /// Acquires the waiter sent to the five nodes from the release on.
    attempts_after: u64,
}

/// The node's `redis_version` (`7.0.15`).
async fn node_version() -> String {
    let mut conn = raw(0).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .expect("INFO server has redis_version")
        .trim()
        .to_owned()
}

/// A subscriber on node 1 (`command`: `SUBSCRIBE` or `SSUBSCRIBE`) to
/// `channel`: the connection, and what it hears (RESP3 pushes).
async fn subscriber(
    command: &str,
    channel: &str,
) -> (MultiplexedConnection, UnboundedReceiver<redis::PushInfo>) {
    let client = redis::Client::open(format!("{}?protocol=resp3", node_urls()[0])).unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd(command)
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    (conn, rx)
}

/// A holder that may not use sharded pub/sub releases while a waiter
/// listens through proxies that report the node as a 6.x when `as_six`.
async fn hand_off(as_six: bool) -> HandOff {
    let user = AclUser::create(
        "rq-nospub",
        &[
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-spublish",
            "-ssubscribe",
            "-sunsubscribe",
        ],
    )
    .await;
    let holder = Redlock::builder()
        .nodes(user.urls("pw"))
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();

    let version = node_version().await;
    assert!(
        version.starts_with('7') || version.starts_with('8'),
        "the nodes run Redis {version}, not one with sharded pub/sub"
    );
    // Same length, so the bulk reply's length prefix stays true.
    let six = format!("6{}", &version[1..]);
    // Set before any client connects through them.
    let proxies = node_proxies().await;
    if as_six {
        for proxy in &proxies {
            proxy.rewrite_replies(
                format!("redis_version:{version}\r\n").as_bytes(),
                format!("redis_version:{six}\r\n").as_bytes(),
            );
        }
    }
    for proxy in &proxies {
        proxy.count_sent(b"redquorum_acquire");
    }
    let attempts = || proxies.iter().map(Proxy::sent).sum::<u64>();
    // Polling: at once until its listeners are confirmed on a quorum, then
    // only at the holder's expiry (a listening waiter sleeps on it; the
    // 1 ms ceiling adds no more).
    let waiter = Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::new(3, Duration::from_millis(1)))
        .notify_waiters(true)
        .build()
        .await
        .unwrap();

    let resource = unique("publish-fallback");
    let key = lock_key(&resource);
    let lock = holder.lock(&resource, HOLD).await.unwrap();
    let (_plain_conn, mut plain) = subscriber("SUBSCRIBE", &key).await;
    let (mut shard_conn, mut shard) = subscriber("SSUBSCRIBE", &key).await;
    let r = resource.clone();
    // The waiter releases only once the shard subscriber has been read: its
    // own release (a client allowed SPUBLISH) must not be taken for the
    // holder's (a loaded run saw it come first).
    let (read_tx, read_rx) = tokio::sync::oneshot::channel::<()>();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .lock_with(
                &r,
                Duration::from_secs(5),
                &LockOptions::new().wait(Duration::from_secs(20)),
            )
            .await
            .unwrap();
        let got = Instant::now();
        let _ = read_rx.await;
        lock.release().await.unwrap();
        got
    });
    // The waiter's listeners, on every node, beside this test's own two
    // on node 1: plain when told 6.x, sharded otherwise.
    let mut conns = raw_all().await;
    let count = if as_six { "NUMSUB" } else { "SHARDNUMSUB" };
    wait_counted(&mut conns, count, &key, &[2, 1, 1, 1, 1]).await;
    // And it has stopped polling: asleep until the holder's expiry.
    let quiet_from = Instant::now();
    let mut before = attempts();
    loop {
        tokio::time::sleep(QUIET).await;
        let now = attempts();
        if now == before {
            break;
        }
        before = now;
        assert!(
            quiet_from.elapsed() < Duration::from_secs(5),
            "the waiter never stopped polling"
        );
    }
    assert!(before > 0, "no acquire seen through the proxies");

    let released = Instant::now();
    lock.release().await.unwrap();
    let published = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let push = plain.recv().await.expect("the subscriber's pushes");
            if push.kind == PushKind::Message {
                return redis::from_redis_value::<String>(push.data[1].clone()).unwrap();
            }
        }
    })
    .await
    .ok();
    // A release sent to the shard subscriber came before this PONG.
    let _: String = redis::cmd("PING")
        .query_async(&mut shard_conn)
        .await
        .unwrap();
    let mut spublished = false;
    while let Ok(push) = shard.try_recv() {
        spublished |= push.kind == PushKind::SMessage;
    }
    let _ = read_tx.send(());
    let after = waiting.await.unwrap() - released;
    let attempts_after = attempts() - before;
    drop(user);
    HandOff {
        after,
        published,
        spublished,
        rewritten: proxies.iter().map(Proxy::rewritten).collect(),
        attempts_after,
    }
}

/// On a "Redis 6" the listeners subscribe with `SUBSCRIBE`, the release
/// script's `SPUBLISH` fails and it `PUBLISH`es: the waiter is woken by
/// that, at once, not by its poll at the holder's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_server_without_sharded_pub_sub_is_woken_by_publish() {
    let seen = hand_off(true).await;
    println!(
        "as 6.x: woken {:?} after the release ({} acquires to the nodes since); PUBLISH heard {:?}, SPUBLISH heard {}; INFO rewritten {:?}",
        seen.after, seen.attempts_after, seen.published, seen.spublished, seen.rewritten
    );
    assert!(
        seen.rewritten.iter().all(|&n| n >= 1),
        "a proxy never rewrote the version: {:?}",
        seen.rewritten
    );
    assert!(
        seen.published.is_some(),
        "the release was not PUBLISHed (the fallback)"
    );
    assert!(!seen.spublished, "the release was SPUBLISHed");
    assert!(
        seen.after < PROMPT,
        "woken {:?} after the release: by polling, not by the notification",
        seen.after
    );
}

/// The control: the same, but the listeners see Redis 7 and `SSUBSCRIBE`.
/// They do not hear the fallback's `PUBLISH`, so the waiter is granted
/// only when it polls, seconds later: the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_sharded_listener_misses_the_publish_fallback() {
    let seen = hand_off(false).await;
    println!(
        "as 7.x: woken {:?} after the release ({} acquires to the nodes since); PUBLISH heard {:?}, SPUBLISH heard {}",
        seen.after, seen.attempts_after, seen.published, seen.spublished
    );
    assert!(seen.rewritten.iter().all(|&n| n == 0));
    assert!(seen.published.is_some(), "the release was not PUBLISHed");
    assert!(!seen.spublished, "the release was SPUBLISHed");
    assert!(
        seen.after >= POLLED,
        "woken {:?} after the release, though no listener could hear it",
        seen.after
    );
    assert!(
        seen.after <= HOLD + Duration::from_secs(2),
        "granted {:?} after the release, well past the holder's expiry",
        seen.after
    );
}
