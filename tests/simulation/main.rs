//! Deterministic simulation: the real coordinator (`Redlock` over the public
//! `Node` trait) against simulated nodes on virtual time, with random
//! per-message delays, lost replies, frozen and restarted nodes and node
//! clocks running at different rates within the drift bound
//! (`tests/simulation/net.rs` and `node.rs` describe the model).
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
//! - `REDQUORUM_SIM_BUDGET_SECS=n` stops after n seconds once at least
//!   `REDQUORUM_SIM_MIN_SCHEDULES` (default a quarter of the count) have run:
//!   `scripts/test` sets it, so that a loaded machine runs fewer schedules
//!   instead of failing the suite on time (it prints how many ran).
//!
//! A seventh of the schedules each take plain locks, fenced ones
//! (`LockOptions::fenced`), reentrant ones (`ReentrantLock`, often a second hold
//! inside the first), multi-resource ones (`lock_many` over the resource and
//! a second one, against clients taking the first alone), leases (work
//! under `run_with`, extended every third of the TTL, each step of it
//! counted as held), permits of a 2-permit semaphore (checked: at most 2
//! valid holders at once) or read/write locks (each round a read or a write
//! lock; checked: a write window overlaps no other window, read windows
//! may overlap each other). A second
//! checker verifies that every holder's fencing token is larger than that of
//! every holder before it. A third verifies delivery: every granted acquire
//! reached every node (a simulated link, a node of your own, writes a
//! request only when its future is first polled, which the client does as
//! it makes the call), unless a crash or a refusal while the node was down
//! excuses it.
//!
//! Nine negative controls break one assumption each and must be caught: node
//! clocks 1.5× fast with drift factor 0.01, nodes restarted empty within the
//! TTL, reentrant releases that give back two holds, multi-resource
//! acquires that are not all-or-nothing, a semaphore opened with one permit
//! too many and write acquires that ignore live readers (overlaps), fencing
//! counters lost on restart (token regressions), a transport that loses
//! requests (undelivered grants) and a checked in-flight bound below the
//! configured one.
//!
//! Modules: `plan` (what a schedule is drawn from), `net` and `node` (the
//! simulated network and nodes), `clients` (the simulated clients and fault
//! injectors), `checkers` (what no schedule may show) and `runner` (running
//! one or many schedules); the tests are here.

mod checkers;
mod clients;
mod net;
mod node;
mod plan;
mod runner;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use redquorum::node::Node;
use redquorum::{Redlock, Retry};
use tokio::time::Instant;

use net::{Net, SimLink, World};
use node::SimNode;
use plan::Control;
use runner::{Outcome, budget, env_u64, replay_hint, run_many, run_schedule, soak_duration};

