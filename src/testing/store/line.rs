//! The line of waiters (`src/transport/scripts/line.lua`), and giving a lock back
//! to it.

use super::{Entry, PRUNE_AT_ONCE, SERVED, Store, after_last, score};

/// `line.lua`'s `LINE_AHEAD`: waiters ahead are counted up to this.
pub(super) const MAX_AHEAD: u32 = 64;
/// `line.lua`'s `NEAR_HEAD` and `FAR_STEP` (ms): how long a waiter far back
/// stays in line (`crate::proto::retry`'s, which it sleeps by).
const NEAR_HEAD: u32 = crate::proto::retry::NEAR_HEAD;
const FAR_STEP_MS: u64 = crate::proto::retry::FAR_STEP.as_millis() as u64;
use crate::proto::error::NodeError;
use crate::proto::op::{KEPT, MAX_LINE, READERS_TURN, Reply, Waiter};

impl Store {
    /// `line.lua`'s `line_join`: in line with `ticket` until `deadline`
    /// (the line full, no one new; a waiter a lock is kept for, left as it
    /// is until that lapses).
    pub(super) fn line_join(
        &mut self,
        line: &[String],
        who: &str,
        ticket: u64,
        deadline: u64,
        now: u64,
    ) -> Result<(), NodeError> {
        let (queue, alive) = (&line[0], &line[1]);
        let (until, count) = match self.zset(alive, now)? {
            Some(members) => (members.get(who).copied(), members.len()),
            None => (None, 0),
        };
        let served = match self.zset(queue, now)? {
            Some(members) => members.get(who).is_some_and(|t| *t >= SERVED),
            None => false,
        };
        match until {
            None if count >= MAX_LINE => return Ok(()),
            // A lock is being kept for it: left as it is until that lapses.
            Some(until) if until >= score(now) && served => return Ok(()),
            _ => {}
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
    /// left (`pttl`, `None` for no expiry), an eighth more and its patience;
    /// the waiters ahead of it (`line_ahead`).
    pub(super) fn line_wait(
        &mut self,
        line: &[String],
        who: &str,
        waiter: &Waiter<'_>,
        pttl: Option<u64>,
        now: u64,
    ) -> Result<u32, NodeError> {
        let left = pttl.unwrap_or(0);
        let away = left + left / 8;
        self.line_join(
            line,
            who,
            waiter.ticket,
            now + away + waiter.patience_ms,
            now,
        )?;
        let ahead = self.line_ahead(line, who, now)?;
        if ahead >= NEAR_HEAD {
            let far = FAR_STEP_MS * u64::from(ahead + 1);
            if far > away {
                let deadline = now + far + waiter.patience_ms;
                self.line_join(line, who, waiter.ticket, deadline, now)?;
            }
        }
        Ok(ahead)
    }

    /// A refusal of a key whose holder has `pttl` left: a waiter (`me`,
    /// `waiter`) stays in line and is told how many are ahead of it
    /// (`line_wait`); anyone else is only refused.
    pub(super) fn refused(
        &mut self,
        line: &[String],
        me: Option<&str>,
        waiter: Option<Waiter<'_>>,
        pttl: Option<u64>,
        now: u64,
    ) -> Result<Reply, NodeError> {
        let ahead = match (waiter, me) {
            (Some(w), Some(me)) => Some(self.line_wait(line, me, &w, pttl, now)?),
            _ => None,
        };
        Ok(Reply::Held {
            pttl_ms: pttl,
            ahead,
        })
    }

    /// `line_ahead`: the waiters not yet served ahead of `who` (a lower
    /// ticket), up to [`MAX_AHEAD`]; 0 for one served, [`MAX_AHEAD`] for
    /// one not in line.
    fn line_ahead(&mut self, line: &[String], who: &str, now: u64) -> Result<u32, NodeError> {
        let Some(members) = self.zset(&line[0], now)? else {
            return Ok(MAX_AHEAD);
        };
        Ok(match members.get(who) {
            None => MAX_AHEAD,
            Some(ticket) if *ticket >= SERVED => 0,
            Some(ticket) => {
                let ahead = members
                    .values()
                    .filter(|t| (0..*ticket).contains(*t))
                    .count();
                u32::try_from(ahead).unwrap_or(MAX_AHEAD).min(MAX_AHEAD)
            }
        })
    }

    /// Whether a reader whose deadline has not passed stands in `line`
    /// (`release_read.lua`).
    pub(super) fn reader_in_line(&mut self, line: &[String], now: u64) -> Result<bool, NodeError> {
        let readers: Vec<String> = match self.zset(&line[0], now)? {
            Some(members) => members
                .keys()
                .filter(|w| w.starts_with('r'))
                .cloned()
                .collect(),
            None => return Ok(false),
        };
        let alive = match self.zset(&line[1], now)? {
            Some(members) => members,
            None => return Ok(false),
        };
        Ok(readers
            .iter()
            .any(|w| alive.get(w).is_some_and(|until| *until >= score(now))))
    }

    pub(super) fn line_leave(&mut self, line: &[String], who: &str, now: u64) {
        self.zrem(&line[0], who, now);
        self.zrem(&line[1], who, now);
    }

    /// `line_hand_over`: keeps `key` for the first waiter in `line` not yet
    /// served; whom it is kept for (the waiter's name, `r` for the
    /// readers), `None` when no one waits.
    pub(super) fn hand_over(
        &mut self,
        key: &str,
        line: &[String],
        now: u64,
    ) -> Result<Option<String>, NodeError> {
        let (queue, alive) = (&line[0], &line[1]);
        if self.live(queue, now).is_none() {
            return Ok(None);
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
            return Ok(None);
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
            return Ok(Some("r".to_owned()));
        }
        self.set(key, Entry::text(&format!("{KEPT}{head}"), now, keep));
        self.zadd(queue, &head, ticket + SERVED, now)?;
        // `ZADD XX`: the served waiter's deadline is the kept lock's end.
        self.zadd(alive, &head, score(now + keep), now)?;
        Ok(Some(head))
    }

    /// Gives `key` to `line`'s first waiter, or deletes it; publishes the
    /// release of `token`, naming whom it is kept for.
    fn hand_over_or_delete(
        &mut self,
        key: &str,
        token: &str,
        line: &[String],
        now: u64,
    ) -> Result<(), NodeError> {
        let kept = match line.len() {
            2 => self.hand_over(key, line, now)?,
            _ => None,
        };
        if kept.is_none() {
            self.keys.remove(key);
        }
        self.publish_to(key, token, kept.as_deref());
        Ok(())
    }

    /// `release.lua` on `key` with `line`: if `key` holds `token` (or, for
    /// `me` leaving its line, is kept for `me`), kept for the first waiter
    /// or deleted, and published. [`Reply::Done`] only when it held
    /// `token`.
    pub(super) fn give_back(
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
            self.hand_over_or_delete(key, token, line, now)?;
            return Ok(Reply::Done);
        }
        match me {
            Some(me) => self.give_back_kept(key, token, line, me, now),
            None => Ok(Reply::NotHeld),
        }
    }

    /// A key kept for `me`, which no longer waits: given on (or deleted)
    /// and published; [`Reply::NotHeld`] either way.
    pub(super) fn give_back_kept(
        &mut self,
        key: &str,
        token: &str,
        line: &[String],
        me: &str,
        now: u64,
    ) -> Result<Reply, NodeError> {
        if self.free_to_kept(key, Some(me), now) {
            self.hand_over_or_delete(key, token, line, now)?;
        }
        Ok(Reply::NotHeld)
    }
}
