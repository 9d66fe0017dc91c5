//! Deterministic simulation: the real coordinator (`Redlock` over the public
//! `Node` trait) against simulated nodes on virtual time, with random
//! per-message delays, lost replies, frozen and restarted nodes and node
//! clocks running at different rates within the drift bound
//! (`tests/support/sim.rs` describes the model).
//!
//! Many clients contend for one resource, and drop their acquire or release
//! futures at random points now and then (cancellation). A checker verifies, in simulated
//! true time, that no two holders' validity windows overlap (a window is
//! `[time the lock was returned, min(lock.deadline(), time release was
//! called))`), and that every key an acquire set was released on its node
//! unless a crash cut that node's connection.
//!
//! - `REDQUORUM_SIM_SCHEDULES` (default 10 000): how many seeded schedules;
//!   `REDQUORUM_SIM_BASE_SEED` (default 0): the first seed.
//! - `REDQUORUM_SIM_SEED=n` runs only schedule `n`, printing its trace
//!   (add `REDQUORUM_SIM_CONTROL=fast-clocks|empty-restarts|…` — a
//!   [`Control`]'s name — for a negative control's schedule).
//! - `REDQUORUM_SOAK=1` or `REDQUORUM_SOAK_SECS=n` keeps running schedules for
//!   that long (default soak 300 s).
//!
//! A seventh of the schedules each take plain locks, fenced ones
//! (`lock_fenced`), reentrant ones (`lock_reentrant`, often a second hold
//! inside the first), multi-resource ones (`lock_many` over the resource and
//! a second one, against clients taking the first alone), leases (work
//! under `run_with`, extended every third of the TTL, each step of it
//! counted as held), permits of a 2-permit semaphore (checked: at most 2
//! valid holders at once) or read/write locks (each round a read or a write
//! lock; checked: a write window overlaps no other window, read windows
//! may overlap each other). A second
//! checker verifies that every holder's fencing token is larger than that of
//! every holder before it. A third verifies delivery: every granted acquire
//! reached every node (the transport, like redis-rs, writes a request only
//! when its future is first polled), unless a crash or a refusal while the
//! node was down excuses it.
//!
//! Nine negative controls break one assumption each and must be caught: node
//! clocks 1.5× fast with drift factor 0.01, nodes restarted empty within the
//! TTL, reentrant releases that give back two holds, multi-resource
//! acquires that are not all-or-nothing, a semaphore opened with one permit
//! too many and write acquires that ignore live readers (overlaps), fencing
//! counters lost on restart (token regressions), a transport that loses
//! requests (undelivered grants) and a checked in-flight bound below the
//! configured one.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redquorum::node::Node;
use redquorum::{LockError, LockOptions, Redlock, Retry};
use support::sim::{Net, SimLink, SimNode, World};
use tokio::time::Instant;

const RESOURCE: &str = "job";
/// The second resource of multi-resource schedules.
const OTHER: &str = "job-part";
const NODES: usize = 5;

/// Which safety assumption a schedule breaks, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    /// Every assumption holds: the checker must find nothing.
    None,
    /// Node clocks run 1.5× fast with drift factor 0.01.
    FastClocks,
    /// Restarted nodes come back without their keys, within the TTL.
    EmptyRestarts,
    /// Fenced locks only; restarted nodes keep their lock keys but lose their
    /// fencing counters (counters that are not durable).
    LostCounters,
    /// The transport loses 5 % of requests: acquires that never reach a node
    /// that never failed.
    LostRequests,
    /// Reentrant locks, often nested; a node's reentrant release gives back
    /// two holds (the bug a cancelled reentrant release once had).
    DoubleRelease,
    /// Multi-resource locks; a node's multi-resource acquire is not
    /// all-or-nothing (sets what is free and answers done).
    PartialMany,
    /// The client's bound on calls in flight is 1024 while the checker
    /// expects 1: shows the in-flight checker can fail.
    LooseBound,
    /// Semaphores; the clients open 3 permits while the fleet agreed on 2
    /// (the checker's limit): shows the permit checker can fail.
    ExtraPermit,
    /// Read/write locks; a node's write acquire ignores live readers (sets
    /// the writer key whenever no writer stands): shows the read/write
    /// checker can fail.
    WriterIgnoresReaders,
}

/// Which kind of lock a schedule's clients take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `try_lock`.
    Plain,
    /// `lock_fenced`.
    Fenced,
    /// `lock_reentrant`, sometimes a second hold inside the first.
    Reentrant,
    /// `lock_many` over the resource and a second one, which other clients
    /// sometimes take alone.
    Many,
    /// `run_with`: work that runs while a lease is extended every third of
    /// the TTL, for longer than the TTL.
    Lease,
    /// A semaphore of [`PERMITS`] permits (`try_acquire`, or waiting with
    /// `acquire_with`): at most that many valid holders at once.
    Semaphore,
    /// Read/write locks on the resource: each round a read lock or, with
    /// [`WRITE_P`], a write lock (`try_read_lock`/`try_write_lock`, or
    /// waiting with `read_lock_with`/`write_lock_with`): readers together,
    /// a writer alone.
    ReadWrite,
}

/// How often a client of a read/write schedule takes a write lock.
const WRITE_P: f64 = 0.35;

/// The permits of a semaphore schedule.
const PERMITS: u32 = 2;

impl Control {
    fn name(self) -> &'static str {
        match self {
            Control::None => "none",
            Control::FastClocks => "fast-clocks",
            Control::EmptyRestarts => "empty-restarts",
            Control::LostCounters => "lost-counters",
            Control::LostRequests => "lost-requests",
            Control::DoubleRelease => "double-release",
            Control::PartialMany => "partial-many",
            Control::LooseBound => "loose-bound",
            Control::ExtraPermit => "extra-permit",
            Control::WriterIgnoresReaders => "writer-ignores-readers",
        }
    }

    fn parse(s: &str) -> Control {
        match s {
            "" | "none" => Control::None,
            "fast-clocks" => Control::FastClocks,
            "empty-restarts" => Control::EmptyRestarts,
            "lost-counters" => Control::LostCounters,
            "lost-requests" => Control::LostRequests,
            "double-release" => Control::DoubleRelease,
            "partial-many" => Control::PartialMany,
            "loose-bound" => Control::LooseBound,
            "extra-permit" => Control::ExtraPermit,
            "writer-ignores-readers" => Control::WriterIgnoresReaders,
            other => panic!("REDQUORUM_SIM_CONTROL: unknown control {other:?}"),
        }
    }

    /// The seed's salt, so a control's schedules differ from the plain ones.
    fn salt(self) -> u64 {
        match self {
            Control::None => 0,
            Control::FastClocks => 0x1111_1111_0000_0000,
            Control::EmptyRestarts => 0x2222_2222_0000_0000,
            Control::LostCounters => 0x3333_3333_0000_0000,
            Control::LostRequests => 0x4444_4444_0000_0000,
            Control::DoubleRelease => 0x5555_5555_0000_0000,
            Control::PartialMany => 0x6666_6666_0000_0000,
            Control::LooseBound => 0x7777_7777_0000_0000,
            Control::ExtraPermit => 0x8888_8888_0000_0000,
            Control::WriterIgnoresReaders => 0x9999_9999_0000_0000,
        }
    }
}

