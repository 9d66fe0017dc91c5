//! One connection to one Redis node, driven by an I/O loop the library
//! owns.
//!
//! A call is a [`Pending`]: made by pushing it on the link's queue, under a
//! lock, in the order calls are made — from then on it is delivered
//! whatever becomes of its caller. The link's task takes whatever is queued
//! when it runs, encodes it into one buffer and writes it in one go
//! (auto-pipelining: no window, no option; an idle node's call is written at
//! once), reads replies in bulk and completes the calls in order. Calls to a
//! node are answered in order, so the link needs one timer, for its oldest
//! call: unanswered after the node timeout it counts against the node's
//! health; after its grace the node is unresponsive and the connection is
//! dropped.
//!
//! The task also keeps the connection alive: it sees a peer's close at once
//! (its read half is always polled), sends a `PING` on a link idle for
//! [`IDLE_PING`] (and the kernel probes an idle socket: TCP keepalive), and
//! reconnects in the background at once. A call that provably never left
//! (still queued, or not yet written) goes out on the new connection; one
//! that may have left fails (at most once). While it reconnects after a
//! working connection, and while it connects for the first time, calls
//! queue; once an attempt has failed the node is down and calls are refused
//! at once, costing a round nothing, until an attempt succeeds — or until a
//! probe or a shutdown kicks the link ([`Link::kick`]): it then attempts at
//! once, and calls queue for that attempt.
//!
//! Bounds: the queue and the calls in flight are bounded by the
//! dispatcher's `max_in_flight` (a call holds its slot until it ends); a call
//! waits at most its grace; one connection attempt at most the connect
//! timeout, with jittered exponential backoff between failed ones.
//!
//! # The link, state by state
//!
//! ```text
//!            attempt ok                     connection fails
//!  First ───────────────▶ Up ─────────────────────────────▶ Reconnecting
//!    │                    ▲ ◀──────────── attempt ok ──────────┘   │
//!    │ attempt fails      │ attempt ok                             │ attempt fails
//!    └──────────────────▶ Down ◀───────────────────────────────────┘
//!                          (backoff, attempts again; calls refused)
//! ```
//!
//! - **First**: no attempt has ended yet; calls queue (and a round waits for first
//!   connections before its clock starts, docs/design.md §2). **Up**: calls queue and are written.
//!   **Reconnecting**: the connection closed or failed after working; a new attempt
//!   starts at once, and calls queue for it. **Down**: the last attempt failed; calls are
//!   refused at once with `NotConnected` and the reason, costing a round nothing, and
//!   every call still queued is refused the same way — but releases and undos, which
//!   are kept for the next connection while their key may live (the acquire they pair
//!   with may have landed on the connection that died; "Resends" below). Attempts go on with full-jitter
//!   backoff from 10 ms, doubling to 1 s; a connection that dies within 100 ms of opening
//!   counts as a failed attempt. `Nodes::probe` asks a down link for an attempt at
//!   once.
//! - **One attempt** (`open.rs`), bounded as a whole by the connect timeout
//!   (`Builder::connect_timeout`, default 1 s, at most 1 h): TCP (`TCP_NODELAY`, kernel
//!   keepalive after 10 s idle, then every 5 s) or a Unix socket; TLS over TCP for
//!   `rediss://`; then the handshake, in one pipelined write: `AUTH` and `SELECT` where
//!   the URL asks, `PING`, `INFO server` (the server's version and `run_id`); on lock
//!   connections `INFO` whole instead (also the uptime, persistence, memory policy and
//!   role), `CONFIG GET appendfsync`, `FUNCTION LOAD` of the script library and the
//!   permission probe; then, in a second write, the probe by `EVAL` where the library
//!   could not be loaded, and the dataset mark (docs/design.md docs/design.md §4b). Two round trips however far the
//!   node is. A refusal is the error it means (`NodeError::from_reply`): a wrong password
//!   or user `Auth`, `NOPERM` `NoPermission`, `LOADING` `Loading`, and so on (*Checks at
//!   connect*, below). A node at its `maxclients` answers `max number of clients
//!   reached` and closes: that is `MaxClients`, not a closed connection.
//! - **The I/O loop** (`io.rs`) is one task per link and one hand-written poll over four
//!   things, each taken as far as it goes before the task sleeps:
//!   - *the queue*, taken whole: every call made since the last turn, encoded into one
//!     output buffer (`FCALL` where this connection loaded the library, else `EVAL`;
//!     docs/design.md §14). This is auto-pipelining, with no window and no option: calls made while a
//!     write or replies are outstanding go in the next write, and an idle link writes a
//!     call at once. When calls wait behind others in flight, the task yields once
//!     before taking the queue, so that rounds ready to run make their calls and they go
//!     in the same write;
//!   - *the write half*: the buffer in as few writes as the socket takes;
//!   - *the read half*, always polled, so a peer's close is seen at once: read in bulk
//!     into a 16 KiB buffer (grown only for a larger reply), every whole reply parsed and
//!     matched to the oldest call written, whose answer is cast into its round's ballot;
//!   - *one timer*. Calls to a node are answered in order, so one timer serves them all.
//!     It fires at the node timeout of the oldest call not yet counted late (that call
//!     then counts against the node's health, and goes on), at the oldest call's grace
//!     (the node is unresponsive: the connection is dropped), and on a link idle for 1 s,
//!     when it sends a `PING`.
//! - **Abandon.** When a connection fails (an I/O error, the peer's close, a malformed
//!   reply, the grace), its calls are settled in the order they were made: a call of
//!   which no byte was written goes back to the front of the queue, for the next
//!   connection; a release or a refused round's undo that may have left goes back too,
//!   to be sent again (*Resends*); any other call that may have left fails once —
//!   `TimedOut` after the grace, `Connection` otherwise. No other call is sent twice.
//! - **Resends** (`MAX_RESENDS`, `Pending::resendable` in `link.rs`; `abandon` in `io.rs`,
//!   `down`, `up` in `link.rs`). A release or undo is idempotent — a compare-and-delete; a
//!   reentrant release names its hold — so sending it twice changes nothing, while not
//!   sending it leaves its key for the TTL. One whose connection failed before its answer
//!   (it may or may not have reached the node) is sent again on the node's next
//!   connection, in the order calls were made, at most 3 times, and only while its key
//!   may still live (its TTL counted from when the call was first made); its clocks start
//!   again. If the next connection attempt fails too, such releases are kept while every
//!   other queued call is refused; each keeps its place among the node's calls in
//!   flight, so they are bounded by the in-flight bound, and they go first when a
//!   connection is up again. A resend that arrives after the key expired and another
//!   holder set it leaves that key alone (it compares the token). Counted in
//!   `redquorum_node_resends_total` (`tests/redis_resends.rs`).
//! - A link whose tokio runtime has ended (a client kept in a `static` across test
//!   runtimes) is started again on the runtime of the next call made.

