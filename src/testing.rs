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
use crate::node::{Node, Op, Reply, Snapshot, Stored};
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
    Holds {
        owner: String,
        holds: Vec<String>,
    },
    /// A read/write lock's readers, each with its expiry.
    Readers(HashMap<String, Instant>),
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
    AcquireRead(Vec<String>, String, u64),
    ExtendRead(Vec<String>, String, u64),
    ReleaseRead(Vec<String>, String),
    AcquireWrite(Vec<String>, String, u64),
    ReleaseWrite(Vec<String>, String),
    Inspect(Vec<String>),
}

/// One in-memory lock node; see the [module docs](self).
#[derive(Debug)]
pub struct MemoryNode {
    name: Arc<str>,
    queue: mpsc::UnboundedSender<(Owned, oneshot::Sender<Result<Reply, NodeError>>)>,
    gate: watch::Sender<bool>,
    keys: Arc<Mutex<Keys>>,
    /// Fencing counters (no TTL).
    counters: Arc<Mutex<HashMap<String, u64>>>,
    /// Bumped after every applied operation, so tests can wait for state.
    applied: watch::Sender<u64>,
}

/// The in-memory nodes' clock, for [`Op::Inspect`]: milliseconds since the
/// first node was made.
fn clock_ms(at: Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    at.saturating_duration_since(epoch).as_millis() as u64
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
        clock_ms(Instant::now()); // the epoch is at or before every key
        let (queue, mut rx) =
            mpsc::unbounded_channel::<(Owned, oneshot::Sender<Result<Reply, NodeError>>)>();
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
            .and_then(|(value, _)| match value {
                Value::Token(token) => Some(token.clone()),
                Value::Holds { owner, .. } => Some(owner.clone()),
                Value::Readers(_) => None,
            })
    }

    /// How many live readers the readers key `key` of a read/write lock
    /// counts ([`KeyLayout::rw_keys`](crate::KeyLayout::rw_keys)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// use std::time::Duration;
    /// use redquorum::testing::{self, MemoryNode};
    /// let nodes: Vec<_> = (0..3).map(MemoryNode::new).collect();
    /// let redlock = testing::redlock_over(&nodes).await;
    /// let reader = redlock.read_lock("doc", Duration::from_secs(5)).await?;
    /// assert_eq!(nodes[0].readers("{doc}:readers"), 1);
    /// reader.release().await?;
    /// assert_eq!(nodes[0].readers("{doc}:readers"), 0);
    /// # Ok(()) }
    /// ```
    pub fn readers(&self, key: &str) -> usize {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match keys.get(key) {
            Some((Value::Readers(readers), exp)) if *exp > now => {
                readers.values().filter(|exp| **exp > now).count()
            }
            _ => 0,
        }
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

fn apply(
    keys: &mut Keys,
    counters: &mut HashMap<String, u64>,
    op: Owned,
) -> Result<Reply, NodeError> {
    let now = Instant::now();
    keys.retain(|_, (_, exp)| *exp > now);
    // The read/write scripts touch the readers key with sorted-set commands,
    // which Redis refuses on a key of another type (a lock of that name).
    if let Owned::AcquireRead(rw, ..) | Owned::AcquireWrite(rw, ..) = &op
        && keys
            .get(&rw[1])
            .is_some_and(|(v, _)| !matches!(v, Value::Readers(_)))
    {
        return Err(NodeError::Server(
            "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
        ));
    }
    Ok(apply_on_types(keys, counters, op, now))
}

/// What [`Op::Inspect`] reads: each key as `inspect.lua` reports it.
fn inspect(keys: &Keys, counters: &HashMap<String, u64>, asked: &[String], now: Instant) -> Reply {
    let left = |exp: &Instant| Some((*exp - now).as_millis() as u64);
    let stored = asked
        .iter()
        .map(|key| match keys.get(key) {
            Some((Value::Token(token), exp)) => Stored::Text {
                value: token.clone().into_bytes(),
                pttl_ms: left(exp),
            },
            Some((Value::Holds { owner, holds }, exp)) => {
                let mut fields = vec![(
                    owner.clone().into_bytes(),
                    holds.len().to_string().into_bytes(),
                )];
                fields.extend(holds.iter().map(|hold| {
                    let mut name = vec![0xff];
                    name.extend_from_slice(hold.as_bytes());
                    (name, b"1".to_vec())
                }));
                Stored::Hash {
                    fields,
                    pttl_ms: left(exp),
                }
            }
            Some((Value::Readers(readers), exp)) => {
                let mut members: Vec<(Vec<u8>, u64)> = readers
                    .iter()
                    .map(|(token, exp)| (token.clone().into_bytes(), clock_ms(*exp)))
                    .collect();
                members.sort_by_key(|(token, score)| (*score, token.clone()));
                Stored::Scored {
                    members,
                    pttl_ms: left(exp),
                }
            }
            None => match counters.get(key) {
                Some(n) => Stored::Text {
                    value: n.to_string().into_bytes(),
                    pttl_ms: None,
                },
                None => Stored::Absent,
            },
        })
        .collect();
    Reply::Snapshot(Snapshot::new(clock_ms(now), stored))
}

/// [`apply`], the keys' types being those the operation expects.
fn apply_on_types(
    keys: &mut Keys,
    counters: &mut HashMap<String, u64>,
    op: Owned,
    now: Instant,
) -> Reply {
    match op {
        Owned::Inspect(asked) => inspect(keys, counters, &asked, now),
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
        // As the read/write scripts: `rw` is `[writer, readers, intent]`.
        Owned::AcquireRead(rw, token, ttl) => {
            if let Some((_, exp)) = keys.get(&rw[0]).or_else(|| keys.get(&rw[2])) {
                return Reply::Held {
                    pttl_ms: Some((*exp - now).as_millis() as u64),
                };
            }
            let until = now + Duration::from_millis(ttl);
            match keys.get_mut(&rw[1]) {
                Some((Value::Readers(readers), exp)) => {
                    readers.retain(|_, exp| *exp > now);
                    readers.insert(token, until);
                    // The key expires with its latest reader (pruned to
                    // nothing, Redis made a new key: just this reader's).
                    *exp = readers.values().max().copied().unwrap_or(until);
                }
                _ => {
                    let readers = Value::Readers(HashMap::from([(token, until)]));
                    keys.insert(rw[1].clone(), (readers, until));
                }
            }
            Reply::Done
        }
        Owned::ExtendRead(rw, token, ttl) => match keys.get_mut(&rw[1]) {
            Some((Value::Readers(readers), exp)) => match readers.get_mut(&token) {
                Some(mine) if *mine > now => {
                    let until = now + Duration::from_millis(ttl);
                    *mine = (*mine).max(until);
                    *exp = (*exp).max(until);
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            _ => Reply::NotHeld,
        },
        Owned::ReleaseRead(rw, token) => {
            let Some((Value::Readers(readers), _)) = keys.get_mut(&rw[1]) else {
                return Reply::NotHeld;
            };
            if readers.remove(&token).is_none() {
                return Reply::NotHeld;
            }
            if readers.is_empty() {
                keys.remove(&rw[1]);
            }
            Reply::Done
        }
        Owned::AcquireWrite(rw, token, ttl) => {
            if let Some((_, exp)) = keys.get(&rw[0]) {
                return Reply::Held {
                    pttl_ms: Some((*exp - now).as_millis() as u64),
                };
            }
            // Expired readers are pruned, and the key with the last of them.
            let mut last = None;
            if let Some((Value::Readers(readers), _)) = keys.get_mut(&rw[1]) {
                readers.retain(|_, exp| *exp > now);
                last = readers.values().max().copied();
                if last.is_none() {
                    keys.remove(&rw[1]);
                }
            }
            let ttl = Duration::from_millis(ttl);
            if let Some(last) = last {
                // The intent takes our token, never a shorter life.
                let stands = keys.get(&rw[2]).map(|(_, exp)| *exp);
                let intent = stands.map_or(last + ttl, |exp| exp.max(last + ttl));
                keys.insert(rw[2].clone(), (Value::Token(token), intent));
                return Reply::Held {
                    pttl_ms: Some((last - now).as_millis() as u64),
                };
            }
            keys.insert(rw[0].clone(), (Value::Token(token), now + ttl));
            keys.remove(&rw[2]);
            Reply::Done
        }
        Owned::Release(key, token) => match keys.get(&key) {
            Some((Value::Token(t), _)) if *t == token => {
                keys.remove(&key);
                Reply::Done
            }
            _ => Reply::NotHeld,
        },
        Owned::ReleaseWrite(rw, token) => {
            let mut deleted = false;
            for key in [&rw[0], &rw[2]] {
                if matches!(keys.get(key), Some((Value::Token(t), _)) if *t == token) {
                    keys.remove(key);
                    deleted = true;
                }
            }
            if deleted { Reply::Done } else { Reply::NotHeld }
        }
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
            Op::AcquireRead {
                keys,
                token,
                ttl_ms,
            } => Owned::AcquireRead(keys.to_vec(), token.into(), ttl_ms),
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } => Owned::ExtendRead(keys.to_vec(), token.into(), ttl_ms),
            Op::ReleaseRead { keys, token } => Owned::ReleaseRead(keys.to_vec(), token.into()),
            Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            } => Owned::AcquireWrite(keys.to_vec(), token.into(), ttl_ms),
            Op::ReleaseWrite { keys, token } => Owned::ReleaseWrite(keys.to_vec(), token.into()),
            Op::Inspect { keys } => Owned::Inspect(keys.to_vec()),
        };
        // Queued at call time, as a multiplexed connection writes at once.
        let (tx, rx) = oneshot::channel();
        let sent = self.queue.send((owned, tx));
        Box::pin(async move {
            sent.map_err(|_| NodeError::Connection("node stopped".into()))?;
            rx.await
                .map_err(|_| NodeError::Connection("node stopped".into()))?
        })
    }
}
