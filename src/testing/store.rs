//! What a node does with each operation, written once: the semantics of
//! redquorum's scripts (`src/scripts/*.lua`) on a map of keys, in Rust, on
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
//! use redquorum::testing::Store;
//!
//! let mut store = Store::new();
//! let acquire = |token| Op::Acquire {
//!     key: "{r}:lock",
//!     token,
//!     ttl_ms: 100,
//!     holder_ttl: true,
//!     line: &[],
//!     waiter: None,
//! };
//! assert_eq!(store.apply(acquire("a"), 0)?, Reply::Done);
//! assert_eq!(store.apply(acquire("b"), 40)?, Reply::Held { pttl_ms: Some(60) });
//! assert_eq!(store.apply(acquire("b"), 101)?, Reply::Done); // a's key has expired
//! # Ok::<(), redquorum::NodeError>(())
//! ```

use std::collections::BTreeMap;

use crate::error::NodeError;
use crate::node::{KEPT, MAX_LINE, Notice, Op, READERS_TURN, Reply, Snapshot, Stored, Waiter};

/// The most members of a sorted set an inspection reads (as `inspect.lua`).
const INSPECT_MEMBERS: usize = 4096;

/// The most waiters past their deadline one hand-over drops (as
/// `line.lua`).
const PRUNE_AT_ONCE: usize = 64;

/// What serving a waiter adds to its ticket (as `line.lua`): 2^52, above
/// every ticket.
const SERVED: i64 = 1 << 52;

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