mod call;
mod checks;
mod io;
pub(crate) mod open;
mod state;
#[cfg(feature = "tls")]
pub(crate) mod tls;
#[cfg(not(feature = "tls"))]
pub(crate) mod tls {
    //! No TLS without the feature: every endpoint is plain.
    use crate::settings::config_error::ConfigError;
    use crate::transport::address::{Tls, TlsMaterial};

    #[derive(Debug, Clone, Default)]
    pub(crate) struct Configs;

    impl Configs {
        pub(crate) fn new(
            _: &TlsMaterial,
            _: impl IntoIterator<Item = Tls>,
        ) -> Result<Self, ConfigError> {
            Ok(Configs)
        }

        pub(crate) fn get(&self, _: Tls) -> Option<&std::convert::Infallible> {
            None
        }
    }
}

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::settings::config_error::ConfigError;
use crate::transport::address::Address;
use crate::transport::resp::Frame;

pub(crate) use call::{CLOSING_ATTEMPTS, Counted, Errand, Outstanding, Pending, Route, Sink, Work};
pub(crate) use checks::{Checks, Standing};
pub(crate) use open::Hello;

/// A link idle this long sends a `PING`: a connection a NAT, a load
/// balancer or the server's `timeout` would close for idleness never is, and
/// one that died silently is found (its `PING` goes unanswered past the
/// grace) before a round needs it.
pub(crate) const IDLE_PING: Duration = Duration::from_secs(1);