/// The parameters of one schedule, drawn from its seed.
#[derive(Debug, Clone)]
struct Plan {
    clients: usize,
    rounds: usize,
    ttl_ms: u64,
    factor: f64,
    node_timeout: Option<Duration>,
    rates: [f64; NODES],
    net: Net,
    /// How many faults each node suffers, one after another.
    faults: [u32; NODES],
    /// Restarts lose the node's keys (negative control only).
    wipe: bool,
    /// Restarts lose the node's fencing counters (negative control only).
    forget_counters: bool,
    /// The kind of lock every client takes.
    kind: Kind,
    /// The permits the clients open a semaphore with (the checker allows
    /// [`PERMITS`]).
    permits: u32,
    /// The bound on calls in flight per node (`Builder::max_in_flight`)…
    max_in_flight: usize,
    /// …and the one the checker holds every link to (the same, except in
    /// the negative control that shows the checker can fail).
    checked_in_flight: usize,
    /// How often a reentrant holder takes a second hold inside the first.
    nest_p: f64,
    /// The probability that a client drops its acquire or release future
    /// at a random point (cancellation).
    cancel_p: f64,
    /// A client pauses up to this long after a failed round.
    max_pause: Duration,
}

fn plan(r: &mut StdRng, control: Control) -> Plan {
    {
        let factor = match control {
            Control::FastClocks => 0.01,
            _ => [0.01, 0.01, 0.02, 0.05][r.random_range(0..4)],
        };
        let ttl_ms = r.random_range(20..=300);
        let mut rates = [1.0; NODES];
        for rate in &mut rates {
            *rate = match control {
                Control::FastClocks => 1.5,
                // Within the bound: a node clock may run up to `factor` fast
                // (or slow, which only makes keys live longer).
                _ => r.random_range(1.0 - factor..=1.0 + factor),
            };
        }
        let mut faults = [0; NODES];
        for f in &mut faults {
            *f = match control {
                Control::EmptyRestarts | Control::LostCounters => r.random_range(3..=8),
                _ => r.random_range(0..=3),
            };
        }
        let fast_us = r.random_range(0..=3_000);
        // Above what a schedule's calls reach: a call refused for the bound
        // is never sent, and would (rightly) leave keys to their TTL, which
        // the stricter leftover checker here does not excuse.
        let in_flight = 1024;
        Plan {
            clients: r.random_range(2..=7),
            rounds: r.random_range(4..=10),
            ttl_ms,
            factor,
            node_timeout: if r.random_bool(0.5) {
                None
            } else {
                Some(Duration::from_millis(r.random_range(1..=ttl_ms / 2)))
            },
            rates,
            net: Net {
                fast_us,
                slow_p: r.random_range(0.0..=0.1),
                slow_us: r.random_range(fast_us..=2 * ttl_ms * 1_000),
                loss_p: r.random_range(0.0..=0.05),
                request_loss_p: if control == Control::LostRequests {
                    0.05
                } else {
                    0.0
                },
            },
            faults,
            wipe: control == Control::EmptyRestarts,
            forget_counters: control == Control::LostCounters,
            max_pause: Duration::from_millis(r.random_range(1..=ttl_ms / 2)),
            kind: match control {
                Control::LostCounters => Kind::Fenced,
                Control::DoubleRelease => Kind::Reentrant,
                Control::PartialMany => Kind::Many,
                Control::ExtraPermit => Kind::Semaphore,
                Control::WriterIgnoresReaders => Kind::ReadWrite,
                _ => [
                    Kind::Plain,
                    Kind::Fenced,
                    Kind::Reentrant,
                    Kind::Many,
                    Kind::Lease,
                    Kind::Semaphore,
                    Kind::ReadWrite,
                ][r.random_range(0..7)],
            },
            permits: if control == Control::ExtraPermit {
                PERMITS + 1
            } else {
                PERMITS
            },
            max_in_flight: if control == Control::LooseBound {
                1024
            } else {
                in_flight
            },
            checked_in_flight: if control == Control::LooseBound {
                1
            } else {
                in_flight
            },
            nest_p: if control == Control::DoubleRelease {
                0.8
            } else {
                0.3
            },
            cancel_p: r.random_range(0.0..=0.3),
        }
    }
}

/// One holder's validity window in true time since the schedule started:
/// `[start, end)`.
#[derive(Debug, Clone)]
struct Window {
    client: usize,
    start: Duration,
    end: Duration,
    /// The fencing token, for fenced locks.
    fence: Option<u64>,
    /// The lock's token.
    token: String,
    /// How many of its extensions were granted.
    extended: u32,
    /// A read lock's window (shared with other readers); every other
    /// window is exclusive.
    read: bool,
}

impl Window {
    /// An exclusive window of `client` over `[start_ms, end_ms)`, with no
    /// fence, token or extension: what the checker tests build on.
    fn exclusive(client: usize, start_ms: u64, end_ms: u64) -> Window {
        Window {
            client,
            start: Duration::from_millis(start_ms),
            end: Duration::from_millis(end_ms),
            fence: None,
            token: String::new(),
            extended: 0,
            read: false,
        }
    }
}

/// The fencing checker: every holder's token must be larger than that of
/// every holder whose window started before it (one line per window that
/// breaks this).
fn fence_regressions(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let mut found = Vec::new();
    let mut highest: Option<(u64, usize)> = None;
    for w in windows {
        let Some(fence) = w.fence else { continue };
        if let Some((top, client)) = highest
            && fence <= top
        {
            found.push(format!(
                "client {} was granted token {fence} after client {client} held {top}",
                w.client
            ));
        }
        if highest.is_none_or(|(top, _)| fence > top) {
            highest = Some((fence, w.client));
        }
    }
    found
}

/// The checker: every pair of windows that overlap (one line per window that
/// starts before an earlier one has ended). Windows that merely touch
/// (`a.end == b.start`) do not overlap.
fn overlaps(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let mut found = Vec::new();
    let mut latest: Option<Window> = None;
    for w in windows {
        if let Some(l) = &latest
            && w.start < l.end
        {
            found.push(format!(
                "client {} held [{:.3}, {:.3}) ms while client {} held [{:.3}, {:.3}) ms",
                w.client,
                ms(w.start),
                ms(w.end),
                l.client,
                ms(l.start),
                ms(l.end)
            ));
        }
        if latest.as_ref().is_none_or(|l| w.end > l.end) {
            latest = Some(w);
        }
    }
    found
}

