//! The simulated clients of a schedule: contending [`client`]s (with
//! [`lease_round`] for lease schedules) and the [`faults`] injected on each
//! node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::{LockError, LockOptions, Redlock, Semaphore, election::Election};
use tokio::time::Instant;

use crate::checkers::Window;
use crate::net::World;
use crate::node::SimNode;
use crate::plan::{Kind, Plan, WRITE_P};
use crate::{NODES, OTHER, RESOURCE};

/// What the clients of one schedule did, counted as they go.
#[derive(Debug, Default)]
pub struct Stats {
    pub rounds: AtomicU64,
    pub extends: AtomicU64,
    pub cancelled: AtomicU64,
    pub nested: AtomicU64,
    pub waited: AtomicU64,
    /// Reentrant holders that, still valid after giving an inner hold back,
    /// found fewer than a quorum of nodes counting their outer hold.
    pub hold_losses: Mutex<Vec<String>>,
}

/// The lock key redquorum uses for `resource`.
fn lock_key(resource: &str) -> String {
    format!("{{{resource}}}:lock")
}

/// One contending client: rounds of `try_lock`, holding for a random time
/// (sometimes past the validity, sometimes extending), then releasing or
/// dropping the lock; a random pause after a refusal.
pub async fn client(
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
        if matches!(plan.kind, Kind::Lease | Kind::Election) {
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
                Kind::Fenced => {
                    redlock
                        .lock_with(RESOURCE, ttl, &redquorum::LockOptions::new().fenced())
                        .await
                }
                Kind::Reentrant => {
                    ReentrantLock::new(&redlock, RESOURCE, &owner)
                        .unwrap()
                        .lock(ttl)
                        .await
                }
                // Odd clients take both resources at once, even ones the
                // first alone: the sets overlap.
                Kind::Many if id % 2 == 1 => redlock.lock_many(&[RESOURCE, OTHER], ttl).await,
                Kind::Many | Kind::Lease | Kind::Election => redlock.try_lock(RESOURCE, ttl).await,
                Kind::Semaphore => {
                    let semaphore =
                        Semaphore::new(&redlock, RESOURCE, plan.permits).expect("semaphore");
                    let permit = if waits {
                        let wait = redquorum::AcquireOptions::new().wait(max_wait);
                        semaphore.acquire_with(ttl, &wait).await
                    } else {
                        semaphore.try_acquire(ttl).await
                    };
                    permit.map(redquorum::Permit::into_lock)
                }
                // Half the time a waiter, as for plain locks.
                Kind::ReadWrite => {
                    let wait = AcquireOptions::new().wait(max_wait);
                    match (write, waits) {
                        (true, true) => {
                            RwLock::new(&redlock, RESOURCE)
                                .unwrap()
                                .write_with(ttl, &wait)
                                .await
                        }
                        (true, false) => {
                            RwLock::new(&redlock, RESOURCE)
                                .unwrap()
                                .try_write(ttl)
                                .await
                        }
                        (false, true) => {
                            RwLock::new(&redlock, RESOURCE)
                                .unwrap()
                                .read_with(ttl, &wait)
                                .await
                        }
                        (false, false) => {
                            RwLock::new(&redlock, RESOURCE).unwrap().try_read(ttl).await
                        }
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
                    if let Ok(inner) = ReentrantLock::new(&redlock, RESOURCE, &owner)
                        .unwrap()
                        .lock(ttl)
                        .await
                    {
                        nested.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(world.between(Duration::ZERO, hold / 4)).await;
                        let _ = inner.release().await;
                        // The outer hold must still count on a quorum.
                        let key = lock_key(RESOURCE);
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
                assert!(!matches!(e, LockError::Input(_)), "{e}");
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
    let lease = LeaseOptions::new().extend_every(ttl / 3);
    let election = plan.kind == Kind::Election;
    let work = |lease: redquorum::Lease| {
        let (world, windows) = (world.clone(), windows.clone());
        async move {
            let start = Instant::now() - origin;
            let slot = {
                let mut w = windows.lock().unwrap();
                w.push(Window {
                    client: id,
                    start,
                    end: start,
                    // A leader's term.
                    fence: lease.fence(),
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
    };
    let run = async {
        if election {
            // A candidate waits in line for up to two TTLs, then leads.
            let wait = AcquireOptions::new().wait(world.between(Duration::ZERO, ttl * 2));
            let election = Election::new(redlock, RESOURCE).expect("election");
            election.lead_with(ttl, &wait, &lease, work).await
        } else {
            redlock
                .run_with(RESOURCE, ttl, &LockOptions::new(), &lease, work)
                .await
        }
    };
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
        assert!(!matches!(e, LockError::Input(_)), "{e}");
        tokio::time::sleep(world.between(Duration::ZERO, plan.max_pause)).await;
    }
}

/// Faults on one node, one after another: freezes, and restarts with
/// (`wipe` false) or without their keys. Returns how many were injected; the
/// node is up and thawed when it returns.
pub async fn faults(
    node: Arc<SimNode>,
    world: Arc<World>,
    count: u32,
    wipe: bool,
    forget_counters: bool,
    steps_forward: bool,
    ttl: Duration,
) -> u64 {
    let n = node.index as u64;
    for _ in 0..count {
        // The negative controls restart nodes empty (or step their clocks
        // forward), often and quickly: within the TTL of the keys they lose.
        let quick = wipe || forget_counters || steps_forward;
        let idle = if quick { ttl } else { ttl * 4 };
        tokio::time::sleep(world.between(Duration::ZERO, idle)).await;
        if steps_forward || (!quick && world.chance(0.15)) {
            // Forward past the TTL in the control; back otherwise (a node
            // clock set back keeps keys longer: never a second holder).
            let d = world.between(ttl, ttl * 3).as_millis() as i64;
            let ms = if steps_forward { d } else { -d };
            world.note("step", n, ms as u64, || {
                format!("node {} clock {ms:+} ms", n + 1)
            });
            node.step_clock(ms);
        } else if !quick && world.chance(0.5) {
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