/// Backoff between failed connection attempts: from 10 ms, doubling to 1 s.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A `MOVED` or `ASK` reply: whether `ASK`, the slot and where to.
pub(crate) fn redirection(text: &str) -> Option<(bool, u16, &str)> {
    let mut words = text.split(' ');
    let ask = match words.next()? {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let slot = words.next()?.parse().ok()?;
    Some((ask, slot, words.next()?))
}

/// How much one node may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Calls queued or awaiting an answer, at most.
    pub(crate) max_in_flight: usize,
    /// How long a call may wait for its answer.
    pub(crate) grace: Duration,
    /// A call unanswered this long (the node timeout) counts against the
    /// node's health at once, though it goes on until its grace; an answer
    /// later than this is no sign of health either.
    pub(crate) late: Duration,
    /// How long one connection attempt may take (TCP, TLS, handshake).
    pub(crate) connect: Duration,
}

/// A call's grace is this many node timeouts…
const GRACE_TIMEOUTS: u32 = 4;
/// …and never less than this: a loaded host is a normal host, and a
/// connection dropped for being slow can strand an acquire's key there
/// (its release then goes nowhere).
const MIN_GRACE: Duration = Duration::from_secs(1);

impl Limits {
    /// The limits for a node timeout of `node_timeout`.
    pub(crate) fn new(max_in_flight: usize, node_timeout: Duration, connect: Duration) -> Self {
        Limits {
            max_in_flight,
            grace: (node_timeout * GRACE_TIMEOUTS).max(MIN_GRACE),
            late: node_timeout,
            connect,
        }
    }
}

/// How a first connection attempt failed.
#[derive(Debug, Clone)]
pub(crate) enum First {
    Failed(NodeError),
    /// The node's settings or the user's permissions do not do.
    Misconfigured(ConfigError),
    /// The server is already a member, under this name.
    SameAs(Arc<str>),
}

/// The connection's state, as calls see it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// No attempt has ended yet: calls queue.
    First,
    /// Connected: calls queue and are written.
    Up,
    /// The connection closed (or died) after working: a new one is being
    /// opened at once, and calls queue for it.
    Reconnecting,
    /// The last attempt failed: calls are refused at once.
    Down(NodeError),
}

/// What calls share with the link's task.
struct Shared {
    state: State,
    /// Calls made, not yet taken by the task, in order.
    queue: VecDeque<Pending>,
    /// The server and version the last connection reported.
    server: Option<Arc<str>>,
    /// The client is gone: the task finishes what it holds and ends.
    closing: bool,
    /// The task runs (false once its runtime dropped it).
    running: bool,
    /// The member this server already is, if another one is.
    same_as: Option<Arc<str>>,
    /// A probe or a shutdown asked for an attempt now, not after the
    /// backoff (see [`Link::kick`]).
    kicked: bool,
    /// What the node's connections told of it.
    standing: Standing,
    /// Releases to send once a connection is up: their connection failed
    /// under them (or they were made while it reconnected) and the next
    /// attempt failed too. Bounded by the in-flight bound (each holds its
    /// slot) and by [`MAX_RESENDS`](call::MAX_RESENDS) and the key's TTL; a closing link tries
    /// [`CLOSING_ATTEMPTS`] more connections for them, no more.
    retained: VecDeque<Pending>,
    /// The last attempt failed on the node's settings or the user's
    /// permissions: a configuration error, reported as such at connect.
    misconfigured: Option<ConfigError>,
}

