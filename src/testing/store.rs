//! What a node does with each operation, written once: the semantics of
//! redquorum's scripts (`src/scripts/*.lua`) on a map of keys, in Rust, on
//! a clock the caller gives.
//!
//! [`MemoryNode`](super::MemoryNode) is a [`Store`] behind a queue; a
//! simulated node in a test can be one behind a simulated network. The
//! model follows Redis where the scripts could tell the difference: a key
//! set with a TTL of `t` ms at `now` lives while the clock reads at most
//! `now + t` (Redis expires a key once its time is past), a reader lives
//! while its score is at least the clock, `PTTL` answers what is left, and
//! operations on a key of the wrong type fail or refuse as the scripts do.
//! Releases are recorded as the scripts publish them
//! ([`take_published`](Store::take_published)).
//!
//! ```
//! use redquorum::node::{Op, Reply};
//! use redquorum::testing::Store;
//!
//! let mut store = Store::new();
//! let acquire = |token| Op::Acquire { key: "{r}:lock", token, ttl_ms: 100, holder_ttl: true };
//! assert_eq!(store.apply(acquire("a"), 0)?, Reply::Done);
//! assert_eq!(store.apply(acquire("b"), 40)?, Reply::Held { pttl_ms: Some(60) });
//! assert_eq!(store.apply(acquire("b"), 101)?, Reply::Done); // a's key has expired
//! # Ok::<(), redquorum::NodeError>(())
//! ```

use std::collections::BTreeMap;

use crate::error::NodeError;
use crate::node::{Notice, Op, Reply, Snapshot, Stored};

/// The most members of a sorted set an inspection reads (as `inspect.lua`).
const INSPECT_MEMBERS: usize = 4096;

/// A node's keys and what each [`Op`] does to them; see the
/// [module docs](self). Time is the node's clock in milliseconds, given to
/// every call; it must not go backwards.
#[derive(Debug, Clone, Default)]
pub struct Store {
    keys: BTreeMap<String, Entry>,
    /// Releases published and not yet taken.
    published: Vec<Notice>,
}

/// One key: its value and when it expires (`None`: never).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Value,
    expires: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// A string: a token, a fencing counter.
    Text(String),
    /// A reentrant lock's hash: the owner, counting one per hold (its
    /// tokens, in the order they were taken).
    Holds { owner: String, holds: Vec<String> },
    /// A sorted set: members and their scores.
    Scored(BTreeMap<String, u64>),
}

/// A key taken out of a [`Store`] by [`Store::take`], to be put back.
#[derive(Debug)]
pub struct Taken {
    key: String,
    entry: Entry,
}

