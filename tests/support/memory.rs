//! An in-memory lock node with the semantics of the Redis scripts, for tests
//! that need to hold a node's answer back at will.
//!
//! Like a Redis connection, it applies operations strictly in the order they
//! were sent, even when the caller has stopped waiting for the reply. A
//! closed gate holds every operation back (a frozen node); opening it lets
//! the queue drain in order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use redquorum::NodeError;
use redquorum::node::{Node, Op, Reply};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// A key's value: a token, or a reentrant owner with the holds it counts.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Token(String),
    Holds { owner: String, holds: Vec<String> },
}

type Keys = HashMap<String, (Value, Instant)>;

enum Owned {
    AcquireMany(Vec<String>, String, u64),
    ExtendMany(Vec<String>, String, u64),
    ReleaseMany(Vec<String>, String),
    AcquireReentrant(String, String, String, u64),
    ExtendReentrant(String, String, u64),
    ReleaseReentrant(String, String, String),
    Acquire(String, String, u64),
    Extend(String, String, u64),
    Release(String, String),
    AcquireFenced(String, String, String, u64),
    WriteBack(String, String, String, u64),
}

#[derive(Debug)]
pub struct MemoryNode {
    name: Arc<str>,
    queue: mpsc::UnboundedSender<(Owned, oneshot::Sender<Reply>)>,
    gate: watch::Sender<bool>,
    keys: Arc<Mutex<Keys>>,
    /// Fencing counters (no TTL).
    counters: Arc<Mutex<HashMap<String, u64>>>,
    /// Bumped after every applied operation, so tests can wait for state.
    applied: watch::Sender<u64>,
}

impl MemoryNode {
    /// A node with an open gate. Needs a tokio runtime (it spawns its queue).
    pub fn new(i: usize) -> Arc<Self> {
        Self::named(&format!("memory://{i}"))
    }

    /// [`new`](Self::new) with a name of its own (metric labels, logs).
    pub fn named(name: &str) -> Arc<Self> {
        let (queue, mut rx) = mpsc::unbounded_channel::<(Owned, oneshot::Sender<Reply>)>();
        let (gate, _) = watch::channel(true);
        let (applied, _) = watch::channel(0u64);
        let keys: Arc<Mutex<Keys>> = Arc::default();
        let counters: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        let node = Arc::new(MemoryNode {
            name: name.into(),
            queue,
            gate: gate.clone(),
            keys: keys.clone(),
            counters: counters.clone(),
            applied: applied.clone(),
        });
        let mut gate_rx = gate.subscribe();
        tokio::spawn(async move {
            while let Some((op, reply)) = rx.recv().await {
                if gate_rx.wait_for(|open| *open).await.is_err() {
                    return;
                }
                let answer = apply(&mut keys.lock().unwrap(), &mut counters.lock().unwrap(), op);
                applied.send_modify(|n| *n += 1);
                let _ = reply.send(answer);
            }
        });
        node
    }

    /// Holds every operation back until `open`.
    pub fn close(&self) {
        self.gate.send_replace(false);
    }

    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// The token (or reentrant owner) under `key`, if it is set and not
    /// expired.
    pub fn holder(&self, key: &str) -> Option<String> {
        let keys = self.keys.lock().unwrap();
        keys.get(key)
            .filter(|(_, exp)| *exp > Instant::now())
            .map(|(value, _)| match value {
                Value::Token(token) => token.clone(),
                Value::Holds { owner, .. } => owner.clone(),
            })
    }

    /// How many holds the reentrant owner of `key` has counted (0: none).
    pub fn holds(&self, key: &str) -> usize {
        let keys = self.keys.lock().unwrap();
        match keys.get(key).filter(|(_, exp)| *exp > Instant::now()) {
            Some((Value::Holds { holds, .. }, _)) => holds.len(),
            _ => 0,
        }
    }

    /// Sets a fencing counter, as `SET {R}:fence n` would.
    pub fn set_counter(&self, fence_key: &str, n: u64) {
        self.counters
            .lock()
            .unwrap()
            .insert(fence_key.to_owned(), n);
    }

    /// Waits (at most `bound`) until `f` holds of this node.
    pub async fn until(&self, bound: Duration, what: &str, f: impl Fn(&Self) -> bool) {
        let mut rx = self.applied.subscribe();
        let wait = async {
            while !f(self) {
                rx.changed().await.expect("node gone");
            }
        };
        tokio::time::timeout(bound, wait)
            .await
            .unwrap_or_else(|_| panic!("{}: {what} not within {bound:?}", self.name));
    }
}