/// The read/write checker: every pair of windows of which at least one is
/// a write (any window but a read lock's) and that overlap, one line per
/// pair. Read windows may overlap each other; windows that merely touch do
/// not overlap.
fn rw_conflicts(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let kind = |w: &Window| if w.read { "read" } else { "write" };
    let mut found = Vec::new();
    for (i, a) in windows.iter().enumerate() {
        // Sorted by start: the windows that start before `a` ends.
        for b in windows[i + 1..].iter().take_while(|b| b.start < a.end) {
            if a.read && b.read {
                continue;
            }
            found.push(format!(
                "client {} held a {} lock [{:.3}, {:.3}) ms while client {} held a {} lock [{:.3}, {:.3}) ms",
                b.client,
                kind(b),
                ms(b.start),
                ms(b.end),
                a.client,
                kind(a),
                ms(a.start),
                ms(a.end)
            ));
        }
    }
    found
}

/// Pairs of read windows that overlap: readers that really shared.
fn shared_reads(windows: &[Window]) -> u64 {
    let mut reads: Vec<&Window> = windows.iter().filter(|w| w.read).collect();
    reads.sort_by_key(|w| (w.start, w.end));
    let mut shared = 0;
    for (i, a) in reads.iter().enumerate() {
        shared += reads[i + 1..]
            .iter()
            .take_while(|b| b.start < a.end)
            .count() as u64;
    }
    shared
}

/// The permit checker: every instant at which more than `limit` windows
/// were open (one line per window that opens past the limit). Windows that
/// merely touch do not overlap.
fn over_limit(windows: Vec<Window>, limit: usize) -> Vec<String> {
    // At one instant: the ends of the windows that end there, then each
    // empty window (`[t, t)`, released as soon as granted) opening and
    // closing at once, counted with the windows already open (as `overlaps`
    // counts it), then the starts.
    let mut events: Vec<(Duration, u8, usize, bool, usize)> = windows
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            let rank = if w.end > w.start { [2, 0] } else { [1, 1] };
            [
                (w.start, rank[0], i, true, w.client),
                (w.end.max(w.start), rank[1], i, false, w.client),
            ]
        })
        .collect();
    events.sort_by_key(|&(t, rank, i, opens, _)| (t, rank, i, !opens));
    let mut open = 0usize;
    let mut found = Vec::new();
    for (t, _, _, opens, client) in events {
        if opens {
            open += 1;
            if open > limit {
                found.push(format!(
                    "client {client} made {open} valid holders at {:.3} ms (limit {limit})",
                    t.as_secs_f64() * 1e3
                ));
            }
        } else {
            open -= 1;
        }
    }
    found
}

/// What the clients of one schedule did, counted as they go.
#[derive(Debug, Default)]
struct Stats {
    rounds: AtomicU64,
    extends: AtomicU64,
    cancelled: AtomicU64,
    nested: AtomicU64,
    waited: AtomicU64,
    /// Reentrant holders that, still valid after giving an inner hold back,
    /// found fewer than a quorum of nodes counting their outer hold.
    hold_losses: Mutex<Vec<String>>,
}

/// What one schedule did and what the checker found.
#[derive(Debug, Default)]
struct Outcome {
    rounds: u64,
    grants: u64,
    extends: u64,
    cancelled: u64,
    nested: u64,
    waited: u64,
    faults: u64,
    lost_replies: u64,
    messages: u64,
    overlaps: Vec<String>,
    fence_regressions: Vec<String>,
    /// Granted acquires that never reached a node, with no crash to excuse it.
    undelivered: Vec<String>,
    /// Links that had more calls in flight than the bound.
    unbounded: Vec<String>,
    /// Valid reentrant holds a quorum no longer counted.
    hold_losses: Vec<String>,
    most_in_flight: usize,
    /// Release notices the clients' listeners heard.
    notices: u64,
    /// Leases whose work was held for longer than one TTL (kept by
    /// extensions).
    leases_past_ttl: u64,
    /// Read and write locks granted (read/write schedules).
    read_grants: u64,
    write_grants: u64,
    /// Pairs of read windows that overlapped.
    shared_reads: u64,
    kind: Option<Kind>,
    leftovers: usize,
    digest: u64,
    virtual_time: Duration,
}

impl Outcome {
    fn violated(&self) -> bool {
        !self.overlaps.is_empty()
            || !self.fence_regressions.is_empty()
            || !self.undelivered.is_empty()
            || !self.unbounded.is_empty()
            || !self.hold_losses.is_empty()
            || self.leftovers > 0
    }
}

fn run_schedule(seed: u64, control: Control, verbose: bool) -> (Outcome, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(simulate(seed, control, verbose))
}

