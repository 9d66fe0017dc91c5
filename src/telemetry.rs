//! What the client tells operators: metrics through the [`metrics`] facade
//! (install an exporter, before or after building a client; with the
//! feature `prometheus`, [`MetricsEndpoint`] serves them), and
//! one log line when a node degrades or recovers (decided by the pure
//! `proto::health` tracker).
//!
//! Every name and label is listed, with its meaning, in
//! `docs/operations.md` ("Metrics"). Per-node instruments are resolved when
//! the client is built, so a call costs a few atomic updates; a client
//! built before any recorder was installed resolves them again, once, when
//! it first sees one, so that no series is lost to the order of start-up.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

use crate::proto::error::NodeError;
use crate::proto::health::{Change, Failure, Tracker};
use crate::proto::op::Reply;

/// Node calls, by outcome (`node`, `outcome`).
pub const NODE_REQUESTS: &str = "redquorum_node_requests_total";
/// Latency of node calls that got an answer, in seconds (`node`).
pub const NODE_LATENCY: &str = "redquorum_node_request_duration_seconds";
/// Node calls in flight (`node`).
pub const NODE_IN_FLIGHT: &str = "redquorum_node_in_flight";
/// 1 while the node answers, 0 while it is degraded (`node`).
pub const NODE_UP: &str = "redquorum_node_up";
/// Locks granted (`kind`).
pub const GRANTS: &str = "redquorum_grants_total";
/// Acquisitions refused (`kind`, `reason`).
pub const REFUSALS: &str = "redquorum_refusals_total";
/// Extensions, by result (`result`: `extended`, `refused`, `expired`).
pub const EXTENSIONS: &str = "redquorum_extensions_total";
/// Locks found expired by an extension or a release.
pub const EXPIRATIONS: &str = "redquorum_expirations_total";
/// Lock keys an extension set again on nodes that had lost them
/// (restarted empty, or a clock ran ahead).
pub const RESTORATIONS: &str = "redquorum_restorations_total";
/// Leases lost while their work ran.
pub const LEASES_LOST: &str = "redquorum_leases_lost_total";
/// Quarantines begun: a node met (new, or restarted) that may have
/// forgotten keys, whose yes counts toward no new grant for the longest
/// TTL (`node`).
pub const NODE_QUARANTINES: &str = "redquorum_node_quarantines_total";
/// Seconds of quarantine left when a node's connection was made (`node`;
/// 0 when it counts): set at each connection.
pub const NODE_QUARANTINE: &str = "redquorum_node_quarantine_seconds";
/// Releases sent again on a node's next connection, their connection
/// having failed before their answer (`node`).
pub const NODE_RESENDS: &str = "redquorum_node_resends_total";
/// 1 where the node may evict lock keys (a memory limit with an evicting
/// `maxmemory-policy`), else 0, as of its last connection (`node`).
pub const NODE_EVICTING: &str = "redquorum_node_evicting";
/// 1 while the node's answers come near its node timeout or past it (too
/// late, or nearly, to count in a round), else 0 (`node`).
pub const NODE_SLOW: &str = "redquorum_node_slow";
/// Holders' keys seen with a time to live above this client's longest TTL
/// (`Builder::max_ttl`), in refusals that report it (`node`): an interop
/// peer, or a client with a longer `max_ttl`, whose locks can outlive a
/// restarted node's quarantine (docs/migrating.md).
pub const TTL_ABOVE_MAX: &str = "redquorum_ttl_above_max_total";
/// How long waiting acquisitions waited, in seconds (`result`: `granted`,
/// `timeout`, `refused`).
pub const WAIT: &str = "redquorum_wait_seconds";

