//! `Redlock::shutdown` called while tasks acquire and release every kind
//! of hold: when it returns, no key of theirs with a TTL is left on any
//! node but those of locks held at least a while
//! (`LockOptions::hold_at_least`), which stay as promised. (Here beside
//! the read/write locks' own shutdown test: read/write locks are among the
//! kinds, and their intents and lines among what must not be left.)

use std::collections::{BTreeMap, BTreeSet};

use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::LockOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::Semaphore;
use redquorum::election::Election;

use super::*;

/// How many times the test runs, each with its own client and resources.
const RUNS: usize = 3;
/// The acquiring tasks.
const TASKS: usize = 6;
/// The kinds each task takes in turn (see [`one_round`]).
const KINDS: usize = 9;

/// What the tasks share: the resources' prefix, the rounds done, and the
/// keys of the `hold_at_least` locks granted to a caller (and of their
/// periods' marks).
struct Shared {
    prefix: String,
    rounds: tokio::sync::watch::Sender<usize>,
    promised: Mutex<BTreeSet<String>>,
}

/// One acquisition of kind `kind` by task `task` (round `round`), held for
/// a moment and released. `Err` only once the client is shut down;
/// refusals and waits that ran out are part of the load.
async fn one_round(
    redlock: &Redlock,
    shared: &Shared,
    task: usize,
    round: usize,
) -> Result<(), LockError> {
    let ttl = Duration::from_secs(20);
    let p = &shared.prefix;
    let wait = AcquireOptions::new().wait(Duration::from_secs(2));
    let held: Result<Box<dyn std::any::Any + Send>, LockError> = match (task + round) % KINDS {
        0 => boxed(
            redlock
                .lock_with(&format!("{p}:plain"), ttl, &wait.clone().into())
                .await,
        ),
        1 => boxed(
            redlock
                .lock_with(
                    &format!("{p}:fenced"),
                    ttl,
                    &redquorum::LockOptions::new().fenced(),
                )
                .await,
        ),
        2 => boxed(
            ReentrantLock::new(redlock, &format!("{p}:re"), &format!("owner-{task}"))
                .unwrap()
                .lock(ttl)
                .await,
        ),
        3 => boxed(
            redlock
                .lock_many(&[&format!("{p}:m1"), &format!("{p}:m2")], ttl)
                .await,
        ),
        4 => boxed(
            RwLock::new(redlock, &format!("{p}:doc"))
                .unwrap()
                .read_with(ttl, &wait)
                .await,
        ),
        5 => boxed(
            RwLock::new(redlock, &format!("{p}:doc"))
                .unwrap()
                .write_with(ttl, &wait)
                .await,
        ),
        6 => {
            let permits = Semaphore::new(redlock, &format!("{p}:api"), 2).unwrap();
            boxed(permits.acquire_with(ttl, &wait).await)
        }
        7 => {
            let election = Election::new(redlock, &format!("{p}:leader")).unwrap();
            boxed(
                election
                    .campaign_with(ttl, &wait, &LeaseOptions::new())
                    .await,
            )
        }
        _ => {
            let resource = format!("{p}:at-least:{task}:{round}");
            let at_least = LockOptions::new().hold_at_least(ttl);
            let lock = redlock.lock_with(&resource, ttl, &at_least).await;
            if lock.is_ok() {
                let mut promised = shared.promised.lock().unwrap();
                promised.insert(lock_key(&resource));
                // Its period's mark (a round never granted takes its own back).
                promised.insert(format!("{{{resource}}}:period"));
            }
            boxed(lock)
        }
    };
    match held {
        Ok(held) => {
            // A moment of work under the lock, then its release (by drop:
            // in the background, as every kind's drop does).
            tokio::time::sleep(Duration::from_millis(2)).await;
            drop(held);
            Ok(())
        }
        Err(LockError::ShutDown) => Err(LockError::ShutDown),
        Err(LockError::Input(e)) => panic!("task {task}: {e}"),
        Err(_) => Ok(()),
    }
}

fn boxed<T: Send + 'static>(
    held: Result<T, LockError>,
) -> Result<Box<dyn std::any::Any + Send>, LockError> {
    held.map(|held| Box::new(held) as Box<dyn std::any::Any + Send>)
}

