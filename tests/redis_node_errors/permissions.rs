//! What the user may run: a least-privilege ACL user locks every kind, flushed
//! functions cost one failed call then load again, and without the rights to
//! load scripts they go as `EVAL`.

use super::*;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::Semaphore;

/// Returns once node 1 has at least `least` waiters in the line `key`
/// (waits at most 5 s).
async fn in_line(key: &str, least: u64) {
    let mut admin = raw(0).await;
    eventually_ok(
        &format!("{least} waiters in {key}"),
        Duration::from_secs(5),
        async || {
            let waiting: u64 = redis::cmd("ZCARD")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
            if waiting >= least {
                Ok(())
            } else {
                Err(format!("{waiting} waiting"))
            }
        },
    )
    .await;
}

/// The least-privilege ACL user that `docs/operations.md` recommends can use
/// every kind of lock, and nothing else: only redquorum's keys and channels,
/// only the commands its scripts and connections need.
#[tokio::test]
async fn least_privilege_acl_user_can_lock() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser::create(
        "rq-least",
        &[
            "on",
            ">s3cret",
            "resetkeys",
            "~{*}:lock*",
            "~{*}:fence",
            "~{*}:period",
            "~{*}:writer",
            "~{*}:readers",
            "~{*}:intent",
            "~{*}:rw:*",
            "~{*}:permit*",
            "~redquorum:dataset*",
            "~redquorum:deployment",
            "resetchannels",
            "&{*}:lock",
            "&{*}:writer",
            "&{*}:permit:*",
            "-@all",
            "+ping",
            "+info",
            "+config|get",
            "+fcall",
            "+function|load",
            "+eval",
            "+subscribe",
            "+unsubscribe",
            "+set",
            "+get",
            "+del",
            "+exists",
            "+type",
            "+pttl",
            "+pexpire",
            "+incr",
            "+hset",
            "+hsetnx",
            "+hdel",
            "+hexists",
            "+hincrby",
            "+hgetall",
            "+publish",
            "+spublish",
            "+ssubscribe",
            "+sunsubscribe",
            "+time",
            "+pexpireat",
            "+zadd",
            "+zrem",
            "+zremrangebyscore",
            "+zrange",
            "+zscore",
            "+zcard",
            "+zincrby",
            "+zrangebyscore",
        ],
    )
    .await;
    let name = user.name();
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{name}:s3cret@"), 1))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the user may connect");
    let r = unique("acl");
    let ttl = Duration::from_secs(5);
    let mut lock = redlock.try_lock(&r, ttl).await.expect("plain");
    lock.extend(ttl).await.expect("extend");
    lock.release().await.expect("release");
    let lock = redlock
        .lock_with(&r, ttl, &redquorum::LockOptions::new().fenced())
        .await
        .expect("fenced");
    assert!(lock.fence().is_some());
    lock.release().await.expect("release fenced");
    // Once per period: the mark beside the lock key.
    let once = redquorum::LockOptions::new().hold_at_least(Duration::from_secs(1));
    let slot = format!("{r}:once");
    let lock = redlock.lock_with(&slot, ttl, &once).await.expect("period");
    lock.release().await.expect("release period");
    let lock = ReentrantLock::new(&redlock, &r, "owner")
        .unwrap()
        .lock(ttl)
        .await
        .expect("reentrant");
    // Inspection reads every kind of key with the same rights.
    let seen = redlock.inspect(&r).await.expect("inspect");
    assert!(
        seen.nodes().iter().all(|n| n.read.is_ok()),
        "{:?}",
        seen.nodes()
    );
    lock.release().await.expect("release reentrant");
    let (a, b) = (format!("{r}:a"), format!("{r}:b"));
    let lock = redlock.lock_many(&[&a, &b], ttl).await.expect("many");
    lock.release().await.expect("release many");
    // Read/write locks, through every script path: a reader, a writer
    // refused by it (marking its intent), the writer once it is gone.
    let mut reader = RwLock::new(&redlock, &r)
        .unwrap()
        .read(ttl)
        .await
        .expect("read");
    reader.extend(ttl).await.expect("extend read");
    let seen = RwLock::new(&redlock, &r)
        .unwrap()
        .inspect()
        .await
        .expect("inspect_rw");
    assert!(
        seen.nodes().iter().all(|n| n.read.is_ok()),
        "{:?}",
        seen.nodes()
    );
    assert!(matches!(
        RwLock::new(&redlock, &r).unwrap().try_write(ttl).await,
        Err(redquorum::LockError::Taken { .. })
    ));
    reader.release().await.expect("release read");
    let mut writer = RwLock::new(&redlock, &r)
        .unwrap()
        .write(ttl)
        .await
        .expect("write");
    writer.extend(ttl).await.expect("extend write");
    writer.release().await.expect("release write");
    // A waiter woken by a release (SUBSCRIBE / PUBLISH on the lock channel).
    let held = redlock.try_lock(&r, ttl).await.expect("plain again");
    let waiter = {
        let redlock = redlock.clone();
        let r = r.clone();
        tokio::spawn(async move {
            redlock
                .lock_with(
                    &r,
                    ttl,
                    &redquorum::LockOptions::new().wait(Duration::from_secs(10)),
                )
                .await
        })
    };
    // The waiter's SUBSCRIBE went through: node 1 counts a subscriber.
    let admin = raw(0).await;
    eventually("a subscriber on node 1", Duration::from_secs(5), || {
        let mut admin = admin.clone();
        let channel = lock_key(&r);
        async move {
            let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(channel)
                .query_async(&mut admin)
                .await
                .unwrap();
            subscribers > 0
        }
    })
    .await;
    held.release().await.unwrap();
    waiter
        .await
        .unwrap()
        .expect("woken")
        .release()
        .await
        .unwrap();
    // Semaphores: a permit, its extension, a waiter in line woken by its
    // release (the permit kept for it), the count checked.
    let semaphore = Semaphore::new(&redlock, &r, 1).expect("semaphore");
    let mut permit = semaphore.try_acquire(ttl).await.expect("permit");
    permit.extend(ttl).await.expect("extend permit");
    let waiting = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let wait = redquorum::AcquireOptions::new().wait(Duration::from_secs(10));
            semaphore.acquire_with(ttl, &wait).await
        })
    };
    in_line(&format!("{{{r}}}:permits:line"), 1).await;
    let t = std::time::Instant::now();
    permit.release().await.expect("release permit");
    let permit = waiting.await.unwrap().expect("permit in line");
    assert!(t.elapsed() < ttl, "the waiter did not wait for an expiry");
    assert!(matches!(
        Semaphore::new(&redlock, &r, 2)
            .unwrap()
            .try_acquire(ttl)
            .await,
        Err(redquorum::LockError::PermitCount { held_under: 1, .. })
    ));
    permit.release().await.expect("release permit");
    // A writer in line behind a writer, and a reader behind it.
    let held = RwLock::new(&redlock, &r)
        .unwrap()
        .try_write(ttl)
        .await
        .expect("writer");
    let wait = redquorum::AcquireOptions::new().wait(Duration::from_secs(10));
    let (w, rd) = (redlock.clone(), redlock.clone());
    let (r1, r2, wait1, wait2) = (r.clone(), r.clone(), wait.clone(), wait.clone());
    let writer =
        tokio::spawn(async move { RwLock::new(&w, &r1).unwrap().write_with(ttl, &wait1).await });
    let reader =
        tokio::spawn(async move { RwLock::new(&rd, &r2).unwrap().read_with(ttl, &wait2).await });
    // Both in line (the writer alone in it, released, would go before a
    // reader not in line yet, which would then wait for it).
    in_line(&format!("{{{r}}}:rw:line"), 2).await;
    let t = std::time::Instant::now();
    held.release().await.expect("release writer");
    // Whichever is first in line goes first, and lets the other go when it
    // is done.
    tokio::join!(
        async {
            let reader = reader.await.unwrap().expect("reader in line");
            reader.release().await.unwrap();
        },
        async {
            let writer = writer.await.unwrap().expect("writer in line");
            writer.release().await.unwrap();
        }
    );
    assert!(t.elapsed() < ttl, "no one waited for a lock to expire");
    // Nothing was denied along the way…
    for i in 0..5 {
        let mut conn = raw(i).await;
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut conn)
            .await
            .unwrap();
        let denied = format!("{log:?}");
        assert!(!denied.contains(name), "node {}: {denied}", i + 1);
    }
    // …and nothing beyond is allowed: other keys are off limits.
    let client = redis::Client::open(urls[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let denied: redis::RedisResult<()> = conn.set("not-a-lock-key", "x").await;
    assert!(denied.is_err(), "the user may write other keys");
}

/// Scripts go as functions (`FCALL`) once their library is loaded. A
/// `FUNCTION FLUSH` makes that node's next script call fail (never retried:
/// a retry could overtake later calls); the connection then sends `EVAL`, in
/// order, and the quorum carries every round meanwhile.
#[tokio::test]
async fn flushed_functions_cost_one_failed_call_then_load_again() {
    let _turn = CLUSTER.lock().await;
    let redlock = redlock().await;
    let resource = unique("noscript");
    redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut node1 = raw(0).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut node1)
        .await
        .unwrap();
    assert!(
        stats.contains("cmdstat_fcall:"),
        "no FCALL reached node 1:\n{stats}"
    );
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut node1)
        .await
        .unwrap();
    // Release is a script: node 1 refuses it, four nodes carry it.
    let lock = redlock
        .try_lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.expect("a quorum released");
    // Node 1's copy of the key waits for its TTL; a later cycle on another
    // resource goes through on node 1 again once its connection is renewed.
    eventually_ok(
        "node 1 releases again after FUNCTION FLUSH",
        Duration::from_secs(10),
        async || {
            let other = unique("noscript-after");
            let lock = redlock
                .try_lock(&other, Duration::from_secs(5))
                .await
                .unwrap();
            lock.release().await.unwrap();
            let left: bool = node1.exists(lock_key(&other)).await.unwrap();
            if left {
                Err(format!("it kept {other}"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let _: () = node1.del(lock_key(&resource)).await.unwrap();
}

/// A user who may run scripts but not `FUNCTION LOAD`: its connections send
/// `EVAL` of the source, and every lock kind works.
#[tokio::test]
async fn without_script_load_rights_scripts_go_as_eval() {
    let _turn = CLUSTER.lock().await;
    let user = AclUser::create(
        "rq-noload",
        &["on", ">pw", "~*", "&*", "+@all", "-function|load"],
    )
    .await;
    let redlock = Redlock::builder()
        .nodes(user.urls("pw"))
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let resource = unique("noload");
    let evals = || async {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw(0).await)
            .await
            .unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = evals().await;
    let mut lock = redlock
        .lock_with(
            &resource,
            Duration::from_secs(5),
            &redquorum::LockOptions::new().fenced(),
        )
        .await
        .unwrap();
    lock.extend(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let lock = ReentrantLock::new(&redlock, &resource, "owner")
        .unwrap()
        .lock(Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    settled(&redlock).await; // the release returns at its quorum
    for i in 0..5 {
        let left: bool = raw(i).await.exists(lock_key(&resource)).await.unwrap();
        assert!(!left, "node {} kept the key", i + 1);
    }
    assert!(evals().await > before, "the fallback sent no EVAL");
    acl_all(&["DELUSER", user.name()]).await;
}