fn apply(keys: &mut Keys, counters: &mut HashMap<String, u64>, op: Owned) -> Reply {
    let now = Instant::now();
    keys.retain(|_, (_, exp)| *exp > now);
    match op {
        Owned::Acquire(key, token, ttl) => match keys.get(&key) {
            Some((_, exp)) => Reply::Held {
                pttl_ms: Some((*exp - now).as_millis() as u64),
            },
            None => {
                keys.insert(key, (Value::Token(token), now + Duration::from_millis(ttl)));
                Reply::Done
            }
        },
        // All or nothing, as acquire_many.lua.
        Owned::AcquireMany(lock_keys, token, ttl) => {
            let held: Vec<u64> = lock_keys
                .iter()
                .filter_map(|k| keys.get(k).map(|(_, exp)| (*exp - now).as_millis() as u64))
                .collect();
            if held.is_empty() {
                for key in lock_keys {
                    let value = Value::Token(token.clone());
                    keys.insert(key, (value, now + Duration::from_millis(ttl)));
                }
                Reply::Done
            } else {
                Reply::Held {
                    pttl_ms: held.into_iter().min(),
                }
            }
        }
        Owned::ExtendMany(lock_keys, token, ttl) => {
            let ours =
                |k: &String| matches!(keys.get(k), Some((Value::Token(t), _)) if *t == token);
            if !lock_keys.iter().all(ours) {
                return Reply::NotHeld;
            }
            for key in &lock_keys {
                if let Some((_, exp)) = keys.get_mut(key) {
                    *exp = (*exp).max(now + Duration::from_millis(ttl));
                }
            }
            Reply::Done
        }
        Owned::ReleaseMany(lock_keys, token) => {
            let mut deleted = false;
            for key in lock_keys {
                if matches!(keys.get(&key), Some((Value::Token(t), _)) if *t == token) {
                    keys.remove(&key);
                    deleted = true;
                }
            }
            if deleted { Reply::Done } else { Reply::NotHeld }
        }
        // The scripts' semantics: one count per hold, however often applied.
        Owned::AcquireReentrant(key, owner, hold, ttl) => match keys.get_mut(&key) {
            None => {
                let value = Value::Holds {
                    owner,
                    holds: vec![hold],
                };
                keys.insert(key, (value, now + Duration::from_millis(ttl)));
                Reply::Done
            }
            Some((Value::Holds { owner: o, holds }, exp)) if *o == owner => {
                if !holds.contains(&hold) {
                    holds.push(hold);
                }
                *exp = (*exp).max(now + Duration::from_millis(ttl));
                Reply::Done
            }
            Some((_, exp)) => Reply::Held {
                pttl_ms: Some((*exp - now).as_millis() as u64),
            },
        },
        Owned::ExtendReentrant(key, owner, ttl) => match keys.get_mut(&key) {
            Some((Value::Holds { owner: o, .. }, exp)) if *o == owner => {
                *exp = (*exp).max(now + Duration::from_millis(ttl));
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
        Owned::ReleaseReentrant(key, owner, hold) => match keys.get_mut(&key) {
            Some((Value::Holds { owner: o, holds }, _)) if *o == owner && holds.contains(&hold) => {
                holds.retain(|h| *h != hold);
                if holds.is_empty() {
                    keys.remove(&key);
                }
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
        Owned::Extend(key, token, ttl) => match keys.get_mut(&key) {
            Some((Value::Token(t), exp)) if *t == token => {
                *exp = (*exp).max(now + Duration::from_millis(ttl));
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
        Owned::AcquireFenced(key, fence_key, token, ttl) => match keys.get(&key) {
            Some((_, exp)) => Reply::Held {
                pttl_ms: Some((*exp - now).as_millis() as u64),
            },
            None => {
                let counter = counters.entry(fence_key).or_insert(0);
                *counter += 1;
                keys.insert(key, (Value::Token(token), now + Duration::from_millis(ttl)));
                Reply::Fence(*counter)
            }
        },
        Owned::WriteBack(key, fence_key, token, fence) => match keys.get(&key) {
            Some((Value::Token(t), _)) if *t == token => {
                let counter = counters.entry(fence_key).or_insert(0);
                *counter = (*counter).max(fence);
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
        Owned::Release(key, token) => match keys.get(&key) {
            Some((Value::Token(t), _)) if *t == token => {
                keys.remove(&key);
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
    }
}

impl Node for MemoryNode {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>> {
        let owned = match op {
            Op::Acquire {
                key, token, ttl_ms, ..
            } => Owned::Acquire(key.into(), token.into(), ttl_ms),
            Op::Extend { key, token, ttl_ms } => Owned::Extend(key.into(), token.into(), ttl_ms),
            Op::Release { key, token } => Owned::Release(key.into(), token.into()),
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
            } => Owned::AcquireFenced(key.into(), fence_key.into(), token.into(), ttl_ms),
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => Owned::WriteBack(key.into(), fence_key.into(), token.into(), fence),
            Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            } => Owned::AcquireMany(keys.to_vec(), token.into(), ttl_ms),
            Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            } => Owned::ExtendMany(keys.to_vec(), token.into(), ttl_ms),
            Op::ReleaseMany { keys, token } => Owned::ReleaseMany(keys.to_vec(), token.into()),
            Op::AcquireReentrant {
                key,
                owner,
                hold,
                ttl_ms,
            } => Owned::AcquireReentrant(key.into(), owner.into(), hold.into(), ttl_ms),
            Op::ExtendReentrant { key, owner, ttl_ms } => {
                Owned::ExtendReentrant(key.into(), owner.into(), ttl_ms)
            }
            Op::ReleaseReentrant { key, owner, hold } => {
                Owned::ReleaseReentrant(key.into(), owner.into(), hold.into())
            }
            _ => return Box::pin(async { Err(NodeError::Protocol("unknown op".into())) }),
        };
        // Queued at call time, as a multiplexed connection writes at once.
        let (tx, rx) = oneshot::channel();
        let sent = self.queue.send((owned, tx));
        Box::pin(async move {
            sent.map_err(|_| NodeError::Connection("node stopped".into()))?;
            rx.await
                .map_err(|_| NodeError::Connection("node stopped".into()))
        })
    }
}