pub const RESOURCE: &str = "job";
/// The second resource of multi-resource schedules.
pub const OTHER: &str = "job-part";
pub const NODES: usize = 5;

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
    let until = soak_duration().map(|d| std::time::Instant::now() + d);
    let budget = budget(count);
    let started = std::time::Instant::now();
    let t = run_many(base, count, until, budget);
    println!(
        "simulation: {} schedules (seeds {base}..) in {:.1?} wall, {:.1?} virtual; \
         {} rounds, {} grants, {} extends, {} waits, {} release notices heard, {} acquires cancelled, {} faults injected, {} messages, {} replies lost; \
         {} overlaps, {} leftover keys; {} schedules fenced, {} token regressions, {} undelivered grants; {} schedules reentrant, \
         {} nested holds; {} schedules multi-resource; {} schedules leases ({} held past one TTL); {} schedules semaphores (2 permits); \
         {} schedules read/write ({} read and {} write grants, {} pairs of readers sharing); {} schedules elections ({} terms); \
         at most {} calls in flight on a link; \
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
        t.election_schedules,
        t.terms,
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
    // All of them, or (on a budget) at least its floor.
    assert!(
        t.schedules >= budget.map_or(count, |(_, floor)| floor),
        "{t:?}"
    );
    // The schedules must exercise something: most rounds contend, and the
    // faults and losses happen.
    assert!(t.grants > t.schedules, "too few grants: {t:?}");
    assert!(t.faults > t.schedules && t.lost_replies > 0, "{t:?}");
    assert!(
        t.fenced_schedules > t.schedules / 10,
        "too few fenced schedules: {t:?}"
    );
    assert!(
        t.reentrant_schedules > t.schedules / 10 && t.nested > 0,
        "{t:?}"
    );
    assert!(t.many_schedules > t.schedules / 10, "{t:?}");
    assert!(t.lease_schedules > t.schedules / 10, "{t:?}");
    assert!(t.semaphore_schedules > t.schedules / 10, "{t:?}");
    assert!(
        t.rw_schedules > t.schedules / 10 && t.write_grants > 0,
        "{t:?}"
    );
    assert!(t.shared_reads > 0, "no two readers ever shared: {t:?}");
    assert!(
        t.election_schedules > t.schedules / 10 && t.terms > t.election_schedules,
        "too few elections: {t:?}"
    );
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

/// Node clocks stepped forward past the TTL, several times on every node
/// (docs/guarantees.md, "Clocks that jump"): keys expire at once on a
/// majority while their holder counts on them, and the checker must see
/// two holders at once. (The ordinary schedules step clocks back.)
#[test]
fn control_clocks_that_jump_forward_are_caught() {
    caught_within(Control::ClockSteps, 50, |o| &o.overlaps);
}

/// Nodes restarted without their keys within the TTL: a second client wins a
/// quorum while the first still holds, and the checker must see it.
#[test]
fn control_empty_restarts_within_the_ttl_are_caught() {
    caught_within(Control::EmptyRestarts, 50, |o| &o.overlaps);
}

/// The same empty restarts, the restarted nodes quarantined for the
/// longest TTL as the clients keep the delayed restart (`Node::quarantined`):
/// no two valid holders at once, whatever the lock kind. Its negative
/// control is `control_empty_restarts_within_the_ttl_are_caught` (the same
/// restarts, no quarantine). (Fencing tokens still need durable counters: a
/// wiped counter starts again.)
#[test]
fn quarantined_empty_restarts_keep_exclusion() {
    let started = std::time::Instant::now();
    let control = Control::QuarantinedRestarts;
    let (mut grants, mut faults) = (0, 0);
    for seed in 0..100 {
        let (out, _) = run_schedule(seed, control, false);
        assert!(
            out.overlaps.is_empty(),
            "seed {seed}: {}\n{}",
            out.overlaps[0],
            replay_hint(seed, control)
        );
        grants += out.grants;
        faults += out.faults;
    }
    println!(
        "quarantined empty restarts: 100 schedules, {grants} grants, {faults} faults, no overlap ({:.1?})",
        started.elapsed()
    );
}

/// Fencing counters lost on restart (lock keys kept): exclusion holds, but a
/// later holder can be granted a token no larger than an earlier one's, and
/// the fencing checker must see it.
#[test]
fn control_lost_fence_counters_are_caught() {
    caught_within(Control::LostCounters, 100, |o| &o.fence_regressions);
}

/// Elections on nodes that restart empty within the TTL: two leaders at
/// once, which the overlap checker must see.
#[test]
fn control_leaders_on_empty_restarts_are_caught() {
    caught_within(Control::LeadersOnEmptyRestarts, 50, |o| &o.overlaps);
}

/// Elections on nodes that lose their fencing counters: a term that does
/// not grow, which the fencing checker must see.
#[test]
fn control_terms_on_lost_counters_are_caught() {
    caught_within(Control::TermsOnLostCounters, 100, |o| &o.fence_regressions);
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

/// A write acquire that ignores live readers: a writer gets in while
/// readers still hold valid read locks, and the read/write checker must see
/// it.
#[test]
fn control_a_writer_ignoring_readers_is_caught() {
    caught_within(Control::WriterIgnoresReaders, 40, |o| &o.overlaps);
}

/// A transport that loses requests: granted acquires that never reach a
/// healthy node, which the delivery checker must see.
#[test]
fn control_lost_requests_are_caught() {
    caught_within(Control::LostRequests, 50, |o| &o.undelivered);
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
        let net = Net {
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
