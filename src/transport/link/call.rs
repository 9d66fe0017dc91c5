//! One call to a node: what it asks ([`Work`]), where its answer goes
//! ([`Sink`]), the bookkeeping it carries until it ends ([`Counted`]), and
//! whether it may be sent again after its connection failed under it
//! ([`MAX_RESENDS`]).
//!
//! The transport knows nothing of what a round's call carries: an
//! [`Errand`] brings its own encoding, its own reading of the reply and its
//! own way to hand the answer on; the link brings delivery, order, the
//! connection it is written on and what that connection knows of the node.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::proto::op::Reply;
use crate::telemetry::NodeTelemetry;
use crate::transport::resp::Frame;
use crate::transport::scripts::{Shape, parse_reply};

/// What a round asks of every node, bringing its own command and taking
/// its own answers: one operation on a claim's keys (made by
/// `crate::engine::dispatch`), shared by the round's calls.
pub(crate) trait Errand: Send + Sync {
    /// Appends its command for the connection it is written on: `loaded`
    /// where the library's functions are (`FCALL`, else `EVAL`),
    /// `quarantined` while the node's yes counts toward no new grant there
    /// (`crate::proto::restart`; an extension then restores its key).
    /// Returns how the node's reply to it reads.
    fn encode(&self, loaded: bool, quarantined: bool, out: &mut Vec<u8>) -> Shape;

    /// The key a cluster routes it by.
    fn key(&self) -> &str;

    /// How long after it was first made it may be sent again on the next
    /// connection, its own having failed before its answer (releases and
    /// undos, which are idempotent: their key's TTL); `None`: never.
    fn resend_within(&self) -> Option<Duration>;

    /// Whether a yes to it holds a lock: an acquire, an extension, a
    /// fenced write-back — what a node that is no member of the client's
    /// deployment must not be asked (releases, undos and reads may).
    fn holds(&self) -> bool;

    /// Whether a yes to it makes a new grant: an acquire or a fenced
    /// write-back — what a client whose list the deployment moved away
    /// from must not ask (its extensions and releases go on).
    fn grants(&self) -> bool;

    /// Hands node `node`'s outcome on (once per call, at its end), its
    /// call written `quarantined` or not.
    fn answer(&self, node: usize, quarantined: bool, outcome: Result<Reply, NodeError>);
}

/// What a call asks of the node.
pub(crate) enum Work {
    /// Node `node`'s part of a round's errand, encoded for the connection
    /// it goes on.
    Errand {
        errand: Arc<dyn Errand>,
        node: usize,
        /// For a cluster member's call: where a `MOVED` or `ASK` sends it.
        route: Option<Outstanding>,
    },
    /// A command already encoded (a query outside any round).
    Raw(Vec<u8>),
    /// The link's own `PING` on an idle connection.
    Ping,
    /// The link's own stamp of its node's dataset mark (clients that trust
    /// durable restarts), every `scripts::STAMP_EVERY`.
    Stamp,
    /// The link's own read of the deployment record, every
    /// `agreement::RECORD_EVERY` (clients that keep one).
    Record,
}

/// Where a call's outcome goes.
pub(crate) enum Sink {
    /// The errand's own way ([`Errand::answer`]).
    Errand,
    /// A query's reply, as the node gave it.
    Reply(oneshot::Sender<Result<Frame, NodeError>>),
    /// Nobody: the link's own `PING`.
    Nobody,
}

/// Follows a cluster's redirections; see `crate::transport::cluster`.
pub(crate) trait Route: Send + Sync {
    /// The call was answered `MOVED` (or `ASK`, when `ask`) to `to` for
    /// `slot`: hand it there, in order (or end it with why it cannot go).
    fn redirect(&self, call: Pending, ask: bool, slot: u16, to: &str);

    /// A call of `slot` ended (however).
    fn ended(&self, slot: u16);
}

/// A cluster call's route, and its place among its slot's calls
/// outstanding (given back when the call ends: dropped).
pub(crate) struct Outstanding {
    pub(crate) route: Arc<dyn Route>,
    slot: u16,
}

impl Outstanding {
    pub(crate) fn new(route: Arc<dyn Route>, slot: u16) -> Self {
        Outstanding { route, slot }
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.route.ended(self.slot);
    }
}

/// The bookkeeping a counted call carries until it ends: its place in flight
/// (given back when it is dropped) and its node's instruments.
pub(crate) struct Counted {
    pub(crate) telemetry: Arc<NodeTelemetry>,
    pub(crate) _place: crate::transport::in_flight::Place,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.telemetry.done();
    }
}