fn wrong_type() -> NodeError {
    NodeError::Server("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

impl Entry {
    fn text(value: &str, now: u64, ttl_ms: u64) -> Self {
        Entry {
            value: Value::Text(value.to_owned()),
            expires: Some(now.saturating_add(ttl_ms)),
        }
    }

    /// `PTTL`: `Some(ms left)`, or `None` for a key without expiry.
    fn pttl(&self, now: u64) -> Option<u64> {
        self.expires.map(|at| at.saturating_sub(now))
    }

    fn is_text(&self, token: &str) -> bool {
        matches!(&self.value, Value::Text(t) if t == token)
    }

    /// Pushes the expiry out to at least `ttl_ms` from `now` (never
    /// shorter; a key without expiry gets one, as `PTTL` -1 < TTL does in
    /// the scripts).
    fn extend(&mut self, now: u64, ttl_ms: u64) {
        let at = now.saturating_add(ttl_ms);
        match self.expires {
            Some(current) if current >= at => {}
            _ => self.expires = Some(at),
        }
    }
}

/// A refusal with the holder's `PTTL`.
fn held(entry: &Entry, now: u64) -> Reply {
    Reply::Held {
        pttl_ms: entry.pttl(now),
    }
}

impl Store {
    /// An empty node.
    pub fn new() -> Self {
        Store::default()
    }

    /// `key`, unless it has expired by `now` (then it is gone).
    fn live(&mut self, key: &str, now: u64) -> Option<&mut Entry> {
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires.is_some_and(|at| at < now))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    fn peek(&self, key: &str, now: u64) -> Option<&Entry> {
        self.keys
            .get(key)
            .filter(|e| e.expires.is_none_or(|at| at >= now))
    }

    fn set(&mut self, key: &str, entry: Entry) {
        self.keys.insert(key.to_owned(), entry);
    }

    fn publish(&mut self, channel: &str, nonce: &str) {
        self.published.push(Notice {
            channel: channel.to_owned(),
            nonce: nonce.as_bytes().to_vec(),
        });
    }

    /// Deletes `key` if it is a string holding `token`.
    fn delete_if(&mut self, key: &str, token: &str, now: u64) -> bool {
        let ours = self.live(key, now).is_some_and(|e| e.is_text(token));
        if ours {
            self.keys.remove(key);
        }
        ours
    }

    /// The sorted set under `key` with members scored below `now` removed
    /// (`ZREMRANGEBYSCORE key -inf (now`; the key goes with its last
    /// member): `Ok(None)` when there is no such key, an error for a key of
    /// another type.
    fn pruned(&mut self, key: &str, now: u64) -> Result<Option<&mut Entry>, NodeError> {
        let Some(entry) = self.live(key, now) else {
            return Ok(None);
        };
        let Value::Scored(members) = &mut entry.value else {
            return Err(wrong_type());
        };
        members.retain(|_, score| *score >= now);
        if members.is_empty() {
            self.keys.remove(key);
            return Ok(None);
        }
        Ok(self.keys.get_mut(key))
    }

    /// The greatest score in a sorted set.
    fn last_score(entry: &Entry) -> Option<u64> {
        match &entry.value {
            Value::Scored(members) => members.values().max().copied(),
            _ => None,
        }
    }

    /// Applies `op` at `now` on the node's clock, as its script would.
    /// `Err` where the script would fail (a key of the wrong type under a
    /// read/write lock's readers key; a fencing counter that is not a
    /// number).
    pub fn apply(&mut self, op: Op<'_>, now: u64) -> Result<Reply, NodeError> {
        Ok(match op {
            Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl,
            } => match self.live(key, now) {
                // `SET NX` answers nil; acquire.lua the PTTL.
                Some(e) if holder_ttl => held(e, now),
                Some(_) => Reply::Held { pttl_ms: None },
                None => {
                    self.set(key, Entry::text(token, now, ttl_ms));
                    Reply::Done
                }
            },
            Op::Extend { key, token, ttl_ms } => match self.live(key, now) {
                Some(e) if e.is_text(token) => {
                    e.extend(now, ttl_ms);
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            Op::Release { key, token } => {
                if self.delete_if(key, token, now) {
                    self.publish(key, token);
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
            } => {
                if let Some(e) = self.live(key, now) {
                    return Ok(held(e, now));
                }
                // `INCR` keeps the counter's expiry (it has none).
                let counter = self.counter(fence_key, now)? + 1;
                let expires = self.live(fence_key, now).and_then(|e| e.expires);
                let value = Value::Text(counter.to_string());
                self.set(fence_key, Entry { value, expires });
                self.set(key, Entry::text(token, now, ttl_ms));
                Reply::Fence(counter)
            }
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => {
                if !self.live(key, now).is_some_and(|e| e.is_text(token)) {
                    return Ok(Reply::NotHeld);
                }
                if self.counter(fence_key, now)? < fence {
                    // `SET` without `PX`: no expiry.
                    let entry = Entry {
                        value: Value::Text(fence.to_string()),
                        expires: None,
                    };
                    self.set(fence_key, entry);
                }
                Reply::Done
            }
            Op::AcquireReentrant {
                key,
                owner,
                hold,
                ttl_ms,
            } => match self.live(key, now) {
                None => {
                    let value = Value::Holds {
                        owner: owner.to_owned(),
                        holds: vec![hold.to_owned()],
                    };
                    let expires = Some(now.saturating_add(ttl_ms));
                    self.set(key, Entry { value, expires });
                    Reply::Done
                }
                Some(e) => match &mut e.value {
                    Value::Holds { owner: o, holds } if o == owner => {
                        if !holds.iter().any(|h| h == hold) {
                            holds.push(hold.to_owned());
                        }
                        e.extend(now, ttl_ms);
                        Reply::Done
                    }
                    _ => held(e, now),
                },
            },
            Op::ExtendReentrant { key, owner, ttl_ms } => match self.live(key, now) {
                Some(e) if matches!(&e.value, Value::Holds { owner: o, .. } if o == owner) => {
                    e.extend(now, ttl_ms);
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            Op::ReleaseReentrant { key, owner, hold } => {
                let Some(Entry {
                    value: Value::Holds { owner: o, holds },
                    ..
                }) = self.live(key, now)
                else {
                    return Ok(Reply::NotHeld);
                };
                let Some(at) = holds.iter().position(|h| h == hold) else {
                    return Ok(Reply::NotHeld);
                };
                holds.remove(at);
                if o == owner && holds.is_empty() {
                    self.keys.remove(key);
                    self.publish(key, hold);
                }
                Reply::Done
            }
            Op::AcquireMany {
                keys,
                token,
                ttl_ms,
            } => {
                let mut held_any = false;
                let mut least: Option<u64> = None;
                for key in keys {
                    if let Some(e) = self.live(key, now) {
                        held_any = true;
                        if let Some(left) = e.pttl(now) {
                            least = Some(least.map_or(left, |l| l.min(left)));
                        }
                    }
                }
                if held_any {
                    return Ok(Reply::Held { pttl_ms: least });
                }
                for key in keys {
                    self.set(key, Entry::text(token, now, ttl_ms));
                }
                Reply::Done
            }
            Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            } => {
                if !keys
                    .iter()
                    .all(|k| self.live(k, now).is_some_and(|e| e.is_text(token)))
                {
                    return Ok(Reply::NotHeld);
                }
                for key in keys {
                    if let Some(e) = self.live(key, now) {
                        e.extend(now, ttl_ms);
                    }
                }
                Reply::Done
            }
            Op::ReleaseMany { keys, token } => {
                let mut deleted = false;
                for key in keys {
                    if self.delete_if(key, token, now) {
                        self.publish(key, token);
                        deleted = true;
                    }
                }
                if deleted { Reply::Done } else { Reply::NotHeld }
            }
            Op::AcquireRead {
                keys,
                token,
                ttl_ms,
            } => {
                let [writer, readers, intent] = rw(keys)?;
                if let Some(e) = self.peek(writer, now).or_else(|| self.peek(intent, now)) {
                    return Ok(held(e, now));
                }
                let score = now.saturating_add(ttl_ms);
                match self.pruned(readers, now)? {
                    Some(e) => {
                        if let Value::Scored(members) = &mut e.value {
                            members.insert(token.to_owned(), score);
                        }
                        // `PEXPIREAT` just after the latest reader.
                        e.expires = Self::last_score(e).map(|last| last + 1);
                    }
                    None => {
                        let value = Value::Scored(BTreeMap::from([(token.to_owned(), score)]));
                        let expires = Some(score + 1);
                        self.set(readers, Entry { value, expires });
                    }
                }
                Reply::Done
            }
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } => {
                let [_, readers, _] = rw(keys)?;
                let Some(e) = self.live(readers, now) else {
                    return Ok(Reply::NotHeld);
                };
                let Value::Scored(members) = &mut e.value else {
                    return Ok(Reply::NotHeld);
                };
                match members.get_mut(token) {
                    Some(score) if *score >= now => {
                        *score = (*score).max(now.saturating_add(ttl_ms));
                    }
                    _ => return Ok(Reply::NotHeld),
                }
                e.expires = Self::last_score(e).map(|last| last + 1);
                Reply::Done
            }
            Op::ReleaseRead { keys, token } => {
                let [writer, readers, _] = rw(keys)?;
                let removed = match self.live(readers, now) {
                    Some(Entry {
                        value: Value::Scored(members),
                        ..
                    }) => members.remove(token).is_some(),
                    _ => false,
                };
                if !removed {
                    return Ok(Reply::NotHeld);
                }
                if self
                    .keys
                    .get(readers)
                    .is_some_and(|e| matches!(&e.value, Value::Scored(m) if m.is_empty()))
                {
                    self.keys.remove(readers);
                }
                self.publish(writer, token);
                Reply::Done
            }
            Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
            } => {
                let [writer, readers, intent] = rw(keys)?;
                if let Some(e) = self.live(writer, now) {
                    return Ok(held(e, now));
                }
                let last = self.pruned(readers, now)?.and_then(|e| Self::last_score(e));
                if let Some(last) = last {
                    let left = last - now;
                    // Never a shorter intent than stands.
                    let stands = self.live(intent, now).and_then(|e| e.pttl(now));
                    let keep = stands.map_or(left + ttl_ms, |s| s.max(left + ttl_ms));
                    self.set(intent, Entry::text(token, now, keep));
                    return Ok(Reply::Held {
                        pttl_ms: Some(left),
                    });
                }
                self.set(writer, Entry::text(token, now, ttl_ms));
                self.keys.remove(intent);
                Reply::Done
            }
            Op::ReleaseWrite { keys, token } => {
                let [writer, _, intent] = rw(keys)?;
                let writer_gone = self.delete_if(writer, token, now);
                let intent_gone = self.delete_if(intent, token, now);
                if writer_gone || intent_gone {
                    self.publish(writer, token);
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Op::Inspect { keys } => Reply::Snapshot(self.inspect(keys, now)),
        })
    }

    /// A fencing counter's value (0 when absent), or the error `INCR` and
    /// `tonumber` would meet.
    fn counter(&mut self, key: &str, now: u64) -> Result<u64, NodeError> {
        match self.live(key, now) {
            None => Ok(0),
            Some(Entry {
                value: Value::Text(n),
                ..
            }) => n
                .parse()
                .map_err(|_| NodeError::Server("ERR value is not an integer".into())),
            Some(_) => Err(wrong_type()),
        }
    }

    /// What `inspect.lua` reads.
    fn inspect(&mut self, keys: &[String], now: u64) -> Snapshot {
        let stored = keys
            .iter()
            .map(|key| {
                let Some(e) = self.live(key, now) else {
                    return Stored::Absent;
                };
                let pttl_ms = e.pttl(now);
                match &e.value {
                    Value::Text(value) => Stored::Text {
                        value: value.clone().into_bytes(),
                        pttl_ms,
                    },
                    Value::Holds { owner, holds } => {
                        let mut fields = vec![(
                            owner.clone().into_bytes(),
                            holds.len().to_string().into_bytes(),
                        )];
                        fields.extend(holds.iter().map(|hold| {
                            let mut name = vec![0xff];
                            name.extend_from_slice(hold.as_bytes());
                            (name, b"1".to_vec())
                        }));
                        Stored::Hash { fields, pttl_ms }
                    }
                    Value::Scored(members) => {
                        let mut members: Vec<(Vec<u8>, u64)> = members
                            .iter()
                            .map(|(m, s)| (m.clone().into_bytes(), *s))
                            .collect();
                        members.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
                        members.truncate(INSPECT_MEMBERS);
                        Stored::Scored { members, pttl_ms }
                    }
                }
            })
            .collect();
        Snapshot::new(now, stored)
    }

    /// The releases published since the last call, in order (the
    /// [`Notice`]s a listener subscribed to their channels would get).
    pub fn take_published(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.published)
    }

    /// The token (or reentrant owner) under `key` at `now`, if a lock holds
    /// it.
    pub fn holder(&self, key: &str, now: u64) -> Option<&str> {
        match &self.peek(key, now)?.value {
            Value::Text(token) => Some(token),
            Value::Holds { owner, .. } => Some(owner),
            Value::Scored(_) => None,
        }
    }

    /// The holds counted under the reentrant lock `key` at `now`, oldest
    /// first (none when it is not a reentrant lock).
    pub fn holds(&self, key: &str, now: u64) -> &[String] {
        match self.peek(key, now).map(|e| &e.value) {
            Some(Value::Holds { holds, .. }) => holds,
            _ => &[],
        }
    }

    /// How many members of the sorted set `key` (a read/write lock's
    /// readers) are live at `now`.
    pub fn readers(&self, key: &str, now: u64) -> usize {
        match self.peek(key, now).map(|e| &e.value) {
            Some(Value::Scored(members)) => members.values().filter(|s| **s >= now).count(),
            _ => 0,
        }
    }

    /// How many keys with a time to live are live at `now`: every key a
    /// lock sets (a fencing counter has no TTL, and is not counted); a
    /// readers key only while a reader in it is live.
    pub fn live_keys(&self, now: u64) -> usize {
        self.keys
            .values()
            .filter(|e| e.expires.is_some_and(|at| at >= now))
            .filter(|e| match &e.value {
                Value::Scored(members) => members.values().any(|s| *s >= now),
                _ => true,
            })
            .count()
    }

    /// Sets `key` to the string `value`, with no expiry (as `SET key value`):
    /// a fencing counter, say.
    pub fn set_text(&mut self, key: &str, value: &str) {
        let entry = Entry {
            value: Value::Text(value.to_owned()),
            expires: None,
        };
        self.set(key, entry);
    }

    /// Drops every key without a time to live (the fencing counters), and
    /// nothing else.
    pub fn forget_persistent(&mut self) {
        self.keys.retain(|_, e| e.expires.is_some());
    }

    /// Drops every key (a restart without persistence) and every
    /// unpublished release.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.published.clear();
    }

    /// Takes `key` out, as if it were not there, until
    /// [`put_back`](Self::put_back): for negative controls that make an
    /// operation blind to one key.
    pub fn take(&mut self, key: &str) -> Option<Taken> {
        let entry = self.keys.remove(key)?;
        Some(Taken {
            key: key.to_owned(),
            entry,
        })
    }

    /// Puts back what [`take`](Self::take) took.
    pub fn put_back(&mut self, taken: Taken) {
        self.keys.insert(taken.key, taken.entry);
    }
}

/// A read/write lock's `[writer, readers, intent]`.
fn rw(keys: &[String]) -> Result<[&str; 3], NodeError> {
    match keys {
        [writer, readers, intent] => Ok([writer, readers, intent]),
        _ => Err(NodeError::Server(
            "ERR a read/write lock takes 3 keys".into(),
        )),
    }
}
