//! The link's own calls on a connection — the idle `PING`, the dataset
//! mark's stamp, the deployment record's read — and the one timer that
//! paces them with the calls' node timeouts and graces.

use tokio::time::Instant;

use super::{IDLE_PING, Io, Link, Pending, Work};
use crate::proto::error::NodeError;
use crate::proto::restart::{self, SECOND_CUT};
use crate::transport::agreement::RECORD_EVERY;
use crate::transport::link::Sink;
use crate::transport::resp::Frame;
use crate::transport::scripts::{self, STAMP_EVERY};

impl Io {
    /// The dataset mark's stamp answered `frame`: the node acknowledged
    /// it (its `at` is what a restart must keep to count at once), and the
    /// quarantine follows what the mark says of the dataset's age: begun
    /// when the mark was found gone while the process ran (`FLUSHALL`),
    /// ended early when a client that stamped the previous process vouched
    /// for the dataset this one took over (`stamp.lua`).
    pub(super) fn stamped(&mut self, frame: &Frame, link: &Link) {
        let Some((continuous, at)) = scripts::read_stamp(frame) else {
            return;
        };
        let mut shared = link.lock();
        shared.standing.stamped_at = Some(at);
        let Some(longest) = link.checks.as_ref().and_then(|c| c.quarantine) else {
            return;
        };
        let now = Instant::now();
        let begun = restart::dataset_quarantine(continuous, longest);
        let until = begun.map(|q| now + q.left);
        let running = shared.standing.quarantine.filter(|r| *r > now);
        let begins = match (running, until) {
            (None, Some(_)) => true,
            (Some(running), Some(until)) => until > running + SECOND_CUT,
            _ => false,
        };
        shared.standing.quarantine = until;
        self.quarantine = until;
        drop(shared);
        if begins {
            tracing::warn!(
                node = %link.name,
                quarantine_left_ms = begun.map_or(0, |q| q.left.as_millis() as u64),
                "node quarantined (its dataset mark is gone: wiped or reloaded while it ran): it \
                 may have forgotten keys, so its yes counts toward no new lock until its dataset \
                 is as old as the longest TTL (docs/operations.md, restarts)"
            );
        }
    }

    /// The timer fired: count late calls, drop an unresponsive connection,
    /// `PING` an idle one, and set the timer again.
    pub(super) fn on_timer(&mut self, link: &Link) -> Result<(), NodeError> {
        let now = Instant::now();
        let waiting = self
            .sent
            .iter_mut()
            .chain(self.encoded.iter_mut().map(|(call, ..)| call));
        for call in waiting {
            if call.made + self.late > now {
                break;
            }
            if !std::mem::replace(&mut call.late, true)
                && let Some(counted) = &call.counted
            {
                counted.telemetry.late();
            }
        }
        let oldest = self
            .sent
            .front()
            .or_else(|| self.encoded.front().map(|(call, ..)| call));
        if let Some(oldest) = oldest
            && oldest.made + self.grace <= now
        {
            tracing::debug!(node = %link.name, grace = ?self.grace, "no answer within the grace: dropping the connection");
            return Err(NodeError::TimedOut);
        }
        if self.idle() && self.idle_since + IDLE_PING <= now {
            self.encode(Pending::new(Work::Ping, Sink::Nobody, None));
        }
        if self.stamp.is_some() && self.stamp_due <= now {
            self.encode(Pending::new(Work::Stamp, Sink::Nobody, None));
            self.stamp_due = now + STAMP_EVERY;
        }
        if self.agreement.is_some() && self.record_due <= now {
            self.encode(Pending::new(Work::Record, Sink::Nobody, None));
            self.record_due = now + RECORD_EVERY;
        }
        self.rearm(now);
        Ok(())
    }

    /// Sets the timer for what is due next: the first call not yet late
    /// (its node timeout), the oldest call's grace, an idle link's `PING`,
    /// the dataset mark's stamp, or the deployment record's read.
    pub(super) fn rearm(&mut self, now: Instant) {
        let mut calls = self
            .sent
            .iter()
            .chain(self.encoded.iter().map(|(call, ..)| call));
        let next = match calls.clone().next() {
            Some(oldest) => {
                let grace = oldest.made + self.grace;
                match calls.find(|call| !call.late) {
                    Some(call) => (call.made + self.late).min(grace),
                    None => grace,
                }
            }
            None => self.idle_since + IDLE_PING,
        };
        let next = match self.stamp {
            Some(_) => next.min(self.stamp_due),
            None => next,
        };
        let next = match self.agreement {
            Some(_) => next.min(self.record_due),
            None => next,
        };
        let next = next.max(now);
        if next != self.armed {
            self.armed = next;
            self.timer.as_mut().reset(next);
        }
    }
}
