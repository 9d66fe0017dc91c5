//! Simulated lock nodes: Redis masters on the simulation's virtual time
//! (the network between them and the clients is in `net.rs`).
//!
//! - A [`SimNode`] keeps its keys in a `redquorum::internals::Store`, the one
//!   model of what a node does with each operation (checked against Redis
//!   by `tests/redis_model.rs`). Its clock runs at `rate` (1.0 = true time), in
//!   whole milliseconds: a TTL of `t` ms lasts `t / rate` ms of true time,
//!   to within a millisecond — a fast clock expires keys early.
//! - A frozen node (SIGSTOP) holds every request until thawed, then applies
//!   them in order. Keys keep expiring by the clock meanwhile.
//! - A crashed node drops every request not yet applied (the connection is
//!   reset: the caller gets `Connection`), refuses calls while down
//!   (`NotConnected`), and comes back with its keys (AOF with `appendfsync
//!   always`) or, for a negative control, without them.
//! - A node reports every release that deletes a key (as Redis' release
//!   scripts publish it), and every reader it removes (on the writer key's
//!   channel), to the listeners ([`Node::listen`]) subscribed to the key's
//!   channel. A notice may be lost like a reply; a crash ends every listener
//!   (the client opens a new one).
//!
//! Each node also keeps a ledger per token, for the leftover check: a key an
//! acquire set must later see a release for the same token applied on that
//! node, unless a crash dropped one of that token's operations there (the
//! documented limit: such a key lives until its TTL).
//!
//! [`Node::listen`]: redquorum::node::Node::listen

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redquorum::NodeError;
use redquorum::internals::Store;
use redquorum::node::{Op, Reply};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::net::{Timed, World, lock};

/// What one node has done with one token, for the leftover check.
#[derive(Debug, Default, Clone, Copy)]
struct Ledger {
    /// An acquire with this token set the key here.
    set: bool,
    /// An acquire with this token reached this node (and was applied,
    /// whatever it answered).
    arrived: bool,
    /// Extensions with this token that reached this node.
    extensions: u32,
    /// A release with this token was applied here.
    released: bool,
    /// A crash dropped one of this token's operations here, or one was
    /// refused while the node was down.
    excused: bool,
}

#[derive(Debug)]
struct State {
    up: bool,
    frozen: bool,
    /// Bumped by every crash: requests sent before it are never applied.
    epoch: u64,
    /// The keys, and what each operation does to them.
    store: Store,
    ledger: BTreeMap<String, Ledger>,
    /// Open listeners, by id.
    listeners: BTreeMap<u64, Listening>,
    next_listener: u64,
    /// Restarted without its keys: the next start begins a quarantine.
    wiped: bool,
    /// Quarantined until then (the delayed restart, kept by the clients).
    quarantined_until: Option<Instant>,
    /// How long a node that restarted empty is quarantined (`None`: the
    /// clients do not keep the delayed restart).
    quarantine: Option<Duration>,
}

/// One listener's end on its node.
#[derive(Debug)]
struct Listening {
    channels: BTreeSet<String>,
    notices: mpsc::UnboundedSender<Timed>,
    /// When its last notice is delivered (no reordering on a connection).
    last_due: Instant,
}

/// One simulated lock node (a Redis master).
#[derive(Debug)]
pub struct SimNode {
    pub index: usize,
    /// The node clock's rate relative to true time.
    pub rate: f64,
    /// When its clock read 0, in true time.
    epoch: Instant,
    /// Milliseconds its clock was stepped by (forward positive).
    step_ms: std::sync::atomic::AtomicI64,
    state: Mutex<State>,
    /// A negative control: a reentrant release gives back two holds.
    pub double_release: AtomicBool,
    /// A negative control: a multi-resource acquire sets the keys that are
    /// free and answers done, not all-or-nothing.
    pub partial_many: AtomicBool,
    /// A negative control: listeners confirm subscriptions and never
    /// report a release.
    pub deaf: AtomicBool,
    /// A negative control: a write acquire ignores live readers (sets the
    /// writer key whenever no writer stands).
    pub writer_ignores_readers: AtomicBool,
    /// Woken when the node is thawed or killed. (Not a `watch`: its wake-up
    /// order is random, and a schedule must replay exactly.)
    thawed: Notify,
}

