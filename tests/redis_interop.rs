//! Interop keys against rslock on the five real nodes: with
//! `Builder::interop_keys(true)` a redquorum holder and an rslock holder of
//! the same resource exclude each other, both ways; without it (the negative
//! control) both get the lock, as the issue observed. Key prefixes land
//! where they say.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{ConfigError, InputError, LockError, Redlock};
use support::{node_urls, patient, raw_all, set_px_everywhere, unique, wait_subscribed};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(10);

/// An rslock manager over the same five nodes that tries once.
fn rslock() -> rslock::LockManager {
    let mut manager = rslock::LockManager::new(node_urls());
    manager.set_retry(1, Duration::from_millis(10));
    manager
}

async fn interop(prefix: &str) -> Redlock {
    patient()
        .interop_keys(true)
        .key_prefix(prefix)
        .build()
        .await
        .expect("connect")
}

/// How many nodes hold `key`.
async fn holding(key: &str) -> usize {
    let mut n = 0;
    for mut conn in raw_all().await {
        let exists: bool = conn.exists(key).await.expect("EXISTS");
        n += usize::from(exists);
    }
    n
}

#[tokio::test]
async fn a_redquorum_holder_excludes_an_rslock_holder_and_back() {
    let resource = unique("interop");
    let redlock = interop("").await;
    let rs = rslock();

    // redquorum first: rslock is refused until the release.
    let lock = redlock
        .try_lock(&resource, TTL)
        .await
        .expect("redquorum lock");
    assert_eq!(holding(&resource).await, 5, "the key is the resource name");
    assert!(
        rs.lock(resource.as_bytes(), TTL).await.is_err(),
        "rslock got a lock redquorum holds"
    );
    lock.release().await.expect("release");
    assert_eq!(holding(&resource).await, 0);

    // rslock first: redquorum is refused with the holder's votes.
    let theirs = rs
        .lock(resource.as_bytes(), TTL)
        .await
        .expect("rslock lock");
    match redlock.try_lock(&resource, TTL).await {
        Err(LockError::Taken { .. }) => {}
        other => panic!("redquorum got a lock rslock holds: {other:?}"),
    }
    rs.unlock(&theirs).await;
    let lock = redlock
        .try_lock(&resource, TTL)
        .await
        .expect("free after rslock's release");
    // rslock's compare-and-delete leaves our key alone, and ours theirs.
    rs.unlock(&theirs).await;
    assert_eq!(holding(&resource).await, 5, "rslock deleted our key");
    lock.release().await.expect("release");
}

#[tokio::test]
async fn prefixed_interop_keys_meet_rslock_on_the_prefixed_name() {
    let resource = unique("interop-prefix");
    let redlock = interop("app:").await;
    let rs = rslock();
    let key = format!("app:{resource}");
    assert_eq!(redlock.key_layout().plain_key(&resource), key);
    let lock = redlock.lock(&resource, TTL).await.expect("lock");
    assert_eq!(holding(&key).await, 5);
    assert!(rs.lock(key.as_bytes(), TTL).await.is_err());
    // The unprefixed name is another resource.
    let other = rs.lock(resource.as_bytes(), TTL).await.expect("other key");
    rs.unlock(&other).await;
    lock.release().await.expect("release");
}

#[tokio::test]
async fn without_interop_keys_both_clients_get_the_lock() {
    // The negative control: redquorum's own layout shares no key with
    // rslock, so the exclusion above is the interop mode's doing.
    let resource = unique("interop-off");
    let redlock = patient().build().await.expect("connect");
    let lock = redlock
        .try_lock(&resource, TTL)
        .await
        .expect("redquorum lock");
    let theirs = rslock()
        .lock(resource.as_bytes(), TTL)
        .await
        .expect("rslock is not excluded by {R}:lock");
    rslock().unlock(&theirs).await;
    lock.release().await.expect("release");
}

#[tokio::test]
async fn fenced_locks_keep_their_layout_and_waiters_are_woken_in_interop_mode() {
    let resource = unique("interop-kinds");
    let redlock = interop("").await;
    let fenced = redlock
        .lock_with(&resource, TTL, &redquorum::LockOptions::new().fenced())
        .await
        .expect("fenced lock");
    assert_eq!(holding(&format!("{{{resource}}}:lock")).await, 5);
    assert_eq!(holding(&resource).await, 0);
    fenced.release().await.expect("release");

    // A waiter on an interop key is woken by the release (the channel is
    // the key), long before the holder's TTL.
    let holder = redlock.try_lock(&resource, TTL).await.expect("holder");
    let waiter = interop("").await;
    let name = resource.clone();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .lock_with(
                &name,
                TTL,
                &redquorum::LockOptions::new().wait(Duration::from_secs(30)),
            )
            .await;
        (lock.map(|lock| lock.token().to_owned()), Instant::now())
    });
    // The waiter subscribed on every node (the channel is the key itself):
    // the release below finds it waiting.
    wait_subscribed(&mut raw_all().await, &resource).await;
    let released = Instant::now();
    holder.release().await.expect("release");
    let (lock, got) = waiting.await.expect("task");
    lock.expect("the waiter's lock");
    assert!(
        got - released < Duration::from_secs(2),
        "woken {:?} after the release (the holder's TTL was {TTL:?})",
        got - released
    );
}