type Members = BTreeMap<String, i64>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// A string: a token, a fencing counter, a permit count.
    Text(String),
    /// A reentrant lock's hash: the owner, counting one per hold (its
    /// tokens, in the order they were taken).
    Holds { owner: String, holds: Vec<String> },
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

    fn is_text(&self, text: &str) -> bool {
        matches!(&self.value, Value::Text(t) if t == text)
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
        self.published.push(Notice {
            channel: channel.to_owned(),
            nonce: nonce.as_bytes().to_vec(),
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

    /// `line.lua`'s `line_join`: in line with `ticket` until `deadline`
    /// (the line full, no one new).
    fn line_join(
        &mut self,
        line: &[String],
        who: &str,
        ticket: u64,
        deadline: u64,
        now: u64,
    ) -> Result<(), NodeError> {
        let (queue, alive) = (&line[0], &line[1]);
        let (known, count) = match self.zset(alive, now)? {
            Some(members) => (members.contains_key(who), members.len()),
            None => (false, 0),
        };
        if !known && count >= MAX_LINE {
            return Ok(());
        }
        self.zadd(queue, who, score(ticket), now)?;
        self.zadd(alive, who, score(deadline), now)?;
        let at = match self.zset(alive, now)? {
            Some(members) => after_last(members),
            None => None,
        };
        self.expire_at(alive, at, now);
        self.expire_at(queue, at, now);
        Ok(())
    }

    /// `line_wait`: a refused waiter stays in line for the holder's time
    /// left (`pttl`, `None` for no expiry), an eighth more and its patience.
    fn line_wait(
        &mut self,
        line: &[String],
        who: &str,
        waiter: &Waiter<'_>,
        pttl: Option<u64>,
        now: u64,
    ) -> Result<(), NodeError> {
        let left = pttl.unwrap_or(0);
        let deadline = now + left + left / 8 + waiter.patience_ms;
        self.line_join(line, who, waiter.ticket, deadline, now)
    }

    fn line_leave(&mut self, line: &[String], who: &str, now: u64) {
        self.zrem(&line[0], who, now);
        self.zrem(&line[1], who, now);
    }

    /// `line_hand_over`: keeps `key` for the first waiter in `line` not yet
    /// served; false when no one waits.
    fn hand_over(&mut self, key: &str, line: &[String], now: u64) -> Result<bool, NodeError> {
        let (queue, alive) = (&line[0], &line[1]);
        if self.live(queue, now).is_none() {
            return Ok(false);
        }
        let mut gone: Vec<(i64, String)> = match self.zset(alive, now)? {
            Some(members) => members
                .iter()
                .filter(|(_, at)| **at < score(now))
                .map(|(who, at)| (*at, who.clone()))
                .collect(),
            None => Vec::new(),
        };
        gone.sort();
        for (_, who) in gone.into_iter().take(PRUNE_AT_ONCE) {
            self.line_leave(line, &who, now);
        }
        let head = match self.zset(queue, now)? {
            Some(members) => members
                .iter()
                .filter(|(_, ticket)| (0..SERVED).contains(*ticket))
                .min_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)))
                .map(|(who, ticket)| (who.clone(), *ticket)),
            None => None,
        };
        let Some((head, ticket)) = head else {
            return Ok(false);
        };
        let deadline = match self.zset(alive, now)? {
            Some(members) => members.get(&head).copied().unwrap_or(0),
            None => 0,
        };
        let left = deadline - score(now);
        let patience: i64 = head[1..]
            .split(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let keep = u64::try_from(patience.min(left).max(1)).unwrap_or(1);
        if head.starts_with('r') {
            self.set(key, Entry::text(READERS_TURN, now, keep));
        } else {
            self.set(key, Entry::text(&format!("{KEPT}{head}"), now, keep));
            self.zadd(queue, &head, ticket + SERVED, now)?;
        }
        Ok(true)
    }

    /// `release.lua` on `key` with `line`: if `key` holds `token` (or, for
    /// `me` leaving its line, is kept for `me`), kept for the first waiter
    /// or deleted, and published. [`Reply::Done`] only when it held
    /// `token`.
    fn give_back(
        &mut self,
        key: &str,
        token: &str,
        line: &[String],
        me: Option<&str>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        if let Some(me) = me {
            self.line_leave(line, me, now);
        }
        if self.holds_text(key, token, now) {
            if line.len() != 2 || !self.hand_over(key, line, now)? {
                self.keys.remove(key);
            }
            self.publish(key, token);
            return Ok(Reply::Done);
        }
        match me {
            Some(me) => self.give_back_kept(key, token, line, me, now),
            None => Ok(Reply::NotHeld),
        }
    }

    /// A key kept for `me`, which no longer waits: given on (or deleted)
    /// and published; [`Reply::NotHeld`] either way.
    fn give_back_kept(
        &mut self,
        key: &str,
        token: &str,
        line: &[String],
        me: &str,
        now: u64,
    ) -> Result<Reply, NodeError> {
        if self.free_to_kept(key, Some(me), now) {
            if line.len() != 2 || !self.hand_over(key, line, now)? {
                self.keys.remove(key);
            }
            self.publish(key, token);
        }
        Ok(Reply::NotHeld)
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

    /// Applies `op` at `now` on the node's clock, as its script would.
    /// `Err` where the script would fail (a key of the wrong type under a
    /// sorted-set key; a fencing counter that is not a number).
    pub fn apply(&mut self, op: Op<'_>, now: u64) -> Result<Reply, NodeError> {
        Ok(match op {
            Op::Acquire {
                key,
                token,
                ttl_ms,
                holder_ttl,
                line,
                waiter,
            } => match waiter.filter(|_| line.len() == 2) {
                Some(waiter) => {
                    let me = waiter.name(false);
                    if self.free_to(key, Some(&me), now) {
                        self.set(key, Entry::text(token, now, ttl_ms));
                        self.line_leave(line, &me, now);
                        Reply::Done
                    } else {
                        let pttl = self.peek(key, now).and_then(|e| e.pttl(now));
                        self.line_wait(line, &me, &waiter, pttl, now)?;
                        Reply::Held { pttl_ms: pttl }
                    }
                }
                None => match self.live(key, now) {
                    // `SET NX` answers nil; acquire.lua the PTTL.
                    Some(e) if holder_ttl => held(e, now),
                    Some(_) => Reply::Held { pttl_ms: None },
                    None => {
                        self.set(key, Entry::text(token, now, ttl_ms));
                        Reply::Done
                    }
                },
            },
            Op::Extend { key, token, ttl_ms } => match self.live(key, now) {
                Some(e) if e.is_text(token) => {
                    e.extend(now, ttl_ms);
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            Op::Release {
                key,
                token,
                line,
                waiter,
            } => {
                let me = waiter.filter(|_| line.len() == 2).map(|w| w.name(false));
                self.give_back(key, token, line, me.as_deref(), now)?
            }
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                ttl_ms,
                line,
                waiter,
            } => {
                let waiter = waiter.filter(|_| line.len() == 2);
                let me = waiter.map(|w| w.name(false));
                if !self.free_to(key, me.as_deref(), now) {
                    let pttl = self.peek(key, now).and_then(|e| e.pttl(now));
                    if let (Some(w), Some(me)) = (waiter, &me) {
                        self.line_wait(line, me, &w, pttl, now)?;
                    }
                    return Ok(Reply::Held { pttl_ms: pttl });
                }
                // `INCR` keeps the counter's expiry (it has none).
                let counter = self.counter(fence_key, now)? + 1;
                let expires = self.live(fence_key, now).and_then(|e| e.expires);
                let value = Value::Text(counter.to_string());
                self.set(fence_key, Entry { value, expires });
                self.set(key, Entry::text(token, now, ttl_ms));
                if let Some(me) = &me {
                    self.line_leave(line, me, now);
                }
                Reply::Fence(counter)
            }
            Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            } => {
                if !self.holds_text(key, token, now) {
                    return Ok(Reply::NotHeld);
                }
                if self.counter(fence_key, now)? < fence {
                    // `SET` without `PX`: no expiry.
                    self.set_text(fence_key, &fence.to_string());
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
                if !keys.iter().all(|k| self.holds_text(k, token, now)) {
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
                waiter,
            } => self.acquire_read(keys, token, ttl_ms, waiter, now)?,
            Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            } => {
                let [_, readers, ..] = rw(keys)?;
                let Ok(Some(members)) = self.zset(readers, now) else {
                    return Ok(Reply::NotHeld);
                };
                match members.get_mut(token) {
                    Some(at) if *at >= score(now) => {
                        *at = (*at).max(score(now.saturating_add(ttl_ms)));
                    }
                    _ => return Ok(Reply::NotHeld),
                }
                self.expire_after_last(readers, None, now);
                Reply::Done
            }
            Op::ReleaseRead {
                keys,
                token,
                waiter,
            } => {
                let [writer, readers, ..] = rw(keys)?;
                if let Some(w) = waiter {
                    self.line_leave(&keys[3..], &w.name(true), now);
                }
                let removed =
                    matches!(self.zset(readers, now), Ok(Some(m)) if m.contains_key(token));
                if !removed {
                    return Ok(Reply::NotHeld);
                }
                self.zrem(readers, token, now);
                self.publish(writer, token);
                Reply::Done
            }
            Op::AcquireWrite {
                keys,
                token,
                ttl_ms,
                waiter,
            } => self.acquire_write(keys, token, ttl_ms, waiter, now)?,
            Op::ReleaseWrite {
                keys,
                token,
                waiter,
            } => {
                let [writer, _, intent, ..] = rw(keys)?;
                let line = &keys[3..];
                let me = waiter.map(|w| w.name(false));
                if let Some(me) = &me {
                    self.line_leave(line, me, now);
                }
                let ours = self.holds_text(writer, token, now);
                let changed = ours || self.free_to_kept(writer, me.as_deref(), now);
                if changed && !self.hand_over(writer, line, now)? {
                    self.keys.remove(writer);
                }
                let intent_gone = self.delete_if(intent, token, now);
                if changed || intent_gone {
                    self.publish(writer, token);
                }
                if ours || intent_gone {
                    Reply::Done
                } else {
                    Reply::NotHeld
                }
            }
            Op::AcquirePermit {
                keys,
                token,
                ttl_ms,
                permits,
                waiter,
            } => self.acquire_permit(keys, token, ttl_ms, permits, waiter, now)?,
            Op::ExtendPermit {
                keys,
                token,
                ttl_ms,
            } => {
                let [slot, holders, count, ..] = permit(keys)?;
                if !self.holds_text(slot, token, now) {
                    return Ok(Reply::NotHeld);
                }
                if let Some(e) = self.live(slot, now) {
                    e.extend(now, ttl_ms);
                }
                let until = score(now.saturating_add(ttl_ms));
                let current = match self.zset(holders, now) {
                    Ok(Some(members)) => members.get(token).copied().unwrap_or(0),
                    _ => 0,
                };
                if current < until {
                    self.zadd(holders, token, until, now)?;
                }
                self.expire_after_last(holders, Some(count), now);
                Reply::Done
            }
            Op::ReleasePermit {
                keys,
                token,
                waiter,
            } => {
                let [slot, holders, count, ..] = permit(keys)?;
                let me = waiter.map(|w| w.name(false));
                if let Some(me) = &me {
                    self.line_leave(&keys[3..], me, now);
                }
                self.zrem(holders, token, now);
                if self.live(holders, now).is_none() {
                    self.keys.remove(count);
                }
                self.give_back(slot, token, &keys[3..], me.as_deref(), now)?
            }
            Op::Inspect { keys } => Reply::Snapshot(self.inspect(keys, now)),
        })
    }

    /// `acquire_read.lua`.
    fn acquire_read(
        &mut self,
        keys: &[String],
        token: &str,
        ttl_ms: u64,
        waiter: Option<Waiter<'_>>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        let [writer, readers, intent, ..] = rw(keys)?;
        let line = &keys[3..];
        let me = waiter.map(|w| w.name(true));
        let turn = self.holds_text(writer, READERS_TURN, now);
        let stands = match self.peek(writer, now) {
            Some(e) if !turn => Some(e),
            _ => self.peek(intent, now),
        };
        if let Some(e) = stands {
            let pttl = e.pttl(now);
            if let (Some(w), Some(me)) = (waiter, &me) {
                self.line_wait(line, me, &w, pttl, now)?;
            }
            return Ok(Reply::Held { pttl_ms: pttl });
        }
        self.prune(readers, now)?;
        self.zadd(readers, token, score(now.saturating_add(ttl_ms)), now)?;
        self.expire_after_last(readers, None, now);
        if let Some(me) = &me {
            self.line_leave(line, me, now);
        }
        if turn {
            let readers_left = match self.zset(&line[0], now)? {
                Some(members) => members
                    .iter()
                    .any(|(who, ticket)| (0..SERVED).contains(ticket) && who.starts_with('r')),
                None => false,
            };
            if !readers_left {
                self.keys.remove(writer);
                self.publish(writer, token);
            }
        }
        Ok(Reply::Done)
    }

    /// `acquire_write.lua`.
    fn acquire_write(
        &mut self,
        keys: &[String],
        token: &str,
        ttl_ms: u64,
        waiter: Option<Waiter<'_>>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        let [writer, readers, intent, ..] = rw(keys)?;
        let line = &keys[3..];
        let me = waiter.map(|w| w.name(false));
        if !self.free_to(writer, me.as_deref(), now) {
            let pttl = self.peek(writer, now).and_then(|e| e.pttl(now));
            if let (Some(w), Some(me)) = (waiter, &me) {
                self.line_wait(line, me, &w, pttl, now)?;
            }
            return Ok(Reply::Held { pttl_ms: pttl });
        }
        self.prune(readers, now)?;
        let last = match self.zset(readers, now)? {
            Some(members) => members.values().max().copied(),
            None => None,
        };
        if let Some(last) = last {
            let left = u64::try_from(last - score(now)).unwrap_or(0);
            // Never a shorter intent than stands.
            let stands = self.peek(intent, now).and_then(|e| e.pttl(now));
            let keep = stands.map_or(left + ttl_ms, |s| s.max(left + ttl_ms));
            self.set(intent, Entry::text(token, now, keep));
            if let (Some(w), Some(me)) = (waiter, &me) {
                self.line_wait(line, me, &w, Some(left), now)?;
            }
            return Ok(Reply::Held {
                pttl_ms: Some(left),
            });
        }
        self.set(writer, Entry::text(token, now, ttl_ms));
        self.keys.remove(intent);
        if let Some(me) = &me {
            self.line_leave(line, me, now);
        }
        Ok(Reply::Done)
    }

    /// `acquire_permit.lua`.
    fn acquire_permit(
        &mut self,
        keys: &[String],
        token: &str,
        ttl_ms: u64,
        permits: u32,
        waiter: Option<Waiter<'_>>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        let [slot, holders, count, ..] = permit(keys)?;
        let line = &keys[3..];
        let me = waiter.map(|w| w.name(false));
        self.prune(holders, now)?;
        if self.live(holders, now).is_some()
            && let Some(Entry {
                value: Value::Text(stored),
                ..
            }) = self.live(count, now)
            && *stored != permits.to_string()
        {
            let permits = stored.parse().unwrap_or(0);
            return Ok(Reply::PermitsDiffer { permits });
        }
        if !self.free_to(slot, me.as_deref(), now) {
            let pttl = self.peek(slot, now).and_then(|e| e.pttl(now));
            if let (Some(w), Some(me)) = (waiter, &me) {
                self.line_wait(line, me, &w, pttl, now)?;
            }
            return Ok(Reply::Held { pttl_ms: pttl });
        }
        self.set(slot, Entry::text(token, now, ttl_ms));
        self.zadd(holders, token, score(now.saturating_add(ttl_ms)), now)?;
        self.set_text(count, &permits.to_string());
        self.expire_after_last(holders, Some(count), now);
        if let Some(me) = &me {
            self.line_leave(line, me, now);
        }
        Ok(Reply::Done)
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
                            .map(|(m, s)| (m.clone().into_bytes(), u64::try_from(*s).unwrap_or(0)))
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
    /// it (a lock kept for a waiter holds [`KEPT`] and the waiter's name).
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