/// The token an operation's ledger entry follows: a reentrant hold is
/// acquired and released once, so its hold is what the ledger follows.
pub fn ledger_token<'a>(op: &Op<'a>) -> &'a str {
    match *op {
        Op::AcquireReentrant { hold, .. } | Op::ReleaseReentrant { hold, .. } => hold,
        Op::ExtendReentrant { owner, .. } => owner,
        Op::Acquire { token, .. }
        | Op::Extend { token, .. }
        | Op::Release { token, .. }
        | Op::AcquireFenced { token, .. }
        | Op::FenceWriteBack { token, .. }
        | Op::AcquireMany { token, .. }
        | Op::ExtendMany { token, .. }
        | Op::ReleaseMany { token, .. }
        | Op::AcquireRead { token, .. }
        | Op::ExtendRead { token, .. }
        | Op::ReleaseRead { token, .. }
        | Op::AcquireWrite { token, .. }
        | Op::ReleaseWrite { token, .. }
        | Op::AcquirePermit { token, .. }
        | Op::ExtendPermit { token, .. }
        | Op::ReleasePermit { token, .. } => token,
        _ => "",
    }
}

impl SimNode {
    pub fn new(index: usize, rate: f64) -> Arc<SimNode> {
        Arc::new(SimNode {
            index,
            rate,
            epoch: Instant::now(),
            step_ms: std::sync::atomic::AtomicI64::new(0),
            state: Mutex::new(State {
                up: true,
                frozen: false,
                epoch: 0,
                store: Store::new(),
                ledger: BTreeMap::new(),
                listeners: BTreeMap::new(),
                next_listener: 0,
                wiped: false,
                quarantined_until: None,
                quarantine: None,
            }),
            double_release: AtomicBool::new(false),
            partial_many: AtomicBool::new(false),
            deaf: AtomicBool::new(false),
            writer_ignores_readers: AtomicBool::new(false),
            thawed: Notify::new(),
        })
    }

    /// The node's clock at `now` (true time), in its milliseconds: it runs
    /// at `rate` from the simulation's start, moved by every step.
    fn clock(&self, now: Instant) -> u64 {
        let true_ns = now.saturating_duration_since(self.epoch).as_nanos() as f64;
        let stepped = (true_ns * self.rate / 1e6) as i64 + self.step_ms.load(Ordering::Relaxed);
        stepped.max(0) as u64
    }