#[tokio::test]
async fn a_prefix_with_braces_is_a_typed_error() {
    for bad in [
        "{app}:",
        "app}",
        &"x".repeat(redquorum::keys::MAX_KEY_PREFIX + 1),
    ] {
        match patient().key_prefix(bad).build().await {
            Err(ConfigError::Input(InputError::InvalidKeyPrefix(p))) => assert_eq!(p, bad),
            other => panic!("prefix {bad:?}: {other:?}"),
        }
    }
}

/// Under interop keys, inspection reads the resource name itself: an
/// rslock holder's value is the holder.
#[tokio::test]
async fn inspect_reads_interop_keys_and_sees_an_rslock_holder() {
    let resource = unique("interop-inspect");
    let redlock = interop("").await;
    let theirs = rslock()
        .lock(resource.as_bytes(), TTL)
        .await
        .expect("rslock lock");
    let seen = redlock.inspect(&resource).await.expect("inspect");
    let token = String::from_utf8_lossy(&theirs.val).into_owned();
    assert_eq!(
        seen.verdict(),
        &redquorum::verdict::Verdict::Held {
            holder: redquorum::inspect::Holder::Token(token),
            nodes: 5
        }
    );
    rslock().unlock(&theirs).await;
    let seen = redlock.inspect(&resource).await.expect("inspect");
    assert_eq!(
        seen.verdict(),
        &redquorum::verdict::Verdict::Free { nodes: 5 }
    );
}

/// A peer's token is its value whole, NUL bytes and all (rslock draws 20
/// random bytes: one run in thirteen has a NUL among them, which the
/// inspection once took for the start of a label).
#[tokio::test]
async fn inspect_takes_a_peers_token_whole_nul_bytes_and_all() {
    let resource = unique("interop-nul");
    let redlock = interop("").await;
    let token = "ab\0cd\0\x017";
    for mut conn in raw_all().await {
        let _: () = redis::AsyncCommands::set_ex(&mut conn, &resource, token, 10)
            .await
            .unwrap();
    }
    let seen = redlock.inspect(&resource).await.expect("inspect");
    assert_eq!(
        seen.verdict(),
        &redquorum::verdict::Verdict::Held {
            holder: redquorum::inspect::Holder::Token(token.to_owned()),
            nodes: 5
        }
    );
    assert_eq!(seen.fence(), None);
    for mut conn in raw_all().await {
        let _: () = redis::AsyncCommands::del(&mut conn, &resource)
            .await
            .unwrap();
    }
}

/// A peer (rslock, redsync) holding the resource with a TTL above the
/// longest TTL — here `PX 120000` against the default 60 s — is named at
/// the first round that meets it: with interop keys every refusal reports
/// the holder's time to live, and one above `max_ttl` is a WARN (and the
/// metric `redquorum_ttl_above_max_total`). Such a lock can outlive a
/// restarted node's quarantine (docs/migrating.md). Seen missing before:
/// a single try reported no time to live and nothing was said.
#[tokio::test(flavor = "current_thread")]
async fn a_peers_ttl_above_max_ttl_is_named_at_the_first_round() {
    let resource = unique("interop-long");
    set_px_everywhere(&resource, "peer-token", 120_000).await;
    let mut conns = raw_all().await;
    let (logs, _guard) = support::capture_logs();
    let redlock = interop("").await;
    let refused = redlock.try_lock(&resource, TTL).await;
    for conn in &mut conns {
        let _: () = conn.del(&resource).await.unwrap();
    }
    let Err(LockError::Taken { votes }) = refused else {
        panic!("expected Taken, got {refused:?}");
    };
    let longest = votes
        .min_pttl()
        .expect("the holder's time to live reported");
    assert!(longest > Duration::from_secs(60), "{votes}");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        text.contains("lives longer than the longest TTL") && text.contains("ttl_left_ms="),
        "{text}"
    );
}