/// Describes every metric to the recorder installed now (its `# HELP`
/// lines and units). Called when a client is built, and by
/// [`MetricsEndpoint::serve`](crate::telemetry::MetricsEndpoint::serve)
/// (feature `prometheus`); call it after installing a recorder of your own.
///
/// ```
/// redquorum::telemetry::describe(); // no recorder: nothing happens
/// ```
pub fn describe() {
    describe_counter!(NODE_REQUESTS, "Node calls by outcome");
    describe_histogram!(
        NODE_LATENCY,
        Unit::Seconds,
        "Latency of node calls that got an answer"
    );
    describe_gauge!(NODE_IN_FLIGHT, "Node calls in flight");
    describe_gauge!(NODE_UP, "1 while the node answers, 0 while it is degraded");
    describe_counter!(GRANTS, "Locks granted");
    describe_counter!(REFUSALS, "Acquisitions refused, by reason");
    describe_counter!(EXTENSIONS, "Lock extensions, by result");
    describe_counter!(
        EXPIRATIONS,
        "Locks found expired by an extension or a release"
    );
    describe_counter!(
        RESTORATIONS,
        "Lock keys an extension set again on nodes that had lost them"
    );
    describe_counter!(LEASES_LOST, "Leases lost while their work ran");
    describe_counter!(
        NODE_QUARANTINES,
        "Nodes met that may have forgotten keys (restarted without persistence)"
    );
    describe_gauge!(
        NODE_QUARANTINE,
        Unit::Seconds,
        "Quarantine left at the node's last connection"
    );
    describe_counter!(
        NODE_RESENDS,
        "Releases sent again on the next connection, their connection having failed"
    );
    describe_gauge!(
        NODE_EVICTING,
        "1 where the node may evict lock keys (maxmemory-policy)"
    );
    describe_gauge!(
        NODE_SLOW,
        "1 while the node's answers come near or past its node timeout"
    );
    describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Time waiting acquisitions waited, by result"
    );
    describe_counter!(
        TTL_ABOVE_MAX,
        "Holders' keys seen with a TTL above the longest TTL (a peer or a client with a longer max_ttl)"
    );
}

/// The `outcome` labels of [`NODE_REQUESTS`].
pub const OUTCOMES: [&str; 7] = [
    "done",
    "held",
    "not_held",
    "timed_out",
    "unreachable",
    "overloaded",
    "error",
];

/// Which of [`OUTCOMES`] a call had, and how it failed, if it did.
fn classify(outcome: Result<&Reply, &NodeError>) -> (usize, Option<Failure>) {
    match outcome {
        Ok(Reply::Done | Reply::Restored | Reply::Fence(_) | Reply::Snapshot(_)) => (0, None),
        Ok(Reply::Held { .. } | Reply::PermitsDiffer { .. }) => (1, None),
        Ok(Reply::NotHeld) => (2, None),
        Err(NodeError::TimedOut) => (3, Some(Failure::TimedOut)),
        Err(NodeError::NotConnected(_) | NodeError::Connection(_)) => {
            (4, Some(Failure::Unreachable))
        }
        Err(NodeError::Overloaded(_)) => (5, Some(Failure::Overloaded)),
        // The client's own bound on a healthy node: no sign of the node's.
        Err(NodeError::Saturated(_)) => (5, None),
        Err(_) => (6, Some(Failure::Error)),
    }
}

/// Which recorder is in use here: its size and address. The facade's
/// stand-in while none is installed is a zero-sized no-op; an exporter is
/// not (a zero-sized recorder installed after a client was built goes
/// unseen by it).
fn recorder() -> (usize, usize) {
    metrics::with_recorder(|r| {
        (
            std::mem::size_of_val(r),
            std::ptr::from_ref(r).cast::<()>() as usize,
        )
    })
}

/// Instruments resolved against the recorder installed when they were made,
/// and resolved once more if that was none and one is installed later (an
/// application that builds its client before its metrics exporter).
struct Resolved<T> {
    /// Resolved when built…
    first: T,
    /// …against no recorder at all: then resolved again once one is seen.
    first_is_noop: bool,
    /// The recorder the first instruments came from.
    resolved_with: (usize, usize),
    later: OnceLock<T>,
}

impl<T> Resolved<T> {
    fn new(first: T) -> Self {
        let resolved_with = recorder();
        Resolved {
            first,
            first_is_noop: resolved_with.0 == 0,
            resolved_with,
            later: OnceLock::new(),
        }
    }

    /// The instruments of the recorder installed now: `later` makes them
    /// once, when a recorder appears where there was none (after
    /// [`describe`] has run for it).
    fn get(&self, later: impl FnOnce() -> T) -> &T {
        if !self.first_is_noop {
            return &self.first;
        }
        if let Some(later) = self.later.get() {
            return later;
        }
        if recorder() == self.resolved_with {
            return &self.first;
        }
        self.later.get_or_init(|| {
            describe();
            later()
        })
    }
}

/// One node's instruments, as resolved against one recorder.
struct Instruments {
    outcomes: [Counter; 7],
    latency: Histogram,
    in_flight: Gauge,
    up: Gauge,
    slow: Gauge,
}

impl Instruments {
    /// Registers the instruments of the node called `node` with the
    /// recorder in use now.
    fn new(node: &str) -> Self {
        Instruments {
            outcomes: OUTCOMES.map(
                |outcome| counter!(NODE_REQUESTS, "node" => node.to_owned(), "outcome" => outcome),
            ),
            latency: histogram!(NODE_LATENCY, "node" => node.to_owned()),
            in_flight: gauge!(NODE_IN_FLIGHT, "node" => node.to_owned()),
            up: gauge!(NODE_UP, "node" => node.to_owned()),
            slow: gauge!(NODE_SLOW, "node" => node.to_owned()),
        }
    }
}