    /// Steps the node's clock by `ms` (forward when positive): keys whose
    /// expiry it passes are gone at once; a step back keeps them longer.
    pub fn step_clock(&self, ms: i64) {
        self.step_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// Holds every request until [`thaw`](Self::thaw) (SIGSTOP).
    pub fn freeze(&self) {
        lock(&self.state).frozen = true;
    }

    pub fn thaw(&self) {
        lock(&self.state).frozen = false;
        self.thawed.notify_waiters();
    }

    /// Returns once the node is not frozen.
    pub async fn not_frozen(&self) {
        loop {
            let thawed = self.thawed.notified();
            tokio::pin!(thawed);
            thawed.as_mut().enable();
            if !lock(&self.state).frozen {
                return;
            }
            thawed.await;
        }
    }

    /// The connection a call made now goes on (the crash epoch its requests
    /// belong to), or `None` while the node is down.
    pub fn connection(&self) -> Option<u64> {
        let st = lock(&self.state);
        if st.up { Some(st.epoch) } else { None }
    }

    /// Kills the node: requests not yet applied are dropped, calls are
    /// refused until [`start`](Self::start). With `wipe`, its keys are gone
    /// (no persistence); otherwise they survive (AOF, `appendfsync always`).
    pub fn crash(&self, wipe: bool) {
        let mut st = lock(&self.state);
        st.up = false;
        st.epoch += 1;
        if wipe {
            st.store.clear();
            st.wiped = true;
        }
        // A killed process is no longer stopped, and its connections are
        // gone.
        st.frozen = false;
        st.listeners.clear();
        st.store.take_published();
        drop(st);
        self.thawed.notify_waiters();
    }

    /// Loses the fencing counters, and sets the node's clock back to zero
    /// (a negative control: counters that are not durable, on a node whose
    /// clock steps back by more than the longest TTL). A counter is
    /// floored at its node's clock (docs/fencing.md §8), so lost counters
    /// alone no longer make tokens go back; with the clock's assumption
    /// broken too, they do again.
    pub fn forget_counters(&self) {
        lock(&self.state).store.forget_persistent();
        let now = self.clock(Instant::now());
        self.step_clock(-(now as i64));
    }

    pub fn start(&self) {
        let mut st = lock(&self.state);
        st.up = true;
        if std::mem::take(&mut st.wiped) {
            st.quarantined_until = st.quarantine.map(|q| Instant::now() + q);
        }
    }

    /// Nodes that restart empty are quarantined for `longest` (the clients
    /// keep the delayed restart: `redquorum::internals::restart`).
    pub fn quarantine_restarts(&self, longest: Duration) {
        lock(&self.state).quarantine = Some(longest);
    }

    /// Whether the node is quarantined now: restarted empty less than the
    /// quarantine ago.
    pub fn quarantined(&self) -> bool {
        lock(&self.state)
            .quarantined_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Marks `token`'s ledger entry excused (a call refused while down).
    pub fn excuse(&self, token: &str) {
        lock(&self.state)
            .ledger
            .entry(token.to_owned())
            .or_default()
            .excused = true;
    }

    /// Applies `op` if the connection it came on (`epoch`) is still alive.
    pub fn apply(&self, epoch: u64, op: Op<'_>) -> Result<Reply, NodeError> {
        let now = self.clock(Instant::now());
        let mut st = lock(&self.state);
        let token = ledger_token(&op);
        if !st.up || st.epoch != epoch {
            st.ledger.entry(token.to_owned()).or_default().excused = true;
            return Err(NodeError::Connection("connection reset by restart".into()));
        }
        let ledger = st.ledger.entry(token.to_owned()).or_default();
        match op {
            Op::Extend { .. }
            | Op::ExtendMany { .. }
            | Op::ExtendRead { .. }
            | Op::ExtendPermit { .. } => ledger.extensions += 1,
            Op::Acquire { .. }
            | Op::AcquireFenced { .. }
            | Op::AcquireReentrant { .. }
            | Op::AcquireMany { .. }
            | Op::AcquireRead { .. }
            | Op::AcquireWrite { .. }
            | Op::AcquirePermit { .. } => ledger.arrived = true,
            Op::Release { .. }
            | Op::ReleaseReentrant { .. }
            | Op::ReleaseMany { .. }
            | Op::ReleaseRead { .. }
            | Op::ReleaseWrite { .. }
            | Op::ReleasePermit { .. } => ledger.released = true,
            _ => {}
        }
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let reply = match op {
            // Negative control: the keys that are free are set, and the
            // acquire answers done.
            Op::AcquireMany {
                keys,
                token,
                label: "",
                ttl_ms,
            } if self.partial_many.load(relaxed)
                && keys.iter().any(|k| st.store.holder(k, now).is_none()) =>
            {
                for key in keys {
                    let one = Op::Acquire {
                        key,
                        token,
                        label: "",
                        ttl_ms,
                        holder_ttl: false,
                        line: &[],
                        waiter: None,
                        period: None,
                    };
                    st.store.apply(one, now)?;
                }
                Reply::Done
            }
            // Negative control: live readers are not seen.
            Op::AcquireWrite { keys, .. } if self.writer_ignores_readers.load(relaxed) => {
                let readers = st.store.take(&keys[1]);
                let reply = st.store.apply(op, now);
                if let Some(readers) = readers {
                    st.store.put_back(readers);
                }
                reply?
            }
            Op::ReleaseReentrant { key, owner, .. } => {
                let reply = st.store.apply(op, now)?;
                // Negative control: a second hold goes with this one.
                let other = st.store.holds(key, now).first().cloned();
                if reply == Reply::Done
                    && self.double_release.load(relaxed)
                    && let Some(hold) = other.as_deref()
                {
                    st.store
                        .apply(Op::ReleaseReentrant { key, owner, hold }, now)?;
                }
                reply
            }
            _ => st.store.apply(op, now)?,
        };
        let acquire = matches!(
            op,
            Op::Acquire { .. }
                | Op::AcquireFenced { .. }
                | Op::AcquireReentrant { .. }
                | Op::AcquireMany { .. }
                | Op::AcquireRead { .. }
                | Op::AcquireWrite { .. }
                | Op::AcquirePermit { .. }
        );
        if acquire && matches!(reply, Reply::Done | Reply::Fence(_)) {
            st.ledger.entry(token.to_owned()).or_default().set = true;
        }
        Ok(reply)
    }

    /// Sends the releases just applied to the listeners subscribed to their
    /// channels, each after a message delay (or lost, like a reply).
    pub fn publish(&self, world: &World) {
        let mut st = lock(&self.state);
        let published = st.store.take_published();
        if self.deaf.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        for notice in published {
            for listening in st.listeners.values_mut() {
                if !listening.channels.contains(&notice.channel) || world.chance(world.net.loss_p) {
                    continue;
                }
                let due = listening.last_due.max(Instant::now() + world.delay());
                listening.last_due = due;
                let _ = listening.notices.send((due, notice.clone()));
            }
        }
    }

    /// Opens a listener on this node (its connection, once it arrived).
    pub fn add_listener(&self) -> Result<(u64, mpsc::UnboundedReceiver<Timed>), NodeError> {
        let mut st = lock(&self.state);
        if !st.up {
            return Err(NodeError::NotConnected("node is down".into()));
        }
        let (notices, rx) = mpsc::unbounded_channel();
        let id = st.next_listener;
        st.next_listener += 1;
        st.listeners.insert(
            id,
            Listening {
                channels: BTreeSet::new(),
                notices,
                last_due: Instant::now(),
            },
        );
        Ok((id, rx))
    }

    /// Closes listener `id` (its client dropped it).
    pub fn remove_listener(&self, id: u64) {
        lock(&self.state).listeners.remove(&id);
    }

    /// Subscribes (or unsubscribes) listener `id`; an error when a crash
    /// ended it.
    pub fn change(&self, id: u64, channels: &[&str], on: bool) -> Result<(), NodeError> {
        let mut st = lock(&self.state);
        let Some(listening) = st.listeners.get_mut(&id) else {
            return Err(NodeError::Connection("connection reset by restart".into()));
        };
        for channel in channels {
            if on {
                listening.channels.insert((*channel).to_owned());
            } else {
                listening.channels.remove(*channel);
            }
        }
        Ok(())
    }

    /// Keys set by an acquire and never released here, except those a crash
    /// excuses: the leftovers the coordinator is responsible for.
    pub fn leftovers(&self) -> usize {
        lock(&self.state)
            .ledger
            .values()
            .filter(|l| l.set && !l.released && !l.excused)
            .count()
    }

    /// Of `granted` (each acquisition's token and how many extensions were
    /// granted to it), those whose acquire, or one of whose extensions,
    /// never reached this node, though no crash or refusal excuses it.
    pub fn undelivered<'t>(&self, granted: &'t [(String, u32)]) -> Vec<&'t str> {
        let st = lock(&self.state);
        granted
            .iter()
            .filter(|(token, extended)| {
                st.ledger
                    .get(token)
                    .is_none_or(|l| !l.excused && (!l.arrived || l.extensions < *extended))
            })
            .map(|(token, _)| token.as_str())
            .collect()
    }

    /// How many holds `owner` has on the reentrant lock `key` here now.
    pub fn holds(&self, key: &str, owner: &str) -> usize {
        let now = self.clock(Instant::now());
        let st = lock(&self.state);
        if st.store.holder(key, now) == Some(owner) {
            st.store.holds(key, now).len()
        } else {
            0
        }
    }
}
