//! The link's task: connect, drive the connection, reconnect — see the
//! [module docs](super).
//!
//! ```text
//!            attempt ok                     connection fails
//!  First ───────────────▶ Up ─────────────────────────────▶ Reconnecting
//!    │                    ▲ ◀──────────── attempt ok ──────────┘   │
//!    │ attempt fails      │ attempt ok                             │ attempt fails
//!    └──────────────────▶ Down ◀───────────────────────────────────┘
//!                          (backoff, attempts again; calls refused;
//!                           a kick: Reconnecting, attempts at once)
//! ```
//!
//! Driving a connection is one hand-written poll over four things, each
//! taken as far as it goes before the task sleeps: the queue (taken whole,
//! encoded into one buffer), the write half (the buffer in as few writes as
//! the socket allows), the read half (read in bulk, every whole reply
//! parsed and matched to the oldest call) and one timer (the node timeout
//! of the oldest call not yet late, else the oldest call's grace; on an
//! idle link, the next `PING`).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::RngExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::open::{self, Stream};
use super::{
    BACKOFF_MAX, BACKOFF_MIN, CLOSING_ATTEMPTS, IDLE_PING, Link, Pending, State, Work, redirection,
};
use crate::proto::error::NodeError;
use crate::transport::agreement::{Agreement, RECORD_EVERY};
use crate::transport::resp::{self, Frame};
use crate::transport::scripts::{self, STAMP_EVERY};

mod own;

/// Redirections one call follows at most (a cluster's `MOVED` and `ASK`).
pub(crate) const MAX_REDIRECTS: u8 = 3;

/// A connection that fails sooner than this after it opened counts as a
/// failed attempt for the backoff.
const SHORT_LIVED: Duration = Duration::from_millis(100);

/// The read buffer's first size; it grows only for a reply larger than it.
const READ_BUFFER: usize = 16 * 1024;

/// Marks the link as not running when its task ends or is dropped (its
/// runtime ended): the next call starts it again where it is made.
struct Alive(Arc<Link>);

impl Drop for Alive {
    fn drop(&mut self) {
        let mut shared = self.0.lock();
        shared.running = false;
        if matches!(shared.state, State::Up) {
            shared.state = State::Reconnecting;
        }
    }
}