/// Per node, the keys under `prefix` that have a TTL, each with what it
/// holds (its TTL, and a string's value) for the failure's message.
async fn keys_with_ttl(prefix: &str) -> Vec<BTreeMap<String, String>> {
    let mut left = Vec::new();
    for mut conn in raw_all().await {
        let keys: Vec<String> = conn.keys(format!("*{prefix}*")).await.unwrap();
        let mut with_ttl = BTreeMap::new();
        for key in keys {
            let pttl: i64 = conn.pttl(&key).await.unwrap();
            if pttl > 0 {
                let kind: String = redis::cmd("TYPE")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let held = match kind.as_str() {
                    "string" => {
                        let v: Vec<u8> = conn.get(&key).await.unwrap();
                        String::from_utf8_lossy(&v).into_owned()
                    }
                    "zset" => {
                        let v: Vec<(String, f64)> =
                            conn.zrange_withscores(&key, 0, -1).await.unwrap();
                        format!("{v:?}")
                    }
                    other => other.to_owned(),
                };
                with_ttl.insert(key, format!("{pttl} ms left: {held:?}"));
            }
        }
        left.push(with_ttl);
    }
    left
}

/// Six tasks acquire and release every kind — plain (waiting), fenced,
/// reentrant, several resources, read and write (waiting), semaphore
/// permits (waiting), an election campaign, `hold_at_least` locks — while
/// `shutdown` is called once they have done some rounds. When it returns,
/// the only keys with a TTL left are those of the `hold_at_least` locks a
/// caller was granted (and their periods' marks), each still on a quorum
/// of nodes; every task ends at
/// once with `LockError::ShutDown`. Before: 10 to 25 keys were left with
/// their TTL in every run (a plain lock on all five nodes, readers' keys,
/// an election key, lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_amid_acquisitions_of_every_kind_leaves_nothing() {
    for run in 0..RUNS {
        let redlock = redlock().await;
        let shared = Arc::new(Shared {
            prefix: unique("shutdown-race"),
            rounds: tokio::sync::watch::Sender::new(0),
            promised: Mutex::default(),
        });
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let (redlock, shared) = (redlock.clone(), Arc::clone(&shared));
                tokio::spawn(async move {
                    for round in 0.. {
                        one_round(&redlock, &shared, task, round).await?;
                        shared.rounds.send_modify(|n| *n += 1);
                    }
                    Ok::<(), LockError>(())
                })
            })
            .collect();
        // Called amid the rounds: after a number that differs per run.
        let after = 20 + 15 * run;
        let mut rounds = shared.rounds.subscribe();
        tokio::time::timeout(Duration::from_secs(60), rounds.wait_for(|n| *n >= after))
            .await
            .expect("the tasks make rounds")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), redlock.shutdown())
            .await
            .expect("shutdown returns");
        let left = keys_with_ttl(&shared.prefix).await;
        for (i, task) in tasks.into_iter().enumerate() {
            let ended = tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .unwrap_or_else(|_| panic!("run {run}: task {i} still running after shutdown"))
                .unwrap();
            assert!(
                matches!(ended, Err(LockError::ShutDown)),
                "run {run}: task {i}: {ended:?}"
            );
        }
        let promised = shared.promised.lock().unwrap().clone();
        let leaked: Vec<_> = left
            .iter()
            .enumerate()
            .flat_map(|(node, keys)| {
                keys.iter()
                    .filter(|(key, _)| !promised.contains(*key))
                    .map(move |(key, what)| format!("node {}: {key}, {what}", node + 1))
            })
            .collect();
        println!(
            "run {run}: shutdown after {} rounds; {} keys with a TTL left besides {} hold_at_least locks",
            *shared.rounds.borrow(),
            leaked.len(),
            promised.len()
        );
        assert!(leaked.is_empty(), "run {run}: keys left: {leaked:#?}");
        for key in &promised {
            let on = left.iter().filter(|keys| keys.contains_key(key)).count();
            assert!(
                on >= 3,
                "run {run}: {key} held at least a while, on {on} nodes"
            );
        }
    }
}
