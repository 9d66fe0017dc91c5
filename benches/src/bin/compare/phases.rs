//! The measured phases: lone cycles, load at several task counts, contention.

use super::*;

#[derive(Default, Clone)]
pub(crate) struct Lone {
    pub(crate) latencies: Vec<Duration>,
    pub(crate) errors: u64,
    pub(crate) allocs: u64,
    pub(crate) cpu: Cpu,
    /// A cycle was still running when the phase's time ran out.
    pub(crate) cut: bool,
    pub(crate) first_error: Option<String>,
}

impl Lone {
    pub(crate) fn merge(&mut self, other: Lone) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.allocs += other.allocs;
        self.cpu.add(other.cpu);
        self.cut |= other.cut;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    pub(crate) fn allocs_per_cycle(&self) -> f64 {
        self.allocs as f64 / self.latencies.len().max(1) as f64
    }
}

pub(crate) const LONE_MAX_CYCLES: usize = 200_000;
/// How long a cycle still running when a phase's time is up may take to
/// finish before it is dropped and reported as cut short.
pub(crate) const GRACE: Duration = Duration::from_secs(3);

/// A lone client: lock+release back to back, at most `LONE_MAX_CYCLES`
/// cycles or until `until`, whichever first (the last cycle may finish
/// within `GRACE`).
pub(crate) async fn lone(client: &Client, resource: &str, until: Instant) -> Lone {
    let mut out = Lone {
        latencies: Vec::with_capacity(LONE_MAX_CYCLES),
        ..Lone::default()
    };
    let before = ALLOCS.load(Ordering::Relaxed);
    let cpu = Cpu::start();
    while out.latencies.len() < LONE_MAX_CYCLES && Instant::now() < until {
        let start = Instant::now();
        match tokio::time::timeout_at(until + GRACE, client.cycle(resource)).await {
            Ok(Ok(())) => out.latencies.push(start.elapsed()),
            Ok(Err(e)) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
            Err(_) => out.cut = true,
        }
    }
    out.allocs = ALLOCS.load(Ordering::Relaxed) - before;
    out.cpu = Cpu::since(cpu);
    out
}

#[derive(Default, Clone)]
pub(crate) struct Load {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) cpu: Cpu,
    /// Cycles still running when time ran out (dropped).
    pub(crate) cut: u64,
    pub(crate) secs: f64,
    pub(crate) peak_heap: usize,
    pub(crate) peak_rss: usize,
}

impl Load {
    pub(crate) fn merge(&mut self, o: Load) {
        self.ok += o.ok;
        self.errors += o.errors;
        self.first_error = self.first_error.take().or(o.first_error);
        self.cpu.add(o.cpu);
        self.cut += o.cut;
        self.secs += o.secs;
        self.peak_heap = self.peak_heap.max(o.peak_heap);
        self.peak_rss = self.peak_rss.max(o.peak_rss);
    }

    pub(crate) fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ok as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// `tasks` tasks, each looping lock+release on a key of its own; none
/// starts a cycle after `dur`. The rate is over the time until the last
/// cycle ended; a cycle still running `GRACE` after `dur` is dropped and
/// counted as cut short.
pub(crate) async fn throughput(
    client: &Arc<Client>,
    tag: &str,
    tasks: usize,
    dur: Duration,
) -> Load {
    let base = reset_peaks();
    let cpu = Cpu::start();
    let start = Instant::now();
    let until = start + dur;
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let client = Arc::clone(client);
            let resource = format!("{tag}:{i}");
            tokio::spawn(async move {
                let (mut ok, mut errors, mut first) = (0u64, 0u64, None);
                while Instant::now() < until {
                    match tokio::time::timeout_at(until + GRACE, client.cycle(&resource)).await {
                        Ok(Ok(())) => ok += 1,
                        Ok(Err(e)) => {
                            errors += 1;
                            first.get_or_insert(e);
                        }
                        Err(_) => return (ok, errors, first, 1u64),
                    }
                }
                (ok, errors, first, 0)
            })
        })
        .collect();
    let mut load = Load::default();
    for h in handles {
        let (ok, errors, first, cut) = h.await.expect("throughput task panicked");
        load.ok += ok;
        load.errors += errors;
        load.first_error = load.first_error.take().or(first);
        load.cut += cut;
    }
    load.secs = start.elapsed().as_secs_f64();
    load.cpu = Cpu::since(cpu);
    load.peak_heap = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    load.peak_rss = peak_rss();
    load
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Contention {
    pub(crate) grants: u64,
    pub(crate) errors: u64,
    /// Acquisitions still running `GRACE` after the phase (dropped).
    pub(crate) cut: u64,
    pub(crate) overlaps: u64,
    pub(crate) secs: f64,
}

pub(crate) const CONTENDERS: usize = 8;

/// `CONTENDERS` tasks hand one key around for `dur`.
pub(crate) async fn contention(client: &Arc<Client>, resource: &str, dur: Duration) -> Contention {
    let start = Instant::now();
    let until = start + dur;
    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let client = Arc::clone(client);
            let resource = resource.to_owned();
            let (busy, overlaps) = (busy.clone(), overlaps.clone());
            tokio::spawn(async move {
                let (mut grants, mut errors) = (0u64, 0u64);
                while Instant::now() < until {
                    let section = || {
                        if busy.swap(true, Ordering::SeqCst) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        busy.store(false, Ordering::SeqCst);
                    };
                    match tokio::time::timeout_at(
                        until + GRACE,
                        client.contend(&resource, until, section),
                    )
                    .await
                    {
                        Ok(Ok(())) => grants += 1,
                        Ok(Err(_)) => errors += 1,
                        Err(_) => return (grants, errors, 1u64),
                    }
                }
                (grants, errors, 0)
            })
        })
        .collect();
    let mut out = Contention::default();
    for h in handles {
        let (g, e, cut) = h.await.expect("contention task panicked");
        out.grants += g;
        out.errors += e;
        out.cut += cut;
    }
    out.secs = start.elapsed().as_secs_f64();
    out.overlaps = overlaps.load(Ordering::SeqCst);
    out
}