async fn simulate(seed: u64, control: Control, verbose: bool) -> (Outcome, String) {
    let mut rng = StdRng::seed_from_u64(seed ^ control.salt());
    let plan = plan(&mut rng, control);
    let world = World::new(rng, plan.net, verbose);
    world.note("plan", seed, 0, || format!("{plan:?}"));

    let nodes: Vec<Arc<SimNode>> = plan
        .rates
        .iter()
        .enumerate()
        .map(|(i, &rate)| {
            let node = SimNode::new(i, rate);
            node.double_release
                .store(control == Control::DoubleRelease, Ordering::Relaxed);
            node.partial_many
                .store(control == Control::PartialMany, Ordering::Relaxed);
            node.writer_ignores_readers
                .store(control == Control::WriterIgnoresReaders, Ordering::Relaxed);
            node
        })
        .collect();
    let windows = Arc::new(Mutex::new(Vec::<Window>::new()));
    let stats = Arc::new(Stats::default());
    let ttl = Duration::from_millis(plan.ttl_ms);

    let mut clients = Vec::new();
    let mut links = Vec::new();
    let shared_nodes = Arc::new(nodes.clone());
    for c in 0..plan.clients {
        let client_links: Vec<Arc<SimLink>> = nodes
            .iter()
            .map(|n| SimLink::new(c, n.clone(), world.clone()))
            .collect();
        links.extend(client_links.iter().cloned());
        let mut builder = Redlock::builder()
            .custom_nodes(client_links.into_iter().map(|l| l as Arc<dyn Node>))
            .max_in_flight(plan.max_in_flight)
            .drift_factor(plan.factor)
            // One round per call (retries come from the client loop below,
            // drawn from the seed); waiters pause up to `max_pause`, drawn
            // from a generator seeded from the schedule's.
            .retry(Retry::new(1, plan.max_pause))
            .jitter_seed(world.with_rng(|r| r.random()));
        if let Some(t) = plan.node_timeout {
            builder = builder.node_timeout(t);
        }
        let redlock = builder.build().await.expect("build over simulated nodes");
        clients.push(tokio::spawn(client(
            c,
            redlock,
            world.clone(),
            plan.clone(),
            windows.clone(),
            stats.clone(),
            shared_nodes.clone(),
        )));
    }
    let mut injectors = Vec::new();
    for node in &nodes {
        injectors.push(tokio::spawn(faults(
            node.clone(),
            world.clone(),
            plan.faults[node.index],
            plan.wipe,
            plan.forget_counters,
            ttl,
        )));
    }
    for c in clients {
        c.await.expect("client task");
    }
    let mut faults_injected = 0;
    for f in injectors {
        faults_injected += f.await.expect("fault task");
    }
    // Every node is up and thawed now. Let queued operations and background
    // releases land: longer than any message delay and node timeout, far
    // shorter than the background clean-up bound (the TTL) matters here,
    // since operations on a link are applied whether or not anyone waits.
    tokio::time::sleep(Duration::from_micros(4 * plan.net.slow_us) + 2 * ttl).await;

    let mut out = Outcome {
        rounds: stats.rounds.load(Ordering::Relaxed),
        extends: stats.extends.load(Ordering::Relaxed),
        cancelled: stats.cancelled.load(Ordering::Relaxed),
        nested: stats.nested.load(Ordering::Relaxed),
        waited: stats.waited.load(Ordering::Relaxed),
        hold_losses: std::mem::take(&mut *stats.hold_losses.lock().unwrap()),
        faults: faults_injected,
        virtual_time: world.elapsed(),
        ..Outcome::default()
    };
    let windows = windows.lock().unwrap().clone();
    out.grants = windows.len() as u64;
    if plan.kind == Kind::Lease {
        out.leases_past_ttl = windows.iter().filter(|w| w.end - w.start > ttl).count() as u64;
    }
    out.kind = Some(plan.kind);
    out.fence_regressions = fence_regressions(windows.clone());
    // (A reentrant lock's token is its owner; its holds are not public.)
    let granted: Vec<(String, u32)> = windows
        .iter()
        .filter(|w| !w.token.is_empty())
        .map(|w| (w.token.clone(), w.extended))
        .collect();
    for node in &nodes {
        for token in node.undelivered(&granted) {
            out.undelivered.push(format!(
                "the granted acquire {token}, or one of its extensions, never reached node {}",
                node.index + 1
            ));
        }
    }
    // Bounded work: no link ever had more calls in flight than the bound.
    let most = links.iter().map(|l| l.max_in_flight()).max().unwrap_or(0);
    out.most_in_flight = most;
    if most > plan.checked_in_flight {
        out.unbounded.push(format!(
            "a link had {most} calls in flight, above the bound {}",
            plan.checked_in_flight
        ));
    }
    if plan.kind == Kind::ReadWrite {
        out.read_grants = windows.iter().filter(|w| w.read).count() as u64;
        out.write_grants = out.grants - out.read_grants;
        out.shared_reads = shared_reads(&windows);
    }
    out.overlaps = match plan.kind {
        Kind::Semaphore => over_limit(windows, PERMITS as usize),
        Kind::ReadWrite => rw_conflicts(windows),
        _ => overlaps(windows),
    };
    out.leftovers = nodes.iter().map(|n| n.leftovers()).sum();
    let counts = world.counts();
    out.lost_replies = counts.lost_replies;
    out.notices = counts.notices;
    out.messages = counts.messages;
    out.digest = world.digest();
    (out, world.take_trace())
}

