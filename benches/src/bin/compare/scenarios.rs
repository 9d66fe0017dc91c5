//! The scenarios (healthy, one node frozen, one node slow) and what runs in each.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    Healthy,
    Frozen,
    Slow,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "all healthy",
            Scenario::Frozen => "node 3 frozen",
            Scenario::Slow => "node 5 +20 ms",
        }
    }

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::Frozen => "frozen",
            Scenario::Slow => "slow",
        }
    }
}

pub(crate) const CONCURRENCY: [usize; 4] = [1, 16, 64, 256];
/// Which node is frozen (1-based), and which sits behind the slow proxy.
pub(crate) const FROZEN_NODE: usize = 3;
pub(crate) const SLOW_NODE: usize = 5;

#[derive(Default, Clone)]
pub(crate) struct Results {
    pub(crate) lone: [Lone; 3],
    pub(crate) load: [[Load; 4]; 3],
    pub(crate) contention: [Contention; 3],
    /// The pipelined C clients' cycles/s (healthy only): measured before
    /// and after the load phase, the mean.
    pub(crate) ceiling: Option<f64>,
}

/// Slices per client per phase.
pub(crate) const SLICES: usize = 4;

/// The order of the slices: A B C, C B A, A B C, C B A (only the clients
/// in `REDQUORUM_BENCH_CLIENTS`, default all, e.g. for a profile).
pub(crate) fn slices() -> impl Iterator<Item = usize> {
    let only = std::env::var("REDQUORUM_BENCH_CLIENTS").unwrap_or_default();
    (0..SLICES)
        .flat_map(|k| if k % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] })
        .filter(move |&i| only.is_empty() || only.split(',').any(|w| w.trim() == CLIENTS[i].tag()))
}

pub(crate) async fn run_scenario(scenario: Scenario, urls: &[String], secs: f64) -> Results {
    let slice = Duration::from_secs_f64(secs / SLICES as f64);
    let run = format!("bench:{}:{}", std::process::id(), scenario.tag());

    // The slow node is reached through a proxy on a thread of its own, so
    // that its copying neither competes with the clients' runtime nor shows
    // up in their allocation counts.
    let mut urls = urls.to_vec();
    let proxy = if scenario == Scenario::Slow {
        let (proxy, url) = SlowProxy::start(&urls[SLOW_NODE - 1], Duration::from_millis(10));
        urls[SLOW_NODE - 1] = url;
        Some(proxy)
    } else {
        None
    };

    let mut clients = Vec::new();
    for which in CLIENTS {
        let client = Arc::new(Client::connect(which, &urls).await);
        // Warm up: connections up, scripts cached, before any fault.
        for i in 0..20 {
            if let Err(e) = client.cycle(&format!("{run}:warmup:{i}")).await {
                panic!("{}: warm-up cycle failed: {e}", which.name());
            }
        }
        clients.push(client);
    }

    let _frozen = (scenario == Scenario::Frozen).then(|| Frozen::new(FROZEN_NODE));
    let mut res = Results::default();

    let phases = std::env::var("REDQUORUM_BENCH_PHASES").unwrap_or_default();
    let phase = |p: &str| phases.is_empty() || phases.split(',').any(|w| w.trim() == p);
    println!(
        "[{}] lone client, lock+release back to back",
        scenario.tag()
    );
    let in_task = lone_in_task();
    for (pass, i) in slices().enumerate().filter(|_| phase("lone")) {
        let until = Instant::now() + slice;
        let resource = format!("{run}:lone:{i}:{pass}");
        let l = if in_task {
            let client = Arc::clone(&clients[i]);
            tokio::spawn(async move { lone(&client, &resource, until).await })
                .await
                .expect("the lone task")
        } else {
            lone(&clients[i], &resource, until).await
        };
        res.lone[i].merge(l);
    }
    let ceiling = |when: &str| {
        if scenario != Scenario::Healthy || !phase("load") {
            return None;
        }
        println!(
            "[{}] ceiling ({when}): five redis-benchmark -P 16 -c 8",
            scenario.tag()
        );
        ceiling::measure(&urls)
            .inspect_err(|e| eprintln!("compare: no ceiling: {e}"))
            .ok()
    };
    let before = ceiling("before");
    for (c, &tasks) in CONCURRENCY.iter().enumerate() {
        println!(
            "[{}] throughput, {tasks} tasks on distinct keys",
            scenario.tag()
        );
        for (pass, i) in slices().enumerate().filter(|_| phase("load")) {
            let tag = format!("{run}:load{tasks}:{i}:{pass}");
            let l = throughput(&clients[i], &tag, tasks, slice).await;
            res.load[i][c].merge(l);
        }
    }
    res.ceiling = match (before, ceiling("after")) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (a, b) => a.or(b),
    };
    if phase("contention") {
        println!(
            "[{}] contention, {CONTENDERS} tasks on one key",
            scenario.tag()
        );
    }
    for (pass, i) in slices().enumerate().filter(|_| phase("contention")) {
        let resource = format!("{run}:contended:{i}:{pass}");
        let c = contention(&clients[i], &resource, slice).await;
        let r = &mut res.contention[i];
        r.grants += c.grants;
        r.errors += c.errors;
        r.overlaps += c.overlaps;
        r.cut += c.cut;
        r.secs += c.secs;
    }
    drop(_frozen);
    drop(proxy);
    res
}

/// A latency proxy on its own thread and runtime.
pub(crate) struct SlowProxy {
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowProxy {
    pub(crate) fn start(upstream_url: &str, one_way: Duration) -> (SlowProxy, String) {
        let upstream = upstream_url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            UNCOUNTED.with(|u| u.set(true));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let proxy = proxy::Proxy::start(&upstream).await;
                proxy.set_latency(one_way);
                url_tx.send(proxy.url()).expect("send proxy url");
                let _ = stopped.await;
            });
        });
        let url = url_rx.recv().expect("proxy started");
        (
            SlowProxy {
                stop: Some(stop),
                thread: Some(thread),
            },
            url,
        )
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the lone phase runs in a spawned task (`REDQUORUM_BENCH_LONE=task`,
/// on one of the runtime's workers) rather than in the future the main
/// thread blocks on (`main`, the default: what `#[tokio::main]` runs).
fn lone_in_task() -> bool {
    match std::env::var("REDQUORUM_BENCH_LONE").as_deref() {
        Ok("task") => true,
        Ok("main") | Err(_) => false,
        Ok(other) => panic!("REDQUORUM_BENCH_LONE={other}: say main or task"),
    }
}