/// The link's task.
pub(super) async fn run(link: Arc<Link>) {
    let _alive = Alive(Arc::clone(&link));
    let mut backoff = BACKOFF_MIN;
    let mut closing_attempts = 0;
    loop {
        {
            let shared = link.lock();
            let down = matches!(shared.state, State::Down(_));
            if shared.closing {
                // Releases kept for a node down get a few more attempts.
                let releases = !shared.retained.is_empty() && closing_attempts < CLOSING_ATTEMPTS;
                if (down && !releases) || (shared.queue.is_empty() && shared.retained.is_empty()) {
                    return;
                }
                closing_attempts += 1;
            }
        }
        let began = Instant::now();
        let attempt = tokio::time::timeout(link.limits.connect, open::connect(&link))
            .await
            .unwrap_or_else(|_| Err(open::slow(&link)));
        let (stream, hello) = match attempt {
            Ok(connected) => connected,
            Err(error) => {
                tracing::debug!(node = %link.name, %error, "connection attempt failed");
                link.down(error, began);
                back_off(&link, backoff, true).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let quarantine = link.up(&hello);
        let connected = Instant::now();
        let mut io = Io::new(stream, hello.loaded, quarantine, &link);
        io.stamp = hello.stamp;
        if !hello.deployment_asked {
            io.agreement = None;
        }
        let ended = poll_fn(|cx| io.poll(&link, cx)).await;
        match ended {
            Ended::Closing => return,
            Ended::Failed(error) => {
                tracing::debug!(node = %link.name, %error, "connection lost; reconnecting");
                io.abandon(&link, &error);
            }
        }
        if connected.elapsed() < SHORT_LIVED {
            // A node that takes connections and drops them at once: back off
            // as for a failed attempt (calls queue meanwhile, each bounded by
            // its grace).
            back_off(&link, backoff, false).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        } else {
            backoff = BACKOFF_MIN;
        }
    }
}

/// Waits before the next connection attempt: a random part of `backoff`
/// (full jitter spreads the reconnects of many clients), or less if the
/// link was kicked (a probe, or a client shutting down, wants an attempt
/// now: see [`Link::kick`]) or, with `closing_ends`, is closing.
async fn back_off(link: &Link, backoff: Duration, closing_ends: bool) {
    let nanos = rand::rng().random_range(0..=backoff.as_nanos() as u64);
    let retry = tokio::time::sleep(Duration::from_nanos(nanos));
    let now = poll_fn(|cx| {
        link.wake.register(cx.waker());
        link.scheduled
            .store(false, std::sync::atomic::Ordering::Release);
        let mut shared = link.lock();
        if (closing_ends && shared.closing) || std::mem::take(&mut shared.kicked) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::select! {
        biased;
        () = now => {}
        () = retry => {}
    }
}

/// Why a connection's drive ended.
enum Ended {
    /// The client is gone and nothing is left to do.
    Closing,
    /// The connection failed.
    Failed(NodeError),
}

/// One connection, driven.
struct Io {
    stream: Stream,
    /// The function library is loaded on it: scripts go by `FCALL`.
    loaded: bool,
    /// The node is quarantined until then: calls written before count
    /// toward no new grant (`crate::proto::restart`).
    quarantine: Option<Instant>,
    /// The client's agreement with the deployment record and this node's
    /// place: a node not admitted counts as quarantined.
    agreement: Option<(Arc<Agreement>, usize)>,
    /// Calls just taken from the link's queue.
    taken: VecDeque<Pending>,
    /// The task let others run once before taking the queue.
    yielded: bool,
    /// Encoded commands not yet (wholly) written, and how much of them is.
    out: Vec<u8>,
    written: usize,
    /// The calls in `out`, in order, with where their bytes start and end.
    encoded: VecDeque<(Pending, usize, usize)>,
    /// Written, awaiting their replies, oldest first.
    sent: VecDeque<Pending>,
    /// The write half has bytes to flush (TLS).
    flush: bool,
    /// Bytes read: `input[start..end]` is not yet parsed.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The one timer, and when it is set to fire.
    timer: Pin<Box<Sleep>>,
    armed: Instant,
    /// When the link last had nothing to do.
    idle_since: Instant,
    /// The dataset mark's stamp, sent every `scripts::STAMP_EVERY`
    /// (clients that trust durable restarts), and when it is next due.
    stamp: Option<Vec<u8>>,
    stamp_due: Instant,
    /// When the deployment record is next read (clients that keep one).
    record_due: Instant,
    late: Duration,
    grace: Duration,
}

impl Io {
    fn new(stream: Stream, loaded: bool, quarantine: Option<Instant>, link: &Link) -> Self {
        let now = Instant::now();
        let armed = now + IDLE_PING;
        Io {
            stream,
            loaded,
            quarantine,
            agreement: link.checks.as_ref().and_then(|c| c.agreement.clone()),
            taken: VecDeque::new(),
            yielded: false,
            out: Vec::with_capacity(4096),
            written: 0,
            encoded: VecDeque::new(),
            sent: VecDeque::new(),
            flush: false,
            input: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            timer: Box::pin(tokio::time::sleep_until(armed)),
            armed,
            idle_since: now,
            stamp: None,
            stamp_due: now + STAMP_EVERY,
            record_due: now + RECORD_EVERY,
            late: link.limits.late,
            grace: link.limits.grace,
        }
    }

    fn idle(&self) -> bool {
        self.sent.is_empty() && self.encoded.is_empty()
    }

    fn poll(&mut self, link: &Link, cx: &mut Context<'_>) -> Poll<Ended> {
        loop {
            let mut progress = false;
            // The queue, whole: from here on each call is the task's.
            link.wake.register(cx.waker());
            link.scheduled
                .store(false, std::sync::atomic::Ordering::Release);
            if !self.yielded && !self.idle() && !link.lock().queue.is_empty() {
                // Calls are waiting behind others in flight: let the tasks
                // that are ready to run (rounds about to make their calls)
                // run first, so that their calls go out in this write too.
                // A self-wake puts this task at the back of the run queue.
                // An idle link writes at once: a lone caller waits for
                // nobody.
                self.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.yielded = false;
            let closing = {
                let mut shared = link.lock();
                // Moved, not swapped: both queues keep their room, so
                // taking calls allocates nothing.
                self.taken.append(&mut shared.queue);
                shared.closing
            };
            if !self.taken.is_empty() {
                let was_idle = self.idle();
                // The new calls' first node timeout, read as they are
                // encoded (a call redirected here keeps when it was made).
                let mut oldest = self.armed;
                while let Some(call) = self.taken.pop_front() {
                    oldest = oldest.min(call.made);
                    self.encode(call);
                }
                let due = oldest + self.late;
                if was_idle {
                    self.rearm(Instant::now());
                } else if due < self.armed {
                    // Every call before them may be late already, the timer
                    // set for the oldest one's grace: it must fire at their
                    // node timeout instead, to count them late.
                    self.armed = due;
                    self.timer.as_mut().reset(due);
                }
                progress = true;
            }
            // Read first: a connection the node closed while idle is seen
            // closed before anything is written on it, and what was queued
            // goes out on the next one.
            match self.read(cx, link) {
                Ok(read) => progress |= read,
                Err(e) => return Poll::Ready(Ended::Failed(e)),
            }
            match self.write(cx) {
                Ok(moved) => progress |= moved,
                Err(e) => return Poll::Ready(Ended::Failed(e)),
            }
            if self.timer.as_mut().poll(cx).is_ready() {
                if let Err(e) = self.on_timer(link) {
                    return Poll::Ready(Ended::Failed(e));
                }
                progress = true;
            }
            if closing && self.idle() && link.lock().queue.is_empty() {
                return Poll::Ready(Ended::Closing);
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Appends `call`'s command to the output.
    fn encode(&mut self, mut call: Pending) {
        if let Some(until) = self.quarantine {
            // The clock is read only while a quarantine runs.
            if Instant::now() < until {
                call.quarantined = true;
            } else {
                self.quarantine = None;
            }
        }
        if let Some((agreement, place)) = &self.agreement
            && let Work::Errand { errand, .. } = &call.work
        {
            // No member of the agreed deployment (or none agreed yet): its
            // yes must count toward nothing — no grant, and no extension
            // either (a quarantined node's would restore and count) — so
            // the call ends here, unsent. Releases, undos and reads go.
            // A client whose list the deployment moved away from asks for
            // no new grant anywhere; what it holds it may still keep.
            let moved = errand.grants().then(|| agreement.moved()).flatten();
            let why = moved.or_else(|| {
                (errand.holds() && !agreement.admits(*place)).then(|| {
                    Arc::from(
                        "no member of this client's deployment record, or none agreed yet \
                         (docs/agreement.md)",
                    )
                })
            });
            if let Some(why) = why {
                call.finish(Err(NodeError::Server(why)), self.late);
                return;
            }
        }
        let start = self.out.len();
        if call.asking {
            self.out.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
        }
        match &call.work {
            Work::Errand { errand, .. } => {
                call.shape = Some(errand.encode(self.loaded, call.quarantined, &mut self.out));
            }
            Work::Raw(command) => self.out.extend_from_slice(command),
            Work::Ping => self.out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
            Work::Stamp => self
                .out
                .extend_from_slice(self.stamp.as_deref().unwrap_or_default()),
            Work::Record => {
                if let Some((agreement, _)) = &self.agreement {
                    agreement.encode_read(self.loaded, &mut self.out);
                }
            }
        }
        let end = self.out.len();
        self.encoded.push_back((call, start, end));
    }

    /// Writes as much of the output as the socket takes; whether any went.
    fn write(&mut self, cx: &mut Context<'_>) -> Result<bool, NodeError> {
        let broken = |e: std::io::Error| open::io_error(&e);
        let mut moved = false;
        while self.written < self.out.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.out[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Err(NodeError::Connection("the connection wrote nothing".into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    self.flush = true;
                    moved = true;
                }
                Poll::Ready(Err(e)) => return Err(broken(e)),
                Poll::Pending => break,
            }
        }
        // Wholly written calls await their replies.
        while let Some((_, _, end)) = self.encoded.front()
            && *end <= self.written
        {
            let (call, ..) = self.encoded.pop_front().expect("a front");
            self.sent.push_back(call);
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        }
        if self.flush {
            match Pin::new(&mut self.stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flush = false,
                Poll::Ready(Err(e)) => return Err(broken(e)),
                Poll::Pending => {}
            }
        }
        Ok(moved)
    }

    /// Reads what the socket holds and answers the calls it completes;
    /// whether anything came.
    fn read(&mut self, cx: &mut Context<'_>, link: &Link) -> Result<bool, NodeError> {
        let mut read = false;
        loop {
            if self.end == self.input.len() {
                if self.start > 0 {
                    self.input.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                } else {
                    // One reply larger than the buffer (bounded by the
                    // protocol's limits).
                    let len = self.input.len();
                    self.input.resize(len * 2, 0);
                }
            }
            let mut buf = ReadBuf::new(&mut self.input[self.end..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == 0 {
                        return Err(NodeError::Connection(
                            "the node closed the connection".into(),
                        ));
                    }
                    self.end += n;
                    read = true;
                    self.answer(link)?;
                }
                Poll::Ready(Err(e)) => return Err(open::io_error(&e)),
                Poll::Pending => return Ok(read),
            }
        }
    }

    /// Answers the oldest calls with every whole reply read.
    fn answer(&mut self, link: &Link) -> Result<(), NodeError> {
        while let Some((frame, used)) = resp::parse(&self.input[self.start..self.end])
            .map_err(|e| NodeError::Protocol(e.to_string().into()))?
        {
            self.start += used;
            let Some(call) = self.sent.front_mut() else {
                return Err(NodeError::Protocol(
                    format!("a reply no call waits for: {frame:?}").into(),
                ));
            };
            if call.asking {
                // `ASKING`'s own `OK`; the call's reply follows.
                call.asking = false;
                continue;
            }
            let call = self.sent.pop_front().expect("a front");
            self.complete(call, frame, link);
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.idle() {
            self.idle_since = Instant::now();
        }
        Ok(())
    }

    /// Ends `call` with `frame`, or sends it where a cluster redirects it.
    fn complete(&mut self, mut call: Pending, frame: Frame, link: &Link) {
        if matches!(call.work, Work::Stamp) {
            self.stamped(&frame, link);
        }
        if let (Work::Record, Some((agreement, place))) = (&call.work, &self.agreement)
            && let Some(reading) = scripts::read_deployment(&frame)
        {
            agreement.met(*place, self.loaded, Some(reading), call.made);
        }
        let Frame::Error(text) = frame else {
            call.finish(Ok(frame), self.late);
            return;
        };
        let route = match &call.work {
            Work::Errand {
                route: Some(outstanding),
                ..
            } => Some(Arc::clone(&outstanding.route)),
            _ => None,
        };
        if let (Some(route), Some((ask, slot, to))) = (route, redirection(&text)) {
            if call.redirects >= MAX_REDIRECTS {
                let error = format!("redirected more than {MAX_REDIRECTS} times");
                call.finish(Err(NodeError::Server(error.into())), self.late);
                return;
            }
            call.redirects += 1;
            call.asking = ask;
            // The node it goes to next says whether it is quarantined
            // there, when it is written again.
            call.quarantined = false;
            route.redirect(call, ask, slot, to);
            return;
        }
        if text.contains("Function not found") {
            // The library was deleted (`FUNCTION FLUSH`): this connection
            // sends `EVAL` from now on, in order; the next one loads the
            // library again. The call itself is not retried (see
            // `scripts`).
            self.loaded = false;
        }
        let error = match redirection(&text) {
            Some(_) => NodeError::Server(
                format!(
                    "{text} (this node is in cluster mode: name its member \
                     redis+cluster://host:port)"
                )
                .into(),
            ),
            None => NodeError::from_reply(&text),
        };
        let _ = link;
        call.finish(Err(error), self.late);
    }

    /// After the connection failed with `error`: every call that may have
    /// left fails (at most once); every call that provably never left goes
    /// back to the front of the queue, for the next connection.
    fn abandon(self, link: &Link, error: &NodeError) {
        let failed = match error {
            NodeError::TimedOut => NodeError::TimedOut,
            other => NodeError::Connection(other.to_string().into()),
        };
        let now = Instant::now();
        // In the order they were made: a release that may have left goes
        // again (see `MAX_RESENDS`), any other call that may have left
        // fails, one that never left goes again as it is.
        let mut again = Vec::new();
        let mut resent = 0;
        let written = self.written;
        let calls = self.sent.into_iter().map(|call| (call, true)).chain(
            self.encoded
                .into_iter()
                .map(|(call, start, _)| (call, start < written)),
        );
        for (call, left) in calls {
            // The link's own calls are not sent again: a stamp is for the
            // process it was made for.
            if matches!(call.work, Work::Ping | Work::Stamp | Work::Record) {
                continue;
            }
            if !left {
                again.push(call);
            } else if call.resendable(now) {
                resent += 1;
                again.push(call.again(now));
            } else {
                call.finish(Err(failed.clone()), self.late);
            }
        }
        if resent > 0 {
            tracing::debug!(node = %link.name, resent, "releases sent again on the next connection");
            crate::telemetry::resent(&link.name, resent);
        }
        let mut shared = link.lock();
        shared.state = State::Reconnecting;
        for call in again.into_iter().rev() {
            shared.queue.push_front(call);
        }
        drop(shared);
        link.changed.notify_waiters();
    }
}