/// One contending client: rounds of `try_lock`, holding for a random time
/// (sometimes past the validity, sometimes extending), then releasing or
/// dropping the lock; a random pause after a refusal.
async fn client(
    id: usize,
    redlock: Redlock,
    world: Arc<World>,
    plan: Plan,
    windows: Arc<Mutex<Vec<Window>>>,
    stats: Arc<Stats>,
    nodes: Arc<Vec<Arc<SimNode>>>,
) {
    let Stats {
        rounds,
        extends,
        cancelled,
        nested,
        waited,
        hold_losses,
    } = &*stats;
    let ttl = Duration::from_millis(plan.ttl_ms);
    let origin = Instant::now() - world.elapsed();
    for _ in 0..plan.rounds {
        rounds.fetch_add(1, Ordering::Relaxed);
        if plan.kind == Kind::Lease {
            lease_round(id, &redlock, &world, &plan, &windows, origin, cancelled).await;
            continue;
        }
        let owner = format!("owner-{id}");
        let waits = world.chance(0.5);
        let max_wait = world.between(Duration::ZERO, ttl * 2);
        let write = plan.kind == Kind::ReadWrite && world.chance(WRITE_P);
        if waits && matches!(plan.kind, Kind::Plain | Kind::Semaphore | Kind::ReadWrite) {
            waited.fetch_add(1, Ordering::Relaxed);
        }
        let acquiring = async {
            match plan.kind {
                // Half the time a waiter: rounds until granted or out of time.
                Kind::Plain if waits => {
                    redlock
                        .lock_with(RESOURCE, ttl, &redquorum::LockOptions::new().wait(max_wait))
                        .await
                }
                Kind::Plain => redlock.try_lock(RESOURCE, ttl).await,
                Kind::Fenced => redlock.lock_fenced(RESOURCE, ttl).await,
                Kind::Reentrant => redlock.lock_reentrant(RESOURCE, ttl, &owner).await,
                // Odd clients take both resources at once, even ones the
                // first alone: the sets overlap.
                Kind::Many if id % 2 == 1 => redlock.lock_many(&[RESOURCE, OTHER], ttl).await,
                Kind::Many | Kind::Lease => redlock.try_lock(RESOURCE, ttl).await,
                Kind::Semaphore => {
                    let semaphore = redlock
                        .semaphore(RESOURCE, plan.permits)
                        .expect("semaphore");
                    let permit = if waits {
                        let wait = redquorum::LockOptions::new().wait(max_wait);
                        semaphore.acquire_with(ttl, &wait).await
                    } else {
                        semaphore.try_acquire(ttl).await
                    };
                    permit.map(redquorum::Permit::into_lock)
                }
                // Half the time a waiter, as for plain locks.
                Kind::ReadWrite => {
                    let wait = LockOptions::new().wait(max_wait);
                    match (write, waits) {
                        (true, true) => redlock.write_lock_with(RESOURCE, ttl, &wait).await,
                        (true, false) => redlock.try_write_lock(RESOURCE, ttl).await,
                        (false, true) => redlock.read_lock_with(RESOURCE, ttl, &wait).await,
                        (false, false) => redlock.try_read_lock(RESOURCE, ttl).await,
                    }
                }
            }
        };
        let acquired = if world.chance(plan.cancel_p) {
            // Dropped at a random point: whatever it set must be released.
            let patience = world.between(Duration::ZERO, ttl / 2);
            match tokio::time::timeout(patience, acquiring).await {
                Ok(acquired) => acquired,
                Err(_) => {
                    cancelled.fetch_add(1, Ordering::Relaxed);
                    world.note("cancelled", id as u64, 0, || {
                        format!("client {id}: acquire")
                    });
                    continue;
                }
            }
        } else {
            acquiring.await
        };
        match acquired {
            Ok(mut lock) => {
                let start = Instant::now();
                let validity = Instant::from_std(lock.deadline()) - start;
                world.note("granted", id as u64, 0, || {
                    format!("client {id}: valid for {validity:?}")
                });
                let hold = world.between(Duration::ZERO, validity * 5 / 4);
                let mut extended = 0;
                if plan.kind == Kind::Reentrant && world.chance(plan.nest_p) {
                    // A second hold inside the first, given back before it.
                    let first = world.between(Duration::ZERO, hold);
                    tokio::time::sleep(first).await;
                    if let Ok(inner) = redlock.lock_reentrant(RESOURCE, ttl, &owner).await {
                        nested.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(world.between(Duration::ZERO, hold / 4)).await;
                        let _ = inner.release().await;
                        // The outer hold must still count on a quorum.
                        let key = support::lock_key(RESOURCE);
                        let counting = nodes.iter().filter(|n| n.holds(&key, &owner) > 0).count();
                        if lock.is_valid() && counting < NODES / 2 + 1 {
                            hold_losses.lock().unwrap().push(format!(
                                "client {id}: outer hold still valid, counted on {counting} nodes"
                            ));
                        }
                    }
                    tokio::time::sleep(hold.saturating_sub(first)).await;
                } else if world.chance(0.3) {
                    let first = world.between(Duration::ZERO, hold);
                    tokio::time::sleep(first).await;
                    if lock.is_valid() {
                        let new_ttl = world.between(ttl / 2, ttl * 2);
                        let r = lock.extend(new_ttl).await;
                        if r.is_ok() {
                            extends.fetch_add(1, Ordering::Relaxed);
                            extended += 1;
                        }
                        world.note("extended", id as u64, u64::from(r.is_ok()), || {
                            format!("client {id}: {r:?}")
                        });
                    }
                    tokio::time::sleep(hold.saturating_sub(first)).await;
                } else {
                    tokio::time::sleep(hold).await;
                }
                let end = Instant::now().min(Instant::from_std(lock.deadline()));
                windows.lock().unwrap().push(Window {
                    client: id,
                    start: start - origin,
                    end: end - origin,
                    fence: lock.fence(),
                    token: if plan.kind == Kind::Reentrant {
                        String::new()
                    } else {
                        lock.token().to_owned()
                    },
                    extended,
                    read: plan.kind == Kind::ReadWrite && !write,
                });
                world.note("released", id as u64, 0, || format!("client {id}"));
                if world.chance(plan.cancel_p) {
                    // A release dropped midway happens all the same.
                    let patience = world.between(Duration::ZERO, ttl / 4);
                    let _ = tokio::time::timeout(patience, lock.release()).await;
                } else if world.chance(0.8) {
                    let _ = lock.release().await;
                } else {
                    drop(lock); // released in the background
                }
            }
            Err(e) => {
                assert!(!matches!(e, LockError::Config(_)), "{e}");
                world.note("refused", id as u64, 0, || format!("client {id}: {e}"));
                tokio::time::sleep(world.between(Duration::ZERO, plan.max_pause)).await;
            }
        }
    }
}