/// One call: what to ask, where the answer goes, and its bookkeeping.
pub(crate) struct Pending {
    pub(crate) work: Work,
    pub(crate) sink: Sink,
    pub(crate) counted: Option<Counted>,
    /// When it was made.
    pub(crate) made: Instant,
    /// Redirections followed so far.
    pub(crate) redirects: u8,
    /// Preceded by `ASKING` (a cluster slot being migrated).
    pub(crate) asking: bool,
    /// Already counted as late.
    pub(crate) late: bool,
    /// Last written where the node was quarantined (its connection's
    /// handshake said so, `crate::proto::restart`): a yes counts toward no
    /// new grant.
    pub(crate) quarantined: bool,
    /// How the reply to an errand's call reads, once it is written.
    pub(crate) shape: Option<Shape>,
    /// When it was first made (`made` is reset when it is sent again).
    pub(crate) born: Instant,
    /// Times it was sent again after its connection failed under it.
    pub(crate) resends: u8,
}

/// A release (or a refused round's undo) whose connection failed before
/// its answer is sent again on the node's next connection, at most this
/// many times, and only while the key it removes may still live (its TTL
/// from when the call was first made): releases are idempotent
/// (compare-and-delete; a reentrant release names its hold), so sending one
/// twice changes nothing, and not sending it leaves the key for its TTL.
pub(crate) const MAX_RESENDS: u8 = 3;

/// Connection attempts a closing link (its client gone) still makes for
/// the releases it keeps, one right after another.
pub(crate) const CLOSING_ATTEMPTS: u32 = 3;

impl Pending {
    /// A call of `work` answered into `sink`, made now.
    pub(crate) fn new(work: Work, sink: Sink, counted: Option<Counted>) -> Self {
        Pending {
            work,
            sink,
            counted,
            made: Instant::now(),
            redirects: 0,
            asking: false,
            late: false,
            quarantined: false,
            shape: None,
            born: Instant::now(),
            resends: 0,
        }
    }

    /// Whether the call may be sent again, at `now`, after its connection
    /// failed under it: a release or undo, sent again fewer than
    /// [`MAX_RESENDS`] times, whose key may still live.
    pub(crate) fn resendable(&self, now: Instant) -> bool {
        match &self.work {
            Work::Errand { errand, .. } => errand
                .resend_within()
                .is_some_and(|within| self.resends < MAX_RESENDS && now < self.born + within),
            Work::Raw(_) | Work::Ping | Work::Stamp | Work::Record => false,
        }
    }

    /// The call, to be sent again on the next connection: its clocks start
    /// again.
    pub(crate) fn again(mut self, now: Instant) -> Self {
        self.resends += 1;
        self.made = now;
        self.late = false;
        self.asking = false;
        self.quarantined = false;
        self
    }

    /// Ends the call with the node's reply (or why there is none): parsed
    /// for its operation, counted (an answer later than `late` is no sign
    /// of health), and handed to its sink.
    pub(crate) fn finish(mut self, reply: Result<Frame, NodeError>, late: Duration) {
        match std::mem::replace(&mut self.sink, Sink::Nobody) {
            Sink::Reply(tx) => {
                self.account(reply.as_ref().map(|_| &Reply::Done), late);
                let _ = tx.send(reply);
            }
            Sink::Errand => {
                let outcome = match (self.shape, reply) {
                    (Some(shape), Ok(frame)) => parse_reply(shape, frame),
                    (None, Ok(frame)) => Err(NodeError::Protocol(format!("{frame:?}").into())),
                    (_, Err(e)) => Err(e),
                };
                self.finish_reply(outcome, late);
            }
            Sink::Nobody => {}
        }
    }

    /// Ends an errand's call with its outcome (a node of your own's, or
    /// one read from the reply): counted, and handed on.
    pub(crate) fn finish_reply(self, outcome: Result<Reply, NodeError>, late: Duration) {
        self.account(outcome.as_ref(), late);
        if let Work::Errand { errand, node, .. } = &self.work {
            errand.answer(*node, self.quarantined, outcome);
        }
    }

    /// Counts the outcome in the node's instruments and health.
    fn account(&self, outcome: Result<&Reply, &NodeError>, late: Duration) {
        if let Some(counted) = &self.counted {
            counted.telemetry.ended(outcome, self.made, late, self.late);
        }
    }
}
