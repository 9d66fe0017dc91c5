//! What a node does with each operation, written once: the semantics of
//! redquorum's scripts (`src/transport/scripts/*.lua`) on a map of keys, in Rust, on
//! a clock the caller gives.
//!
//! [`MemoryNode`](super::MemoryNode) is a [`Store`] behind a queue; a
//! simulated node in a test can be one behind a simulated network. The
//! model follows Redis where the scripts could tell the difference: a key
//! set with a TTL of `t` ms at `now` lives while the clock reads at most
//! `now + t` (Redis expires a key once its time is past), a sorted-set
//! member scored by its expiry lives while its score is at least the clock,
//! `PTTL` answers what is left, and operations on a key of the wrong type
//! fail or refuse as the scripts do. Releases are recorded as the scripts
//! publish them ([`take_published`](Store::take_published)).
//!
//! ```
//! use redquorum::node::{Op, Reply};
//! use redquorum::internals::Store;
//!
//! let mut store = Store::new();
//! let acquire = |token| Op::Acquire {
//!     key: "{r}:lock",
//!     token,
//!     label: "",
//!     ttl_ms: 100,
//!     holder_ttl: true,
//!     line: &[],
//!     waiter: None,
//!     period: None,
//! };
//! assert_eq!(store.apply(acquire("a"), 0)?, Reply::Done);
//! assert_eq!(store.apply(acquire("b"), 40)?, Reply::Held { pttl_ms: Some(60), ahead: None });
//! assert_eq!(store.apply(acquire("b"), 101)?, Reply::Done); // a's key has expired
//! # Ok::<(), redquorum::NodeError>(())
//! ```

use std::collections::BTreeMap;

mod apply;
mod line;
mod period;

use crate::proto::error::NodeError;
use crate::proto::op::{KEPT, Reply};
use crate::transport::node::Notice;

/// The most members of a sorted set an inspection reads (as `inspect.lua`).
const INSPECT_MEMBERS: usize = 4096;

/// The most waiters past their deadline one hand-over drops (as
/// `line.lua`).
const PRUNE_AT_ONCE: usize = 64;

/// What serving a waiter adds to its ticket (as `line.lua`): 2^52, above
/// every ticket.
const SERVED: i64 = 1 << 52;

/// A node's keys and what each [`Op`](crate::transport::node::Op) does to them (the
/// model's notes are in its source). Time is the node's clock in milliseconds, given to
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

type Members = BTreeMap<String, i64>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// A string: a token, a fencing counter, a permit count.
    Text(String),
    /// A reentrant lock's hash: the owner, counting one per hold (its
    /// tokens, in the order they were taken), and its label.
    Holds {
        owner: String,
        holds: Vec<String>,
        label: String,
    },
    /// A sorted set: members and their scores.
    Scored(Members),
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