/// One lease under `run_with`: work in steps, each recorded as held (the
/// work is only polled while the lease is valid), for up to three TTLs;
/// sometimes the whole run is dropped midway.
async fn lease_round(
    id: usize,
    redlock: &Redlock,
    world: &Arc<World>,
    plan: &Plan,
    windows: &Arc<Mutex<Vec<Window>>>,
    origin: Instant,
    cancelled: &AtomicU64,
) {
    let ttl = Duration::from_millis(plan.ttl_ms);
    let steps = world.with_rng(|r| r.random_range(1..=12u32));
    let options = LockOptions::new().extend_every(ttl / 3);
    let run = redlock.run_with(RESOURCE, ttl, &options, |lease| {
        let (world, windows) = (world.clone(), windows.clone());
        async move {
            let start = Instant::now() - origin;
            let slot = {
                let mut w = windows.lock().unwrap();
                w.push(Window {
                    client: id,
                    start,
                    end: start,
                    fence: None,
                    token: lease.token().to_owned(),
                    extended: 0,
                    read: false,
                });
                w.len() - 1
            };
            world.note("lease", id as u64, 0, || {
                format!("client {id}: lease work starts")
            });
            for _ in 0..steps {
                tokio::time::sleep(world.between(Duration::ZERO, ttl / 4)).await;
                // Polled now, so the lease is valid now.
                windows.lock().unwrap()[slot].end = Instant::now() - origin;
            }
        }
    });
    let outcome = if world.chance(plan.cancel_p) {
        let patience = world.between(Duration::ZERO, ttl * 2);
        match tokio::time::timeout(patience, run).await {
            Ok(outcome) => Some(outcome),
            Err(_) => {
                cancelled.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    } else {
        Some(run.await)
    };
    world.note("lease-ended", id as u64, 0, || {
        format!("client {id}: {outcome:?}")
    });
    if let Some(Err(e)) = outcome {
        assert!(!matches!(e, LockError::Config(_)), "{e}");
        tokio::time::sleep(world.between(Duration::ZERO, plan.max_pause)).await;
    }
}

/// Faults on one node, one after another: freezes, and restarts with
/// (`wipe` false) or without their keys. Returns how many were injected; the
/// node is up and thawed when it returns.
async fn faults(
    node: Arc<SimNode>,
    world: Arc<World>,
    count: u32,
    wipe: bool,
    forget_counters: bool,
    ttl: Duration,
) -> u64 {
    let n = node.index as u64;
    for _ in 0..count {
        // The negative control restarts nodes empty, often and quickly: within
        // the TTL of the keys they lose.
        let quick = wipe || forget_counters;
        let idle = if quick { ttl } else { ttl * 4 };
        tokio::time::sleep(world.between(Duration::ZERO, idle)).await;
        if !quick && world.chance(0.5) {
            let d = world.between(Duration::from_millis(1), ttl * 3);
            world.note("freeze", n, d.as_micros() as u64, || {
                format!("node {} for {d:?}", n + 1)
            });
            node.freeze();
            tokio::time::sleep(d).await;
            node.thaw();
            world.note("thaw", n, 0, || format!("node {}", n + 1));
        } else {
            let d = world.between(Duration::ZERO, if quick { ttl / 4 } else { ttl * 2 });
            world.note("crash", n, u64::from(wipe), || {
                format!("node {} down for {d:?}, wiped: {wipe}", n + 1)
            });
            node.crash(wipe);
            if forget_counters {
                node.forget_counters();
            }
            tokio::time::sleep(d).await;
            node.start();
            world.note("start", n, 0, || format!("node {}", n + 1));
        }
    }
    u64::from(count)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

fn replay_hint(seed: u64, control: Control) -> String {
    let control = if control == Control::None {
        String::new()
    } else {
        format!(" REDQUORUM_SIM_CONTROL={}", control.name())
    };
    format!(
        "replay: REDQUORUM_SIM_SEED={seed}{control} cargo test --test simulation \
         simulated_schedules_never_overlap -- --nocapture"
    )
}

/// Totals over many schedules.
#[derive(Debug, Default)]
struct Totals {
    schedules: u64,
    rounds: u64,
    grants: u64,
    extends: u64,
    cancelled: u64,
    nested: u64,
    waited: u64,
    reentrant_schedules: u64,
    many_schedules: u64,
    lease_schedules: u64,
    semaphore_schedules: u64,
    rw_schedules: u64,
    read_grants: u64,
    write_grants: u64,
    shared_reads: u64,
    leases_past_ttl: u64,
    most_in_flight: usize,
    faults: u64,
    lost_replies: u64,
    messages: u64,
    notices: u64,
    overlaps: u64,
    fence_regressions: u64,
    undelivered: u64,
    fenced_schedules: u64,
    leftovers: u64,
    virtual_time: Duration,
    /// (seed, first overlap or leftover count) of failing schedules.
    failures: Vec<(u64, String)>,
}

/// Runs seeds `base..` on every core until `count` schedules are done and
/// `until` (if any) has passed, or `stop_at_first` failure.
fn run_many(base: u64, count: u64, until: Option<std::time::Instant>) -> Totals {
    let next = AtomicU64::new(0);
    let totals = Mutex::new(Totals::default());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let more_time = until.is_some_and(|u| std::time::Instant::now() < u);
                    if i >= count && !more_time {
                        return;
                    }
                    let seed = base + i;
                    // A panic inside a schedule (a checker's or the code's)
                    // names its seed, so that it can be replayed.
                    let run = std::panic::catch_unwind(|| run_schedule(seed, Control::None, false));
                    let Ok((out, _)) = run else {
                        panic!(
                            "schedule {seed} panicked: {}",
                            replay_hint(seed, Control::None)
                        );
                    };
                    let mut t = totals.lock().unwrap();
                    t.schedules += 1;
                    t.rounds += out.rounds;
                    t.grants += out.grants;
                    t.extends += out.extends;
                    t.cancelled += out.cancelled;
                    t.faults += out.faults;
                    t.lost_replies += out.lost_replies;
                    t.messages += out.messages;
                    t.notices += out.notices;
                    t.overlaps += out.overlaps.len() as u64;
                    t.fence_regressions += out.fence_regressions.len() as u64;
                    t.undelivered += out.undelivered.len() as u64;
                    t.fenced_schedules += u64::from(out.kind == Some(Kind::Fenced));
                    t.reentrant_schedules += u64::from(out.kind == Some(Kind::Reentrant));
                    t.many_schedules += u64::from(out.kind == Some(Kind::Many));
                    t.lease_schedules += u64::from(out.kind == Some(Kind::Lease));
                    t.semaphore_schedules += u64::from(out.kind == Some(Kind::Semaphore));
                    t.rw_schedules += u64::from(out.kind == Some(Kind::ReadWrite));
                    t.read_grants += out.read_grants;
                    t.write_grants += out.write_grants;
                    t.shared_reads += out.shared_reads;
                    t.leases_past_ttl += out.leases_past_ttl;
                    t.most_in_flight = t.most_in_flight.max(out.most_in_flight);
                    t.nested += out.nested;
                    t.waited += out.waited;
                    t.leftovers += out.leftovers as u64;
                    t.virtual_time += out.virtual_time;
                    if out.violated() {
                        let what = out
                            .overlaps
                            .first()
                            .or(out.fence_regressions.first())
                            .or(out.undelivered.first())
                            .or(out.unbounded.first())
                            .or(out.hold_losses.first())
                            .cloned()
                            .unwrap_or_else(|| format!("{} key(s) never released", out.leftovers));
                        t.failures.push((seed, what));
                    }
                }
            });
        }
    });
    let mut t = totals.into_inner().unwrap();
    t.failures.sort();
    t
}

/// The main run: thousands of seeded schedules, none with an overlap or a
/// leftover.
#[test]
fn simulated_schedules_never_overlap() {
    if let Some(seed) = env_u64("REDQUORUM_SIM_SEED") {
        let control = Control::parse(&std::env::var("REDQUORUM_SIM_CONTROL").unwrap_or_default());
        let (out, trace) = run_schedule(seed, control, true);
        println!("{trace}");
        println!("seed {seed} ({}): {out:#?}", control.name());
        if control == Control::None {
            assert!(!out.violated(), "seed {seed}: {out:#?}");
        }
        return;
    }
    let count = env_u64("REDQUORUM_SIM_SCHEDULES").unwrap_or(10_000);
    let base = env_u64("REDQUORUM_SIM_BASE_SEED").unwrap_or(0);
    let until = support::soak_duration().map(|d| std::time::Instant::now() + d);
    let started = std::time::Instant::now();
    let t = run_many(base, count, until);
    println!(
        "simulation: {} schedules (seeds {base}..) in {:.1?} wall, {:.1?} virtual; \
         {} rounds, {} grants, {} extends, {} waits, {} release notices heard, {} acquires cancelled, {} faults injected, {} messages, {} replies lost; \
         {} overlaps, {} leftover keys; {} schedules fenced, {} token regressions, {} undelivered grants; {} schedules reentrant, \
         {} nested holds; {} schedules multi-resource; {} schedules leases ({} held past one TTL); {} schedules semaphores (2 permits); \
         {} schedules read/write ({} read and {} write grants, {} pairs of readers sharing); at most {} calls in flight on a link; \
         {:.0} schedules/s",
        t.schedules,
        started.elapsed(),
        t.virtual_time,
        t.rounds,
        t.grants,
        t.extends,
        t.waited,
        t.notices,
        t.cancelled,
        t.faults,
        t.messages,
        t.lost_replies,
        t.overlaps,
        t.leftovers,
        t.fenced_schedules,
        t.fence_regressions,
        t.undelivered,
        t.reentrant_schedules,
        t.nested,
        t.many_schedules,
        t.lease_schedules,
        t.leases_past_ttl,
        t.semaphore_schedules,
        t.rw_schedules,
        t.read_grants,
        t.write_grants,
        t.shared_reads,
        t.most_in_flight,
        t.schedules as f64 / started.elapsed().as_secs_f64()
    );
    if let Some((seed, what)) = t.failures.first() {
        panic!(
            "{} of {} schedules failed; first: seed {seed}: {what}\n{}",
            t.failures.len(),
            t.schedules,
            replay_hint(*seed, Control::None)
        );
    }
    assert!(t.schedules >= count);
    // The schedules must exercise something: most rounds contend, and the
    // faults and losses happen.
    assert!(t.grants > t.schedules, "too few grants: {t:?}");
    assert!(t.faults > t.schedules && t.lost_replies > 0, "{t:?}");
    assert!(
        t.fenced_schedules > t.schedules / 8,
        "too few fenced schedules: {t:?}"
    );
    assert!(
        t.reentrant_schedules > t.schedules / 8 && t.nested > 0,
        "{t:?}"
    );
    assert!(t.many_schedules > t.schedules / 8, "{t:?}");
    assert!(t.lease_schedules > t.schedules / 8, "{t:?}");
    assert!(t.semaphore_schedules > t.schedules / 8, "{t:?}");
    assert!(
        t.rw_schedules > t.schedules / 8 && t.write_grants > 0,
        "{t:?}"
    );
    assert!(t.shared_reads > 0, "no two readers ever shared: {t:?}");
    assert!(t.leases_past_ttl > 0, "no lease outlived its TTL: {t:?}");
    assert!(t.cancelled > 0, "no acquire was cancelled: {t:?}");
    assert!(t.waited > 0, "no client waited: {t:?}");
    assert!(t.notices > 0, "no waiter heard a release: {t:?}");
}

