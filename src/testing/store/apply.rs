//! What each operation does (the scripts, one by one).

use super::{Entry, INSPECT_MEMBERS, SERVED, Store, Value, held, labeled, permit, rw, score};
use crate::proto::error::NodeError;
use crate::proto::op::{Op, READERS_TURN, Reply, Snapshot, Stored, Waiter};

impl Store {
    /// Applies `op` at `now` on the node's clock, as its script would.
    /// `Err` where the script would fail (a key of the wrong type under a
    /// sorted-set key; a fencing counter that is not a number).
    pub fn apply(&mut self, op: Op<'_>, now: u64) -> Result<Reply, NodeError> {
        Ok(match op {
            Op::Acquire {
                key,
                token,
                label,
                ttl_ms,
                holder_ttl,
                line,
                waiter,
                period,
            } => {
                let mark = self.period_left(period.map(|p| p.key), now);
                match waiter.filter(|_| line.len() == 2) {
                    Some(waiter) => {
                        let me = waiter.name(false);
                        if mark.is_none() && self.free_to(key, Some(&me), now) {
                            self.set(key, Entry::text(&labeled(token, label), now, ttl_ms));
                            self.period_begin(period, token, now);
                            self.line_leave(line, &me, now);
                            Reply::Done
                        } else {
                            let pttl = self.period_pttl(key, mark, now);
                            self.refused(line, Some(&me), Some(waiter), pttl, now)?
                        }
                    }
                    None => match self.live(key, now) {
                        None if mark.is_none() => {
                            self.set(key, Entry::text(&labeled(token, label), now, ttl_ms));
                            self.period_begin(period, token, now);
                            Reply::Done
                        }
                        // `SET NX` answers nil; acquire.lua (a period's
                        // too) the PTTL.
                        _ if holder_ttl || period.is_some() => Reply::Held {
                            pttl_ms: self.period_pttl(key, mark, now),
                            ahead: None,
                        },
                        _ => Reply::Held {
                            pttl_ms: None,
                            ahead: None,
                        },
                    },
                }
            }
            Op::Extend {
                key,
                token,
                label,
                ttl_ms,
                restore,
            } => match self.live(key, now) {
                Some(e) if e.is_text(token) => {
                    e.extend(now, ttl_ms);
                    Reply::Done
                }
                None if restore => {
                    self.set(key, Entry::text(&labeled(token, label), now, ttl_ms));
                    Reply::Restored
                }
                _ => Reply::NotHeld,
            },
            Op::ReleaseAfter {
                key,
                token,
                after_ms,
            } => match self.live(key, now) {
                Some(e) if e.is_text(token) => {
                    e.expires = Some(now.saturating_add(after_ms));
                    Reply::Done
                }
                _ => Reply::NotHeld,
            },
            Op::Release {
                key,
                token,
                line,
                waiter,
                period,
            } => {
                self.period_undo(period, token, now);
                let me = waiter.filter(|_| line.len() == 2).map(|w| w.name(false));
                self.give_back(key, token, line, me.as_deref(), now)?
            }
            Op::AcquireFenced {
                key,
                fence_key,
                token,
                label,
                ttl_ms,
                line,
                waiter,
                period,
            } => {
                let waiter = waiter.filter(|_| line.len() == 2);
                let me = waiter.map(|w| w.name(false));
                let mark = self.period_left(period.map(|p| p.key), now);
                if mark.is_some() || !self.free_to(key, me.as_deref(), now) {
                    let pttl = self.period_pttl(key, mark, now);
                    return self.refused(line, me.as_deref(), waiter, pttl, now);
                }
                // `INCR` keeps the counter's expiry (it has none); the
                // counter is floored at the clock in microseconds, as the
                // script's `TIME` (docs/fencing.md, "Restarts").
                let counter = (self.counter(fence_key, now)? + 1).max(now.saturating_mul(1000));
                let expires = self.live(fence_key, now).and_then(|e| e.expires);
                let value = Value::Text(counter.to_string());
                self.set(fence_key, Entry { value, expires });
                self.set(key, Entry::text(&labeled(token, label), now, ttl_ms));
                self.period_begin(period, token, now);
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
                // The fence stored with the token and label (`KEEPTTL`).
                if let Some(entry) = self.live(key, now) {
                    entry.store_fence(fence);
                }
                Reply::Done
            }
            Op::AcquireReentrant {
                key,
                owner,
                label,
                hold,
                ttl_ms,
            } => match self.live(key, now) {
                None => {
                    let value = Value::Holds {
                        owner: owner.to_owned(),
                        holds: vec![hold.to_owned()],
                        label: label.to_owned(),
                    };
                    let expires = Some(now.saturating_add(ttl_ms));
                    self.set(key, Entry { value, expires });
                    Reply::Done
                }
                Some(e) => match &mut e.value {
                    Value::Holds {
                        owner: o, holds, ..
                    } if o == owner => {
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
                    value:
                        Value::Holds {
                            owner: o, holds, ..
                        },
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
                label,
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
                    return Ok(Reply::Held {
                        pttl_ms: least,
                        ahead: None,
                    });
                }
                for key in keys {
                    self.set(key, Entry::text(&labeled(token, label), now, ttl_ms));
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
                    // The readers' turn ends with the last live reader in
                    // line to leave.
                    if self.holds_text(writer, READERS_TURN, now)
                        && !self.reader_in_line(&keys[3..], now)?
                    {
                        self.keys.remove(writer);
                        self.publish(writer, token);
                    }
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
                label,
                intent,
                ttl_ms,
                waiter,
            } => self.acquire_write(keys, (token, intent), label, ttl_ms, waiter, now)?,
            Op::ReleaseWrite {
                keys,
                token,
                intent: mark,
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
                let kept = match changed {
                    true => self.hand_over(writer, line, now)?,
                    false => None,
                };
                if changed && kept.is_none() {
                    self.keys.remove(writer);
                }
                let intent_gone = self.delete_if(intent, mark, now);
                if changed || intent_gone {
                    self.publish_to(writer, token, kept.as_deref());
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
                label,
                ttl_ms,
                permits,
                waiter,
            } => self.acquire_permit(keys, token, label, ttl_ms, permits, waiter, now)?,
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
            return self.refused(line, me.as_deref(), waiter, pttl, now);
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

    /// `acquire_write.lua`: `marks` are the writer's token and its
    /// intent mark.
    fn acquire_write(
        &mut self,
        keys: &[String],
        (token, mark): (&str, &str),
        label: &str,
        ttl_ms: u64,
        waiter: Option<Waiter<'_>>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        let [writer, readers, intent, ..] = rw(keys)?;
        let line = &keys[3..];
        let me = waiter.map(|w| w.name(false));
        if !self.free_to(writer, me.as_deref(), now) {
            let pttl = self.peek(writer, now).and_then(|e| e.pttl(now));
            return self.refused(line, me.as_deref(), waiter, pttl, now);
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
            self.set(intent, Entry::text(mark, now, keep));
            return self.refused(line, me.as_deref(), waiter, Some(left), now);
        }
        self.set(writer, Entry::text(&labeled(token, label), now, ttl_ms));
        self.keys.remove(intent);
        if let Some(me) = &me {
            self.line_leave(line, me, now);
        }
        Ok(Reply::Done)
    }

    /// `acquire_permit.lua`.
    #[allow(clippy::too_many_arguments)]
    fn acquire_permit(
        &mut self,
        keys: &[String],
        token: &str,
        label: &str,
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
        // A waiter another slot is kept for takes that one, no other.
        if let Some(me) = &me
            && self.live(slot, now).is_none()
        {
            let line = &keys[3..];
            let served = match self.zset(&line[0], now)? {
                Some(members) => members.get(me.as_str()).is_some_and(|t| *t >= SERVED),
                None => false,
            };
            let until = match self.zset(&line[1], now)? {
                Some(members) => members.get(me.as_str()).copied(),
                None => None,
            };
            if let (true, Some(until)) = (served, until)
                && until >= score(now)
            {
                let left = u64::try_from(until - score(now)).unwrap_or(0);
                return Ok(Reply::Held {
                    pttl_ms: Some(left),
                    ahead: None,
                });
            }
        }
        if !self.free_to(slot, me.as_deref(), now) {
            let pttl = self.peek(slot, now).and_then(|e| e.pttl(now));
            return self.refused(line, me.as_deref(), waiter, pttl, now);
        }
        self.set(slot, Entry::text(&labeled(token, label), now, ttl_ms));
        self.zadd(holders, token, score(now.saturating_add(ttl_ms)), now)?;
        self.set_text(count, &permits.to_string());
        self.expire_after_last(holders, Some(count), now);
        if let Some(me) = &me {
            self.line_leave(line, me, now);
        }
        Ok(Reply::Done)
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
                    Value::Holds {
                        owner,
                        holds,
                        label,
                    } => {
                        let mut fields = vec![(
                            owner.clone().into_bytes(),
                            holds.len().to_string().into_bytes(),
                        )];
                        fields.extend(holds.iter().map(|hold| {
                            let mut name = vec![0xff];
                            name.extend_from_slice(hold.as_bytes());
                            (name, b"1".to_vec())
                        }));
                        if !label.is_empty() {
                            fields.push((vec![0xfe], label.clone().into_bytes()));
                        }
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
}
