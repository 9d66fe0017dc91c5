//! A rolling restart by docs/operations.md's runbook, under the default
//! rule, with a leader, a quota and a once-per-period job running.

use super::*;
use redquorum::LeaseOptions;

/// Times a hold was seen valid, `[first, last]`, per holder.
type Tenures = std::sync::Mutex<Vec<(usize, Instant, Instant)>>;

/// Holds longer than `per` at once among `tenures` (times a hold was seen
/// valid): the most that overlap at any instant.
fn most_at_once(tenures: &Tenures) -> usize {
    let tenures = tenures.lock().unwrap();
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for &(_, from, to) in tenures.iter() {
        edges.push((from, 1));
        edges.push((to, -1));
    }
    // Ends before starts at one instant: a hold seen valid until t and one
    // from t do not overlap.
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Watches `lease`-like validity for `hold`, sampling every 50 ms; the
/// span it was seen valid, if it was.
async fn seen_valid(is_valid: impl Fn() -> bool, hold: Duration) -> Option<(Instant, Instant)> {
    let from = Instant::now();
    if !is_valid() {
        return None;
    }
    let mut last = from;
    while from.elapsed() < hold {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !is_valid() {
            break;
        }
        last = Instant::now();
    }
    Some((from, last))
}

/// A rolling restart by docs/operations.md's runbook under the default
/// rule (every restart quarantined): each node killed and started from
/// its AOF, the next only once the last one's quarantine is over. Meanwhile
/// two candidates of one election, four tasks sharing a quota of two
/// permits, and three replicas of a once-per-period job (`hold_at_least`
/// of the period on one resource). At most one leader and two permit
/// holders are ever seen valid at once, the job never runs twice within a
/// period, and it runs in most periods (a restart's round may miss one).
/// With `max_ttl` 3 s the restart of five nodes takes about 5 × (restart +
/// 3 s); with the default 60 s, about 5.5 min (operations.md §8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_by_the_runbook_keeps_one_leader_the_quota_and_the_period() {
    let _turn = TURN.lock().await;
    let max_ttl = Duration::from_secs(3);
    let client = || untrusting(max_ttl).build();
    let name = unique("runbook");
    let stop = Arc::new(AtomicBool::new(false));
    let leaders: Arc<Tenures> = Arc::default();
    let permits: Arc<Tenures> = Arc::default();
    let runs: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let period = Duration::from_secs(2);
    let mut tasks = Vec::new();
    for id in 0..2 {
        let (redlock, stop, leaders) = (client().await.unwrap(), stop.clone(), leaders.clone());
        let election =
            redquorum::election::Election::new(&redlock, &format!("{name}:leader")).unwrap();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let wait = redquorum::AcquireOptions::new().wait(Duration::from_secs(5));
                let _ = election
                    .lead_with(max_ttl, &wait, &LeaseOptions::new(), |lease| {
                        let leaders = leaders.clone();
                        async move {
                            if let Some((from, to)) =
                                seen_valid(|| lease.is_valid(), Duration::from_millis(1500)).await
                            {
                                leaders.lock().unwrap().push((id, from, to));
                            }
                        }
                    })
                    .await;
            }
        }));
    }
    for id in 0..4 {
        let (redlock, stop, permits) = (client().await.unwrap(), stop.clone(), permits.clone());
        let quota = redquorum::Semaphore::new(&redlock, &format!("{name}:quota"), 2).unwrap();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let wait = redquorum::AcquireOptions::new().wait(Duration::from_secs(5));
                if let Ok(permit) = quota.acquire_with(max_ttl, &wait).await {
                    if let Some((from, to)) =
                        seen_valid(|| permit.is_valid(), Duration::from_millis(300)).await
                    {
                        permits.lock().unwrap().push((id, from, to));
                    }
                    let _ = permit.release().await;
                }
            }
        }));
    }
    for _ in 0..3 {
        let (redlock, stop, runs) = (client().await.unwrap(), stop.clone(), runs.clone());
        let job = format!("{name}:nightly");
        tasks.push(tokio::spawn(async move {
            let once = redquorum::LockOptions::new().hold_at_least(period);
            while !stop.load(Ordering::Acquire) {
                if let Ok(lock) = redlock.lock_with(&job, max_ttl, &once).await {
                    runs.lock().unwrap().push(Instant::now());
                    let _ = lock.release().await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    let watcher = client().await.unwrap();
    let began = Instant::now();
    for node in 1..=5 {
        tokio::task::block_in_place(|| drop(Killed::new(node)));
        // The runbook: the next node only once this one counts again.
        let start = Instant::now();
        eventually_ok(&format!("node {node} counts"), max_ttl * 5, async || {
            let health = watcher.nodes().probe(Duration::from_secs(1)).await;
            let h = &health[node - 1];
            if h.is_reachable()
                && h.quarantined_for.is_none()
                && start.elapsed() > Duration::from_secs(1)
            {
                Ok(())
            } else {
                Err(format!("{h:?}"))
            }
        })
        .await;
    }
    let took = began.elapsed();
    stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.unwrap();
    }
    // Every node restarted from its AOF: the later tests' clients, which
    // trust durable restarts, may count them at once (these clients did
    // not stamp the marks that would show it).
    for node in 1..=5 {
        adopt(node);
    }
    let mut runs = runs.lock().unwrap().clone();
    runs.sort();
    let gaps: Vec<Duration> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    let (leaders_at_once, permits_at_once) = (most_at_once(&leaders), most_at_once(&permits));
    println!(
        "rolling restart of five nodes in {took:?}: {} leaderships, at most {leaders_at_once} at once; \
         {} permits held, at most {permits_at_once} at once; {} runs of the job, gaps {gaps:?}",
        leaders.lock().unwrap().len(),
        permits.lock().unwrap().len(),
        runs.len()
    );
    assert_eq!(leaders_at_once, 1, "two leaders at once");
    assert!(
        permits_at_once <= 2,
        "{permits_at_once} permits of 2 at once"
    );
    // The client's clock may run slower than the nodes' by the drift: a
    // period on its clock is at least 99 % of one on theirs.
    for gap in &gaps {
        assert!(
            *gap >= period.mul_f64(0.98),
            "the job ran twice within {gap:?}"
        );
    }
    let periods = took.as_secs_f64() / period.as_secs_f64();
    assert!(
        runs.len() as f64 >= periods * 0.6,
        "{} runs in {periods:.1} periods",
        runs.len()
    );
}