/// Runs `k` of a negative control's schedules and asserts that `checker`
/// (the overlaps, or the token regressions, an outcome shows) catches the
/// broken assumption in at least one of them.
fn caught_within(control: Control, k: u64, checker: fn(&Outcome) -> &[String]) {
    let started = std::time::Instant::now();
    let mut caught = Vec::new();
    for seed in 0..k {
        let (out, _) = run_schedule(seed, control, false);
        if let Some(first) = checker(&out).first() {
            caught.push((seed, first.clone()));
        }
    }
    let Some((seed, what)) = caught.first() else {
        panic!(
            "negative control {} went unnoticed in {k} schedules: the checker cannot fail",
            control.name()
        );
    };
    println!(
        "control {}: caught in {} of {k} schedules ({:.1?}); first, seed {seed}: {what}\n{}",
        control.name(),
        caught.len(),
        started.elapsed(),
        replay_hint(*seed, control)
    );
}

/// Node clocks 1.5× fast while the client allows for 1 % drift: keys expire
/// while their holder still counts on them, and the checker must see two
/// holders at once.
#[test]
fn control_clocks_beyond_the_drift_bound_are_caught() {
    caught_within(Control::FastClocks, 50, |o| &o.overlaps);
}

/// Nodes restarted without their keys within the TTL: a second client wins a
/// quorum while the first still holds, and the checker must see it.
#[test]
fn control_empty_restarts_within_the_ttl_are_caught() {
    caught_within(Control::EmptyRestarts, 50, |o| &o.overlaps);
}

/// Fencing counters lost on restart (lock keys kept): exclusion holds, but a
/// later holder can be granted a token no larger than an earlier one's, and
/// the fencing checker must see it.
#[test]
fn control_lost_fence_counters_are_caught() {
    caught_within(Control::LostCounters, 100, |o| &o.fence_regressions);
}

/// The same seed gives the same schedule, event for event (so a printed
/// seed replays the failure it came from).
#[test]
fn a_seed_replays_exactly() {
    for seed in 0..20 {
        let (a, _) = run_schedule(seed, Control::None, false);
        let (b, _) = run_schedule(seed, Control::None, false);
        assert_eq!(a.digest, b.digest, "seed {seed} did not replay");
        assert_eq!(
            (a.rounds, a.grants, a.faults),
            (b.rounds, b.grants, b.faults)
        );
    }
    // And different seeds give different schedules.
    let (a, _) = run_schedule(1, Control::None, false);
    let (b, _) = run_schedule(2, Control::None, false);
    assert_ne!(a.digest, b.digest);
}

/// Reentrant releases that give back two holds: an inner release frees the
/// outer hold too — the hold checker must see a valid hold a quorum no
/// longer counts — and another owner gets in, which the overlap checker
/// must see.
#[test]
fn control_double_reentrant_releases_are_caught() {
    caught_within(Control::DoubleRelease, 100, |o| &o.overlaps);
    caught_within(Control::DoubleRelease, 100, |o| &o.hold_losses);
}

/// Multi-resource acquires that are not all-or-nothing: a client holding
/// both resources and one holding the first alone both win, and the overlap
/// checker must see it.
#[test]
fn control_partial_multi_resource_acquires_are_caught() {
    caught_within(Control::PartialMany, 100, |o| &o.overlaps);
}

/// A bound the checker holds the links to that is below the client's: the
/// in-flight checker must see it exceeded.
#[test]
fn control_an_unchecked_bound_is_caught() {
    caught_within(Control::LooseBound, 20, |o| &o.unbounded);
}

/// Semaphore clients that open one permit more than the fleet agreed on:
/// the permit checker must see three valid holders at once.
#[test]
fn control_an_extra_permit_is_caught() {
    caught_within(Control::ExtraPermit, 40, |o| &o.overlaps);
}

#[test]
fn permit_checker_counts_open_windows_and_only_those() {
    let w = Window::exclusive;
    // Two at once, touching a third: within a limit of 2.
    assert!(over_limit(vec![w(0, 0, 10), w(1, 5, 15), w(2, 10, 20)], 2).is_empty());
    // Three at once at 6 ms.
    assert_eq!(
        over_limit(vec![w(0, 0, 10), w(1, 5, 15), w(2, 6, 20)], 2).len(),
        1
    );
    // An empty window (released as soon as granted) alone, or touching
    // others, is within the limit; inside two others it is a third holder.
    assert!(over_limit(vec![w(0, 5, 5)], 2).is_empty());
    assert!(over_limit(vec![w(0, 0, 5), w(1, 5, 5), w(2, 5, 9)], 1).is_empty());
    assert_eq!(over_limit(vec![w(0, 0, 9), w(1, 5, 5)], 1).len(), 1);
    assert!(over_limit(vec![w(0, 5, 5), w(1, 5, 5)], 1).is_empty());
    assert_eq!(
        over_limit(vec![w(0, 0, 10), w(1, 2, 10), w(2, 5, 5)], 2).len(),
        1
    );
}

/// A write acquire that ignores live readers: a writer gets in while
/// readers still hold valid read locks, and the read/write checker must see
/// it.
#[test]
fn control_a_writer_ignoring_readers_is_caught() {
    caught_within(Control::WriterIgnoresReaders, 40, |o| &o.overlaps);
}