/// A node time as a score.
fn score(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
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

    /// Whether the key is a string of `token`'s: the token alone, or
    /// followed by a NUL byte and a label (`ours.lua`).
    fn is_text(&self, token: &str) -> bool {
        matches!(&self.value, Value::Text(t) if t == token
            || t.strip_prefix(token).is_some_and(|rest| rest.starts_with('\0')))
    }

    /// Stores a fence with a lock key's token and label, as
    /// `fence_writeback.lua` does: `token \0 label \0 fence`, once.
    fn store_fence(&mut self, fence: u64) {
        if let Value::Text(t) = &mut self.value {
            match t.matches('\0').count() {
                0 => *t = format!("{t}\0\0{fence}"),
                1 => *t = format!("{t}\0{fence}"),
                _ => {}
            }
        }
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

/// What a lock key holds for `token` labelled `label` (`ours.lua`).
fn labeled(token: &str, label: &str) -> String {
    if label.is_empty() {
        token.to_owned()
    } else {
        format!("{token}\0{label}")
    }
}

/// A refusal with the holder's `PTTL`.
fn held(entry: &Entry, now: u64) -> Reply {
    Reply::Held {
        pttl_ms: entry.pttl(now),
        ahead: None,
    }
}

/// The last (greatest) score of a sorted set, plus one: when
/// `PEXPIREAT last + 1` makes it expire.
fn after_last(members: &Members) -> Option<u64> {
    members
        .values()
        .max()
        .map(|last| u64::try_from(*last).unwrap_or(0) + 1)
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
        self.publish_to(channel, nonce, None);
    }

    /// `notify.lua`: the release of `nonce`, naming whom the lock is kept
    /// for, if anyone (`nonce`, a newline, the name).
    fn publish_to(&mut self, channel: &str, nonce: &str, kept: Option<&str>) {
        let mut nonce = nonce.as_bytes().to_vec();
        if let Some(kept) = kept {
            nonce.push(b'\n');
            nonce.extend_from_slice(kept.as_bytes());
        }
        self.published.push(Notice {
            channel: channel.to_owned(),
            nonce,
        });
    }

    /// Whether `key` is a live string holding `text` (`GET` by `pcall`: a
    /// key of another type holds no string).
    fn holds_text(&mut self, key: &str, text: &str, now: u64) -> bool {
        self.live(key, now).is_some_and(|e| e.is_text(text))
    }

    /// Deletes `key` if it is a string holding `token`.
    fn delete_if(&mut self, key: &str, token: &str, now: u64) -> bool {
        let ours = self.holds_text(key, token, now);
        if ours {
            self.keys.remove(key);
        }
        ours
    }

    /// The sorted set under `key`: `Ok(None)` when there is no such key, an
    /// error for a key of another type (as a sorted-set command meets it).
    fn zset(&mut self, key: &str, now: u64) -> Result<Option<&mut Members>, NodeError> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                value: Value::Scored(members),
                ..
            }) => Ok(Some(members)),
            Some(_) => Err(wrong_type()),
        }
    }

    /// `ZADD key score member`, creating the key (without expiry).
    fn zadd(&mut self, key: &str, member: &str, at: i64, now: u64) -> Result<(), NodeError> {
        match self.zset(key, now)? {
            Some(members) => {
                members.insert(member.to_owned(), at);
            }
            None => {
                let value = Value::Scored(BTreeMap::from([(member.to_owned(), at)]));
                self.set(
                    key,
                    Entry {
                        value,
                        expires: None,
                    },
                );
            }
        }
        Ok(())
    }

    /// `ZREM key member`; the key goes with its last member.
    fn zrem(&mut self, key: &str, member: &str, now: u64) {
        if let Ok(Some(members)) = self.zset(key, now) {
            members.remove(member);
            if members.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// `ZREMRANGEBYSCORE key -inf (now`: members scored below `now` go
    /// (and the key with the last of them).
    fn prune(&mut self, key: &str, now: u64) -> Result<(), NodeError> {
        if let Some(members) = self.zset(key, now)? {
            members.retain(|_, at| *at >= score(now));
            if members.is_empty() {
                self.keys.remove(key);
            }
        }
        Ok(())
    }

    /// `PEXPIREAT key at` on a live key.
    fn expire_at(&mut self, key: &str, at: Option<u64>, now: u64) {
        if let Some(e) = self.live(key, now) {
            e.expires = at;
        }
    }

    /// A sorted set's `PEXPIREAT` just after its last score.
    fn expire_after_last(&mut self, key: &str, also: Option<&str>, now: u64) {
        let at = match self.zset(key, now) {
            Ok(Some(members)) => after_last(members),
            _ => return,
        };
        self.expire_at(key, at, now);
        if let Some(other) = also {
            self.expire_at(other, at, now);
        }
    }

    /// Whether `key` is kept for `me`.
    fn free_to_kept(&mut self, key: &str, me: Option<&str>, now: u64) -> bool {
        me.is_some_and(|me| {
            self.live(key, now).is_some_and(
                |e| matches!(&e.value, Value::Text(v) if v.strip_prefix(KEPT) == Some(me)),
            )
        })
    }

    /// Whether `key` is free to `me` (absent, or kept for it).
    fn free_to(&mut self, key: &str, me: Option<&str>, now: u64) -> bool {
        match (self.live(key, now), me) {
            (None, _) => true,
            (Some(e), Some(me)) => {
                matches!(&e.value, Value::Text(v) if v.strip_prefix(KEPT) == Some(me))
            }
            (Some(_), None) => false,
        }
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

    /// The releases published since the last call, in order (the
    /// [`Notice`]s a listener subscribed to their channels would get).
    pub fn take_published(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.published)
    }

    /// The token (or reentrant owner) under `key` at `now`, if a lock holds
    /// it, without its label (a lock kept for a waiter holds [`KEPT`] and
    /// the waiter's name).
    pub fn holder(&self, key: &str, now: u64) -> Option<&str> {
        match &self.peek(key, now)?.value {
            Value::Text(value) => Some(value.split('\0').next().unwrap_or_default()),
            Value::Holds { owner, .. } => Some(owner),
            Value::Scored(_) => None,
        }
    }

    /// The label stored with the hold under `key` at `now`, if any.
    pub fn label(&self, key: &str, now: u64) -> Option<&str> {
        match &self.peek(key, now)?.value {
            Value::Text(value) => value.split_once('\0').map(|(_, label)| label),
            Value::Holds { label, .. } => Some(label).filter(|l| !l.is_empty()).map(String::as_str),
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
    /// readers, a semaphore's holders) are live at `now`: scored at least
    /// `now`.
    pub fn readers(&self, key: &str, now: u64) -> usize {
        match self.peek(key, now).map(|e| &e.value) {
            Some(Value::Scored(members)) => members.values().filter(|s| **s >= score(now)).count(),
            _ => 0,
        }
    }

    /// How many waiters the line whose first key is `line` holds at `now`
    /// (a lock's line: `{R}:lock:line`), served or not.
    pub fn waiting(&self, line: &str, now: u64) -> usize {
        match self.peek(line, now).map(|e| &e.value) {
            Some(Value::Scored(members)) => members.len(),
            _ => 0,
        }
    }

    /// How many keys with a time to live are live at `now`: every key a
    /// lock sets (a fencing counter has no TTL, and is not counted); a
    /// sorted set only while a member scored by expiry is live.
    pub fn live_keys(&self, now: u64) -> usize {
        self.keys
            .values()
            .filter(|e| e.expires.is_some_and(|at| at >= now))
            .filter(|e| match &e.value {
                Value::Scored(members) => members.values().any(|s| *s >= score(now)),
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

/// A read/write lock's `[writer, readers, intent, line, alive]`.
fn rw(keys: &[String]) -> Result<[&str; 5], NodeError> {
    match keys {
        [a, b, c, d, e] => Ok([a, b, c, d, e]),
        _ => Err(NodeError::Server(
            "ERR a read/write lock takes 5 keys".into(),
        )),
    }
}

/// A permit's `[slot, holders, count, line, alive]`.
fn permit(keys: &[String]) -> Result<[&str; 5], NodeError> {
    match keys {
        [a, b, c, d, e] => Ok([a, b, c, d, e]),
        _ => Err(NodeError::Server("ERR a permit takes 5 keys".into())),
    }
}