/// One node's connection: its queue, its state and its task.
pub(crate) struct Link {
    name: Arc<str>,
    address: Address,
    tls: tls::Configs,
    limits: Limits,
    /// Lock connections load the function library and check their node;
    /// others (a cluster's seed, used for its map) need not.
    checks: Option<Checks>,
    /// Checks the server is no other member (by `run_id`) when connected:
    /// `Err` names the member it already is.
    identity: Option<Identity>,
    shared: Mutex<Shared>,
    /// The task's waker, and whether a wake is already due.
    wake: AtomicWaker,
    scheduled: AtomicBool,
    /// Notified at every change of state.
    changed: Notify,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("name", &self.name)
            .field("state", &self.lock().state)
            .finish()
    }
}

/// The client's hold on a link: the link's task finishes what it holds and
/// ends once this is dropped.
#[derive(Debug)]
pub(crate) struct LinkHandle(Arc<Link>);

impl LinkHandle {
    /// The link itself.
    pub(crate) fn arc(&self) -> &Arc<Link> {
        &self.0
    }
}

impl std::ops::Deref for LinkHandle {
    type Target = Link;
    fn deref(&self) -> &Link {
        &self.0
    }
}

impl Drop for LinkHandle {
    fn drop(&mut self) {
        self.0.lock().closing = true;
        self.0.schedule();
    }
}

/// Options of a new link.
pub(crate) struct Options {
    pub(crate) limits: Limits,
    /// A lock connection: loads the function library and checks its node
    /// (`Some`); a cluster's seed, used for its map, needs neither.
    pub(crate) checks: Option<Checks>,
    pub(crate) identity: Option<Identity>,
}

/// Whether a connected server is no other member: `Err` names the member it
/// already is.
pub(crate) type Identity = Box<dyn Fn(&Hello) -> Result<(), Arc<str>> + Send + Sync>;