/// The read/write checker: readers together and windows that touch are
/// fine; a writer overlapping a reader or a writer is found, once per pair,
/// also when the reader it overlaps started before a shorter one.
#[test]
fn rw_checker_finds_conflicts_and_only_conflicts() {
    let r = |client, start, end| Window {
        read: true,
        ..Window::exclusive(client, start, end)
    };
    let w = Window::exclusive;
    assert!(
        rw_conflicts(vec![
            r(0, 0, 10),
            r(1, 5, 15),
            w(2, 15, 20),
            r(3, 20, 30),
            r(4, 25, 40),
            w(5, 40, 50),
            w(6, 50, 60),
        ])
        .is_empty()
    );
    assert_eq!(rw_conflicts(vec![w(0, 0, 10), r(1, 9, 20)]).len(), 1);
    assert_eq!(rw_conflicts(vec![r(1, 9, 20), w(0, 0, 10)]).len(), 1);
    assert_eq!(rw_conflicts(vec![r(0, 0, 10), w(1, 9, 20)]).len(), 1);
    assert_eq!(rw_conflicts(vec![w(0, 0, 10), w(1, 5, 6)]).len(), 1);
    // A writer over two readers that share: two conflicts, not three.
    assert_eq!(
        rw_conflicts(vec![w(0, 0, 100), r(1, 10, 50), r(2, 20, 60)]).len(),
        2
    );
    // The writer overlaps the first (long) reader, not the second.
    assert_eq!(
        rw_conflicts(vec![r(0, 0, 100), r(1, 10, 20), w(2, 30, 40)]).len(),
        1
    );
    assert_eq!(shared_reads(&[r(0, 0, 100), r(1, 10, 20), w(2, 30, 40)]), 1);
}

/// A transport that loses requests: granted acquires that never reach a
/// healthy node, which the delivery checker must see.
#[test]
fn control_lost_requests_are_caught() {
    caught_within(Control::LostRequests, 50, |o| &o.undelivered);
}

/// The fencing checker: a token not above every earlier holder's is found,
/// windows without a token are ignored.
#[test]
fn fence_checker_finds_regressions_and_only_those() {
    let w = |start: u64, fence: Option<u64>| Window {
        fence,
        ..Window::exclusive(start as usize, start, start + 1)
    };
    assert!(fence_regressions(vec![w(0, Some(1)), w(5, Some(2)), w(9, Some(7))]).is_empty());
    assert!(fence_regressions(vec![w(5, Some(2)), w(0, Some(1)), w(3, None)]).is_empty());
    assert_eq!(
        fence_regressions(vec![w(0, Some(3)), w(5, Some(3))]).len(),
        1
    );
    assert_eq!(
        fence_regressions(vec![w(0, Some(5)), w(1, Some(9)), w(2, Some(6))]).len(),
        1
    );
}

/// The checker itself: nested, staggered and chained-through-a-long-window
/// overlaps are found; windows that only touch are not.
#[test]
fn checker_finds_overlaps_and_only_overlaps() {
    let w = Window::exclusive;
    assert!(overlaps(vec![w(0, 0, 10), w(1, 10, 20), w(2, 20, 30)]).is_empty());
    assert!(overlaps(vec![w(1, 10, 20), w(0, 0, 10)]).is_empty());
    assert_eq!(overlaps(vec![w(0, 0, 10), w(1, 9, 20)]).len(), 1);
    assert_eq!(overlaps(vec![w(0, 0, 30), w(1, 5, 10)]).len(), 1);
    // The third window overlaps the first (long) one, not the second.
    assert_eq!(
        overlaps(vec![w(0, 0, 100), w(1, 100, 100), w(2, 50, 60)]).len(),
        1
    );
    assert_eq!(
        overlaps(vec![w(0, 0, 100), w(1, 10, 20), w(2, 30, 40)]).len(),
        2
    );
}

/// How long after a release a waiter on another client holds the lock, on
/// five healthy simulated nodes (1 ms messages), the holder's TTL 10 s.
/// With `deaf` nodes (a negative control) subscriptions are confirmed and no
/// release is ever reported.
fn hand_off_after_release(deaf: bool) -> Duration {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let net = support::sim::Net {
            fast_us: 1_000,
            slow_p: 0.0,
            slow_us: 1_000,
            loss_p: 0.0,
            request_loss_p: 0.0,
        };
        let world = World::new(StdRng::seed_from_u64(7), net, false);
        let nodes: Vec<Arc<SimNode>> = (0..NODES)
            .map(|i| {
                let node = SimNode::new(i, 1.0);
                node.deaf.store(deaf, Ordering::Relaxed);
                node
            })
            .collect();
        let client = |c: usize| {
            let links: Vec<Arc<dyn Node>> = nodes
                .iter()
                .map(|n| SimLink::new(c, n.clone(), world.clone()) as Arc<dyn Node>)
                .collect();
            Redlock::builder()
                .custom_nodes(links)
                .retry(Retry::new(1, Duration::from_secs(5)))
                .jitter_seed(c as u64)
                .build()
        };
        let holder = client(0).await.expect("holder");
        let waiter = client(1).await.expect("waiter");
        let ttl = Duration::from_secs(10);
        let lock = holder.try_lock(RESOURCE, ttl).await.expect("first lock");
        let waiting = tokio::spawn(async move {
            let lock = waiter
                .lock_with(
                    RESOURCE,
                    ttl,
                    &redquorum::LockOptions::new().wait(Duration::from_secs(30)),
                )
                .await;
            (lock.map(|l| l.token().to_owned()), Instant::now())
        });
        // Virtual time: long enough for the waiter's first round and its
        // subscriptions on every node (a few 1 ms round trips).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "the waiter got a held lock");
        let released = Instant::now();
        lock.release().await.expect("release");
        let (got, at) = waiting.await.expect("waiter task");
        got.expect("the waiter's lock");
        at - released
    })
}

/// The wake-up checker: a release hands the lock to a waiter within a few
/// message delays, not after the holder's TTL or a polling pause. With
/// nodes that never report releases the waiter sleeps on (until the TTL it
/// was told), and the checker catches it.
#[test]
fn a_release_wakes_a_simulated_waiter_and_deaf_nodes_are_caught() {
    let bound = Duration::from_millis(50);
    let healthy = hand_off_after_release(false);
    assert!(
        healthy < bound,
        "hand-off took {healthy:?} after the release"
    );
    let deaf = hand_off_after_release(true);
    assert!(
        deaf >= bound,
        "the control was not caught: hand-off in {deaf:?} with no release reported"
    );
    println!("hand-off after release: {healthy:?}; with deaf nodes {deaf:?}");
}
