//! Running schedules: one ([`run_schedule`], [`simulate`]) or many on every
//! core ([`run_many`]), with what each did ([`Outcome`]) and the sums
//! ([`Totals`]); the environment settings and the replay hint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redquorum::node::Node;
use redquorum::{Redlock, Retry};

use crate::checkers::{
    Window, fence_regressions, over_limit, overlaps, rw_conflicts, shared_reads,
};
use crate::clients::{Stats, client, faults};
use crate::net::{SimLink, World};
use crate::node::SimNode;
use crate::plan::{Control, Kind, PERMITS, plan};

/// What one schedule did and what the checker found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub rounds: u64,
    pub grants: u64,
    pub extends: u64,
    pub cancelled: u64,
    pub nested: u64,
    pub waited: u64,
    pub faults: u64,
    pub lost_replies: u64,
    pub messages: u64,
    pub overlaps: Vec<String>,
    pub fence_regressions: Vec<String>,
    /// Granted acquires that never reached a node, with no crash to excuse it.
    pub undelivered: Vec<String>,
    /// Links that had more calls in flight than the bound.
    pub unbounded: Vec<String>,
    /// Valid reentrant holds a quorum no longer counted.
    pub hold_losses: Vec<String>,
    pub most_in_flight: usize,
    /// Release notices the clients' listeners heard.
    pub notices: u64,
    /// Leases whose work was held for longer than one TTL (kept by
    /// extensions).
    pub leases_past_ttl: u64,
    /// Read and write locks granted (read/write schedules).
    pub read_grants: u64,
    pub write_grants: u64,
    /// Pairs of read windows that overlapped.
    pub shared_reads: u64,
    pub kind: Option<Kind>,
    pub leftovers: usize,
    pub digest: u64,
    pub virtual_time: Duration,
}

impl Outcome {
    pub fn violated(&self) -> bool {
        !self.overlaps.is_empty()
            || !self.fence_regressions.is_empty()
            || !self.undelivered.is_empty()
            || !self.unbounded.is_empty()
            || !self.hold_losses.is_empty()
            || self.leftovers > 0
    }
}

pub fn run_schedule(seed: u64, control: Control, verbose: bool) -> (Outcome, String) {
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
            if control == Control::QuarantinedRestarts {
                // The longest TTL, and the clock's drift over it: what a
                // client adds to a Redis node's uptime-based quarantine.
                let ttl = Duration::from_millis(plan.ttl_ms);
                node.quarantine_restarts(ttl.mul_f64(1.0 + plan.factor) + Duration::from_millis(2));
            }
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
            plan.steps_forward,
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
    if matches!(plan.kind, Kind::Lease | Kind::Election) {
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

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

pub fn replay_hint(seed: u64, control: Control) -> String {
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
pub struct Totals {
    pub schedules: u64,
    pub rounds: u64,
    pub grants: u64,
    pub extends: u64,
    pub cancelled: u64,
    pub nested: u64,
    pub waited: u64,
    pub reentrant_schedules: u64,
    pub many_schedules: u64,
    pub lease_schedules: u64,
    pub semaphore_schedules: u64,
    pub rw_schedules: u64,
    pub election_schedules: u64,
    /// Leaderships granted in election schedules.
    pub terms: u64,
    pub read_grants: u64,
    pub write_grants: u64,
    pub shared_reads: u64,
    pub leases_past_ttl: u64,
    pub most_in_flight: usize,
    pub faults: u64,
    pub lost_replies: u64,
    pub messages: u64,
    pub notices: u64,
    pub overlaps: u64,
    pub fence_regressions: u64,
    pub undelivered: u64,
    pub fenced_schedules: u64,
    pub leftovers: u64,
    pub virtual_time: Duration,
    /// (seed, first overlap or leftover count) of failing schedules.
    pub failures: Vec<(u64, String)>,
}

/// Runs seeds `base..` on every core until `count` schedules are done and
/// `until` (if any) has passed, or `stop_at_first` failure.
/// Runs `count` schedules from seed `base` (more while `until` lies ahead:
/// a soak; fewer once `budget` has passed with at least its floor run: a
/// loaded machine's run).
pub fn run_many(
    base: u64,
    count: u64,
    until: Option<std::time::Instant>,
    budget: Option<(std::time::Instant, u64)>,
) -> Totals {
    let next = AtomicU64::new(0);
    let totals = Mutex::new(Totals::default());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let now = std::time::Instant::now();
                    let more_time = until.is_some_and(|u| now < u);
                    if i >= count && !more_time {
                        return;
                    }
                    if budget.is_some_and(|(end, floor)| i >= floor && now >= end) {
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
                    if out.kind == Some(Kind::Election) {
                        t.election_schedules += 1;
                        t.terms += out.grants;
                    }
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

/// How long a soak run lasts: `REDQUORUM_SOAK_SECS=n`, or 300 s for
/// `REDQUORUM_SOAK=1`; `None` (the short CI mode) otherwise.
/// `REDQUORUM_SIM_BUDGET_SECS=n`: stop after n seconds once at least
/// `REDQUORUM_SIM_MIN_SCHEDULES` (default a quarter of the count) have run.
/// The deadline and the floor.
pub fn budget(count: u64) -> Option<(std::time::Instant, u64)> {
    let secs: u64 = std::env::var("REDQUORUM_SIM_BUDGET_SECS")
        .ok()?
        .trim()
        .parse()
        .expect("REDQUORUM_SIM_BUDGET_SECS must be a number");
    let floor = std::env::var("REDQUORUM_SIM_MIN_SCHEDULES")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .expect("REDQUORUM_SIM_MIN_SCHEDULES must be a number")
        })
        .unwrap_or(count / 4)
        .min(count);
    Some((std::time::Instant::now() + Duration::from_secs(secs), floor))
}

pub fn soak_duration() -> Option<Duration> {
    if let Ok(secs) = std::env::var("REDQUORUM_SOAK_SECS") {
        let secs: u64 = secs
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("REDQUORUM_SOAK_SECS must be a number, got {secs:?}"));
        return Some(Duration::from_secs(secs));
    }
    match std::env::var("REDQUORUM_SOAK").as_deref() {
        Ok("" | "0") | Err(_) => None,
        Ok(_) => Some(Duration::from_secs(300)),
    }
}