impl Link {
    /// A link to `address`, connecting in the background. Needs a tokio
    /// runtime.
    pub(crate) fn start(address: Address, tls: tls::Configs, options: Options) -> LinkHandle {
        let link = Arc::new(Link {
            name: Arc::clone(address.name()),
            address,
            tls,
            limits: options.limits,
            checks: options.checks,
            identity: options.identity,
            shared: Mutex::new(Shared {
                state: State::First,
                queue: VecDeque::new(),
                server: None,
                closing: false,
                running: true,
                same_as: None,
                kicked: false,
                standing: Standing::default(),
                retained: VecDeque::new(),
                misconfigured: None,
            }),
            wake: AtomicWaker::new(),
            scheduled: AtomicBool::new(false),
            changed: Notify::new(),
        });
        tokio::spawn(io::run(Arc::clone(&link)));
        LinkHandle(link)
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The node's name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Makes `call`: queued for the node, in order, unless the node is down
    /// (then it ends at once, refused before it was sent — but for a
    /// release, kept for the next connection). Whether it was made.
    pub(crate) fn submit(self: &Arc<Self>, call: Pending) -> bool {
        let mut shared = self.lock();
        let refused = if !shared.running && !self.restart(&mut shared) {
            NodeError::NotConnected(
                "no tokio runtime: the runtime that ran this client's connections has ended".into(),
            )
        } else if let State::Down(why) = &shared.state {
            match why {
                // A configuration problem keeps its name: it is no outage.
                NodeError::NoPermission(_) | NodeError::Auth(_) => why.clone(),
                // A release is kept for the next connection: the acquire it
                // pairs with may have landed on the connection that died.
                // It costs its round nothing (the others decide it).
                _ if call.resendable(Instant::now()) => {
                    shared.retained.push_back(call);
                    return true;
                }
                _ => NodeError::NotConnected(why.to_string().into()),
            }
        } else {
            shared.queue.push_back(call);
            drop(shared);
            self.schedule();
            return true;
        };
        drop(shared);
        call.finish(Err(refused), self.limits.late);
        false
    }

    /// Wakes the task, unless a wake is already due.
    fn schedule(&self) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            self.wake.wake();
        }
    }

    /// Starts the task again on the current runtime, the one that ran it
    /// having ended (a client kept in a `static` across test runtimes).
    fn restart(self: &Arc<Self>, shared: &mut Shared) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        shared.running = true;
        shared.state = State::Reconnecting;
        runtime.spawn(io::run(Arc::clone(self)));
        true
    }

    /// `Ok` while connected; otherwise why not.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        match &self.lock().state {
            State::Up => Ok(()),
            State::Down(why) => Err(NodeError::NotConnected(why.to_string().into())),
            State::First => Err(NodeError::NotConnected("connecting".into())),
            State::Reconnecting => Err(NodeError::NotConnected("reconnecting".into())),
        }
    }

    /// Whether no connection attempt has ended yet.
    pub(crate) fn connecting_first(&self) -> bool {
        self.lock().state == State::First
    }

    /// Resolves at the next change of state (see [`ready`](Self::ready)).
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// How the first attempt ended, within `wait`: `None` if still
    /// connecting; `Err` with the member this server already is, or how
    /// the attempt failed.
    pub(crate) async fn first_outcome(&self, wait: Duration) -> Option<Result<(), First>> {
        let until = Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let shared = self.lock();
                match &shared.state {
                    State::First => {}
                    State::Down(why) => {
                        return Some(Err(match (&shared.same_as, &shared.misconfigured) {
                            (Some(other), _) => First::SameAs(Arc::clone(other)),
                            (None, Some(error)) => First::Misconfigured(error.clone()),
                            (None, None) => First::Failed(why.clone()),
                        }));
                    }
                    State::Up | State::Reconnecting => return Some(Ok(())),
                }
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return None;
            }
        }
    }

    /// The server and version its last connection reported.
    pub(crate) fn server(&self) -> Option<Arc<str>> {
        self.lock().server.clone()
    }

    /// The client's agreement with the deployment record, and this node's
    /// place in it (clients of Redis masters).
    pub(crate) fn agreement(
        &self,
    ) -> Option<&(Arc<crate::transport::agreement::Agreement>, usize)> {
        self.checks.as_ref()?.agreement.as_ref()
    }

    /// What the node's connections told of it.
    pub(crate) fn standing(&self) -> Standing {
        self.lock().standing.clone()
    }

    /// One command outside any round, on the current connection (queued
    /// while it reconnects), its reply as the node gave it; the caller
    /// bounds it. `counted` counts it in the node's health.
    pub(crate) async fn query(
        self: &Arc<Self>,
        command: Vec<u8>,
        counted: Option<Counted>,
    ) -> Result<Frame, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.submit(Pending::new(Work::Raw(command), Sink::Reply(tx), counted));
        rx.await
            .unwrap_or_else(|_| Err(NodeError::Connection("the connection ended".into())))
    }

    /// A link waiting out its backoff after a failed attempt (or after a
    /// connection that died young) makes its next attempt now; calls made
    /// from now on queue for it, not refused. If an attempt is under way and
    /// fails, the calls made since it began wait for the next one, made at
    /// once. No effect while connected, nor during the first attempt.
    pub(crate) fn kick(&self) {
        {
            let mut shared = self.lock();
            if matches!(shared.state, State::Down(_)) {
                shared.state = State::Reconnecting;
            }
            if shared.state == State::Reconnecting {
                shared.kicked = true;
            }
        }
        self.schedule();
    }

    /// A `PING` (for readiness probes), through the same queue as every
    /// call: a dead connection is found and replaced as for a lock round.
    /// A node down is tried again at once (not after the backoff), the
    /// `PING` waiting for that attempt (or, if an attempt begun before it
    /// fails, for the next one, made at once): a node back up reports
    /// reachable within the round trips of one attempt.
    pub(crate) async fn ping(self: &Arc<Self>) -> Result<(), NodeError> {
        self.kick();
        match self
            .query(crate::transport::resp::encode(&[b"PING"]), None)
            .await?
        {
            Frame::Error(text) => Err(NodeError::from_reply(&text)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_redirections() {
        assert_eq!(
            redirection("MOVED 3999 127.0.0.1:7002"),
            Some((false, 3999, "127.0.0.1:7002"))
        );
        assert_eq!(redirection("ASK 1 h:2"), Some((true, 1, "h:2")));
        assert_eq!(redirection("ERR MOVED"), None);
        assert_eq!(redirection("MOVED x h:1"), None);
    }
}
