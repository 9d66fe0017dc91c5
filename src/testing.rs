//! In-memory lock nodes (feature `testing`), for your tests and examples: a
//! [`Redlock`] over them behaves as over Redis masters, without Redis.
//!
//! A [`MemoryNode`] has the semantics of redquorum's Redis scripts for every
//! operation. Like a Redis connection, it applies operations strictly in
//! the order they were sent, even when the caller has stopped waiting for
//! the reply; a [frozen](MemoryNode::freeze) node holds every operation back
//! until [thawed](MemoryNode::thaw), then applies the queue in order (a
//! SIGSTOPped Redis). Keys expire by tokio's clock, so a test on a paused
//! runtime controls time. It reports no releases
//! (`Node::listen`): waiters poll.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! use std::time::Duration;
//! use redquorum::testing::{self, MemoryNode};
//!
//! let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
//! let redlock = testing::redlock_over(&nodes).await;
//! nodes[0].freeze(); // a minority frozen: locks go on
//! let lock = redlock.try_lock("orders:42", Duration::from_secs(10)).await?;
//! assert_eq!(nodes[1].holder("{orders:42}:lock").as_deref(), Some(lock.token()));
//! lock.release().await?;
//! nodes[0].thaw();
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::NodeError;
use crate::node::{Node, Op, Reply};
use crate::redlock::Redlock;

/// A client over `n` new in-memory nodes (`memory://0` …), with default
/// settings. Needs a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let redlock = redquorum::testing::redlock(5).await;
/// assert_eq!(redlock.quorum(), 3);
/// # }
/// ```
pub async fn redlock(n: usize) -> Redlock {
    let nodes: Vec<Arc<MemoryNode>> = (0..n).map(MemoryNode::new).collect();
    redlock_over(&nodes).await
}

/// A client over `nodes`, with default settings (see the
/// [module example](self)).
pub async fn redlock_over(nodes: &[Arc<MemoryNode>]) -> Redlock {
    Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| Arc::clone(n) as Arc<dyn Node>))
        .build()
        .await
        .expect("in-memory nodes always build")
}

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

/// One in-memory lock node; see the [module docs](self).
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
    /// Node `i` of a set, named `memory://i`. Needs a tokio runtime (it
    /// spawns its queue).
    pub fn new(i: usize) -> Arc<Self> {
        Self::named(&format!("memory://{i}"))
    }

    /// A node named `name` (in logs, votes and metric labels). Needs a
    /// tokio runtime.
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
                let answer = apply(
                    &mut keys.lock().unwrap_or_else(PoisonError::into_inner),
                    &mut counters.lock().unwrap_or_else(PoisonError::into_inner),
                    op,
                );
                applied.send_modify(|n| *n += 1);
                let _ = reply.send(answer);
            }
        });
        node
    }

    /// Holds every operation back until [`thaw`](Self::thaw), as a
    /// SIGSTOPped server would; keys keep expiring meanwhile.
    pub fn freeze(&self) {
        self.gate.send_replace(false);
    }

    /// Applies the operations held back, in order, and every later one.
    pub fn thaw(&self) {
        self.gate.send_replace(true);
    }

    /// The token (or reentrant owner) under `key`, if it is set and not
    /// expired.
    pub fn holder(&self, key: &str) -> Option<String> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(key)
            .filter(|(_, exp)| *exp > Instant::now())
            .map(|(value, _)| match value {
                Value::Token(token) => token.clone(),
                Value::Holds { owner, .. } => owner.clone(),
            })
    }

    /// How many holds the reentrant owner of `key` has counted (0: none).
    pub fn holds(&self, key: &str) -> usize {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// Resolves once `f` holds of this node, checked now and after every
    /// operation it applies. Bound it with `tokio::time::timeout`.
    pub async fn wait_until(&self, f: impl Fn(&Self) -> bool) {
        let mut applied = self.applied.subscribe();
        while !f(self) {
            if applied.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
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