/// One node's instruments and health.
pub(crate) struct NodeTelemetry {
    name: Arc<str>,
    instruments: Resolved<Instruments>,
    /// Calls in flight, and whether the node is up, as the gauges say (to
    /// set a later recorder's gauges right).
    in_flight: AtomicI64,
    health: Mutex<Tracker>,
    /// Answers in a row near or past the node timeout, up to
    /// [`SLOW_IN_A_ROW`] (the node is then slow until an answer comes
    /// within half of it).
    slow: AtomicU32,
    /// When the last of those was counted, in nanoseconds since `born`
    /// (0: none): a burst of answers to calls queued behind one stall
    /// counts once.
    slow_at: AtomicU64,
    born: Instant,
}

/// Answers in a row near or past the node timeout (over 80 % of it) that
/// make a node slow: one late answer on a loaded host is no sign.
const SLOW_IN_A_ROW: u32 = 3;

impl std::fmt::Debug for NodeTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTelemetry")
            .field("name", &self.name)
            .field("degraded", &self.degraded())
            .finish()
    }
}

impl NodeTelemetry {
    /// Registers the instruments of the node called `name` (its redacted
    /// name: no password ever reaches a label).
    pub(crate) fn new(name: &Arc<str>) -> Self {
        let first = Instruments::new(name);
        first.up.set(1.0);
        first.slow.set(0.0);
        NodeTelemetry {
            name: Arc::clone(name),
            instruments: Resolved::new(first),
            in_flight: AtomicI64::new(0),
            health: Mutex::new(Tracker::default()),
            slow: AtomicU32::new(0),
            slow_at: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// The instruments of the recorder installed now.
    fn instruments(&self) -> &Instruments {
        self.instruments.get(|| {
            let later = Instruments::new(&self.name);
            later
                .in_flight
                .set(self.in_flight.load(Ordering::Relaxed) as f64);
            later.up.set(if self.degraded() { 0.0 } else { 1.0 });
            let slow = self.slow.load(Ordering::Relaxed) >= SLOW_IN_A_ROW;
            later.slow.set(f64::from(u8::from(slow)));
            later
        })
    }

    /// Whether the node is degraded now.
    pub(crate) fn degraded(&self) -> bool {
        self.tracker().is_degraded()
    }

    /// A call was made (it is in flight until [`done`](Self::done)).
    pub(crate) fn started(&self) {
        // Resolved first: a later recorder's gauge starts from the count
        // before this call.
        let instruments = self.instruments();
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        instruments.in_flight.increment(1.0);
    }

    /// A call made ended (however: answered, failed or dropped).
    pub(crate) fn done(&self) {
        let instruments = self.instruments();
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        instruments.in_flight.decrement(1.0);
    }

    /// A call made at `made` ended with `outcome`. An answer later than
    /// `late` (the node timeout) is no sign of health: it counts as timed
    /// out for the node's health, unless it was already counted late.
    pub(crate) fn ended(
        &self,
        outcome: Result<&Reply, &NodeError>,
        made: tokio::time::Instant,
        late: Duration,
        counted_late: bool,
    ) {
        let now = Instant::now();
        let took = tokio::time::Instant::now().saturating_duration_since(made);
        let (i, failure) = classify(outcome);
        let instruments = self.instruments();
        if !matches!(failure, Some(Failure::TimedOut | Failure::Unreachable)) {
            instruments.latency.record(took.as_secs_f64());
        }
        instruments.outcomes[i].increment(1);
        if outcome.is_ok() {
            self.answered_in(took, late, now.saturating_duration_since(self.born));
        }
        if counted_late {
            return;
        }
        let failure = match failure {
            None if took > late => Some(Failure::TimedOut),
            other => other,
        };
        self.health(failure, outcome.err(), now);
    }

    /// An answer took `took` against the node timeout `late`, `at` (since
    /// the node's telemetry was made): a node whose answers come near it or
    /// past it [`SLOW_IN_A_ROW`] times, at least a node timeout apart (the
    /// answers to calls queued behind one stall — a reconnection, a frozen
    /// node — come back at once: they count once), none within half of it
    /// between, is named once (with the setting to raise) and its gauge
    /// set, until an answer comes within half of it. A node farther away
    /// than the node timeout allows never counts in a round: it only shows
    /// here.
    fn answered_in(&self, took: Duration, late: Duration, at: Duration) {
        let slow = if took * 5 > late * 4 {
            let at = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX).max(1);
            let last = self.slow_at.load(Ordering::Relaxed);
            let apart = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
            if last != 0 && at.saturating_sub(last) < apart {
                return;
            }
            self.slow_at.store(at, Ordering::Relaxed);
            self.slow
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < SLOW_IN_A_ROW).then_some(n + 1)
                })
                .is_ok_and(|n| n + 1 == SLOW_IN_A_ROW)
        } else if took * 2 <= late {
            if self.slow.swap(0, Ordering::Relaxed) >= SLOW_IN_A_ROW {
                self.instruments().slow.set(0.0);
                tracing::info!(
                    node = %self.name,
                    round_trip_ms = took.as_millis() as u64,
                    node_timeout_ms = late.as_millis() as u64,
                    "node answers within the node timeout again"
                );
            }
            return;
        } else {
            return;
        };
        if slow {
            self.instruments().slow.set(1.0);
            tracing::warn!(
                node = %self.name,
                round_trip_ms = took.as_millis() as u64,
                node_timeout_ms = late.as_millis() as u64,
                "node answers near or past the node timeout: its answers come too late to count \
                 in a round (or nearly); raise the node timeout (Builder::node_timeout, CLI \
                 --node-timeout) above its round trip, within the TTL's validity \
                 (docs/operations.md, distant nodes)"
            );
        }
    }

    /// A call is still unanswered after the node timeout (it goes on; its
    /// outcome is counted when it ends, not in the node's health again).
    pub(crate) fn late(&self) {
        self.health(
            Some(Failure::TimedOut),
            Some(&NodeError::TimedOut),
            Instant::now(),
        );
    }

    /// A call was refused before it was made (shut down, the in-flight
    /// bound).
    pub(crate) fn refused(&self, error: &NodeError) {
        let (i, failure) = classify(Err(error));
        self.instruments().outcomes[i].increment(1);
        // The client's own saturation says nothing of the node's health.
        if !matches!(error, NodeError::Saturated(_)) {
            self.health(failure, Some(error), Instant::now());
        }
    }

    /// Feeds the tracker; logs a change it says to announce.
    fn health(&self, failure: Option<Failure>, error: Option<&NodeError>, now: Instant) {
        let change = self.tracker().on(failure, now);
        if let Some(change) = change {
            let error = error.map(ToString::to_string);
            self.report(change, error.as_deref().unwrap_or_default());
        }
    }

    /// Sets the up gauge and logs a change the tracker says to announce.
    fn report(&self, change: Change, error: &str) {
        let up = &self.instruments().up;
        match change {
            Change::Degraded { why, announce } => {
                up.set(0.0);
                if announce {
                    tracing::warn!(
                        node = %self.name,
                        error,
                        "node {why}: rounds count it as a no until it answers again (each round needs a quorum of the nodes)"
                    );
                }
            }
            Change::Recovered {
                after,
                failed,
                announce,
            } => {
                up.set(1.0);
                if announce {
                    tracing::info!(
                        node = %self.name,
                        degraded_for = ?after,
                        failed_calls = failed,
                        "node recovered"
                    );
                }
            }
        }
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a node's connection found of it: a quarantine `begun` now, how
/// long one (begun now or before, same process) has `left`, and whether it
/// may evict lock keys. Once per connection.
pub(crate) fn node_checked(
    node: &str,
    begun: bool,
    left: Option<std::time::Duration>,
    evicting: bool,
) {
    if begun {
        counter!(NODE_QUARANTINES, "node" => node.to_owned()).increment(1);
    }
    gauge!(NODE_QUARANTINE, "node" => node.to_owned()).set(left.map_or(0.0, |l| l.as_secs_f64()));
    gauge!(NODE_EVICTING, "node" => node.to_owned()).set(f64::from(u8::from(evicting)));
}

/// A holder's key on `node` was seen with more time to live than the
/// longest TTL.
pub(crate) fn ttl_above_max(node: &str) {
    counter!(TTL_ABOVE_MAX, "node" => node.to_owned()).increment(1);
}

/// `calls` releases of `node` are sent again on its next connection.
pub(crate) fn resent(node: &str, calls: u64) {
    counter!(NODE_RESENDS, "node" => node.to_owned()).increment(calls);
}

mod client;
#[cfg(feature = "prometheus")]
mod endpoint;
#[cfg(feature = "prometheus")]
pub use endpoint::{EndpointError, MAX_REQUEST, MAX_SCRAPES, MetricsEndpoint, READ_WITHIN};

pub(crate) use client::ClientTelemetry;

#[cfg(test)]
mod tests;
