//! A client process of a run: tasks that take every kind of lock in turn,
//! hold it a while, write to the fenced store, and release it, recording
//! each step in the history.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::{LockError, Redlock, Semaphore, election::Election};

use crate::history::{Recorder, instant_ns};
use crate::link_log::LinkLog;
use crate::store::Store;

/// What a client process is told on its command line.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Its name in the history (`c1`, `c2`...).
    pub proc: String,
    /// The nodes it locks on.
    pub nodes: Vec<String>,
    /// The run's directory: history, stop file, stores.
    pub dir: PathBuf,
    /// Every lock's TTL.
    pub ttl: Duration,
    /// The client's `max_ttl` (its restart quarantine).
    pub max_ttl: Duration,
    /// Concurrent tasks.
    pub tasks: usize,
    /// The restart quarantine on (off: a negative control).
    pub quarantine: bool,
    /// The deployment record on (off: the two-of-five control).
    pub deployment_record: bool,
    /// Switch to the list the `members` fault's switch file names, at a
    /// time of its own after it appears.
    pub switch: bool,
    /// Trust durable restarts (`Builder::trust_durable_restarts`): a
    /// restart counts at once where the node's dataset mark shows its
    /// dataset kept. On for runs: the nodes of `scripts/nodes` and
    /// `scripts/clock-nodes` persist every write (`appendonly yes`,
    /// `appendfsync always`) on data that outlives the process; the faults
    /// that break that (`aof-off`, `lost-volume`, `wipe`, `bare`) are what
    /// the mark must catch.
    pub trust_durable: bool,
    /// The store refuses stale fences (off: a negative control).
    pub fenced_store: bool,
    /// Chance that a fenced holder stops its own process (SIGSTOP) between
    /// checking its lock and writing: the paused holder.
    pub pause_chance: f64,
    /// Seed of the tasks' choices.
    pub seed: u64,
    /// The client's drift factor (`None`: the library's default; 0: no
    /// drift subtracted, a negative control).
    pub drift_factor: Option<f64>,
}

/// The kinds a task takes in turn.
const KINDS: &[&str] = &[
    "plain",
    "fenced",
    "reentrant",
    "many",
    "permit",
    "read",
    "write",
    "lease",
    "leader",
];

/// The semaphore's permits.
pub const PERMITS: u32 = 2;

/// The run's directory's stop file: clients finish their holds and exit
/// once it exists.
pub fn stop_file(dir: &std::path::Path) -> PathBuf {
    dir.join("stop")
}

/// Runs a client process until the stop file appears.
pub async fn run(config: ClientConfig) -> Result<(), Box<dyn std::error::Error>> {
    let rec = Arc::new(Recorder::open(
        &config.dir.join("history.log"),
        &config.proc,
    )?);
    LinkLog::new(rec.clone(), &config.nodes).install();
    let redlock = connect(&config, &config.nodes).await?;
    rec.record("note", &[("text", "client-start".into())]);
    let current = Arc::new(std::sync::RwLock::new(redlock.clone()));
    let switcher = config
        .switch
        .then(|| tokio::spawn(switch(config.clone(), current.clone(), rec.clone())));
    let ids = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..config.tasks {
        let ctx = Task {
            redlock: current.clone(),
            rec: rec.clone(),
            ids: ids.clone(),
            store: Store::new(&config.dir, config.fenced_store),
            owner: format!("{}-t{task}", config.proc),
            index: task,
            config: config.clone(),
            rng: StdRng::seed_from_u64(config.seed.wrapping_mul(31).wrapping_add(task as u64)),
        };
        tasks.push(tokio::spawn(ctx.run()));
    }
    for t in tasks {
        t.await?;
    }
    let switched = match switcher {
        Some(switcher) => switcher.await?,
        None => None,
    };
    redlock.shutdown().await;
    if let Some(switched) = switched {
        switched.shutdown().await;
    }
    rec.record("note", &[("text", "client-end".into())]);
    Ok(())
}

/// Waits for the switch file, then a time of this client's own (up to 12
/// s: during a declared change or after it), builds a client of the list it
/// names and hands it to the tasks; the client built, if any.
async fn switch(
    config: ClientConfig,
    current: Arc<std::sync::RwLock<Redlock>>,
    rec: Arc<Recorder>,
) -> Option<Redlock> {
    let file = crate::nemesis::switch_file(&config.dir);
    let stop = stop_file(&config.dir);
    let nodes = loop {
        if stop.exists() {
            return None;
        }
        if let Ok(list) = std::fs::read_to_string(&file) {
            break list.split(',').map(str::to_owned).collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The control's clients switch at once; the honest run's spread out.
    if config.deployment_record {
        let mut rng = StdRng::seed_from_u64(config.seed);
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..12_000))).await;
    }
    match connect(&config, &nodes).await {
        Ok(redlock) => {
            *current.write().unwrap_or_else(|e| e.into_inner()) = redlock.clone();
            rec.record("note", &[("text", "client-switched".into())]);
            Some(redlock)
        }
        Err(e) => {
            eprintln!("{}: switching lists: {e}", config.proc);
            None
        }
    }
}

/// The client of `nodes`, built again while a node is down at start
/// (bounded).
async fn connect(
    config: &ClientConfig,
    nodes: &[String],
) -> Result<Redlock, redquorum::ConfigError> {
    let mut tries = 0;
    loop {
        let mut builder = Redlock::builder()
            .nodes(nodes)
            .key_prefix("chaos:")
            .max_ttl(config.max_ttl)
            .restart_quarantine(config.quarantine)
            .deployment_record(config.deployment_record)
            .trust_durable_restarts(config.trust_durable);
        if let Some(factor) = config.drift_factor {
            builder = builder.drift_factor(factor);
        }
        let built = builder.build().await;
        match built {
            Err(e) if tries < 20 => {
                eprintln!("{}: building the client: {e}; again", config.proc);
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}

struct Task {
    /// The client to lock with: another once it switched lists.
    redlock: Arc<std::sync::RwLock<Redlock>>,
    rec: Arc<Recorder>,
    ids: Arc<AtomicU64>,
    store: Store,
    owner: String,
    /// The task's number in its process (`task` in the history).
    index: usize,
    config: ClientConfig,
    rng: StdRng,
}

/// The variant's name of an error: the history's `err` field.
fn err_name(e: &LockError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Error")
        .to_owned()
}

impl Task {
    async fn run(mut self) {
        let stop = stop_file(&self.config.dir);
        while !stop.exists() {
            // Leases and leaderships are held long and waited for: fewer.
            let kind = loop {
                let k = KINDS[self.rng.random_range(0..KINDS.len())];
                if !matches!(k, "lease" | "leader") || self.rng.random_bool(0.25) {
                    break k;
                }
            };
            self.rec.record(
                "invoke",
                &[("task", self.index.to_string()), ("kind", kind.into())],
            );
            self.once(kind).await;
        }
    }

    fn next_id(&self) -> String {
        format!(
            "{}-{}",
            self.config.proc,
            self.ids.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// How long to hold: mostly briefly (many grants), sometimes most of
    /// the validity (faults land while it is held).
    fn hold_for(&mut self, remaining: Duration) -> Duration {
        if self.rng.random_bool(0.9) {
            Duration::from_millis(self.rng.random_range(0..5))
        } else {
            remaining.mul_f64(self.rng.random_range(0.2..0.9))
        }
    }

    fn grant(
        &self,
        id: &str,
        kind: &str,
        res: &str,
        holder: &str,
        deadline: Instant,
        fence: Option<u64>,
    ) {
        let mut fields = vec![
            ("id", id.to_owned()),
            ("task", self.index.to_string()),
            ("kind", kind.to_owned()),
            ("res", res.to_owned()),
            ("holder", holder.to_owned()),
            ("until", instant_ns(deadline).to_string()),
        ];
        if let Some(f) = fence {
            fields.push(("fence", f.to_string()));
        }
        if kind == "permit" {
            fields.push(("limit", PERMITS.to_string()));
        }
        self.rec.record("grant", &fields);
    }

    /// An acquire that returned an error: `fail` where the nodes' answers
    /// refused it (another holder, a wait that ran out, bad input),
    /// `unknown` where the client could not learn enough answers (no
    /// quorum answered, the round was too slow, its own bound): keys may
    /// stand on some nodes until the client takes them back in the
    /// background. Either way the caller never acts on it.
    fn fail(&self, kind: &str, res: &str, e: &LockError) {
        let definite = matches!(
            e,
            LockError::Taken { .. }
                | LockError::Timeout { .. }
                | LockError::Input(_)
                | LockError::PermitCount { .. }
        );
        self.rec.record(
            if definite { "fail" } else { "unknown" },
            &[
                ("task", self.index.to_string()),
                ("kind", kind.into()),
                ("res", res.into()),
                ("err", err_name(e)),
            ],
        );
    }

    fn end(&self, id: &str) {
        self.rec.record("end", &[("id", id.into())]);
    }

    fn released(&self, id: &str, result: Result<(), LockError>) {
        let ok = match &result {
            Ok(()) => "1".to_owned(),
            Err(e) => format!("0:{}", err_name(e)),
        };
        self.rec
            .record("released", &[("id", id.into()), ("ok", ok)]);
    }

    fn write(&self, id: &str, res: &str, fence: u64) {
        match self.store.write(res, fence) {
            Ok(v) => self.rec.record(
                "write",
                &[
                    ("id", id.into()),
                    ("res", res.into()),
                    ("fence", fence.to_string()),
                    ("seq", v.seq.to_string()),
                    ("accepted", u8::from(v.accepted).to_string()),
                ],
            ),
            Err(e) => eprintln!("{}: store write: {e}", self.config.proc),
        }
    }

    async fn once(&mut self, kind: &str) {
        let ttl = self.config.ttl;
        let redlock = self
            .redlock
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match kind {
            "plain" | "fenced" => {
                let res = format!("{kind}-{}", self.rng.random_range(0..2));
                let got = if kind == "fenced" {
                    redlock
                        .lock_with(&res, ttl, &redquorum::LockOptions::new().fenced())
                        .await
                } else {
                    redlock.lock(&res, ttl).await
                };
                let mut lock = match got {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, &res, &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, &res, &id, lock.deadline(), lock.fence());
                if let Some(fence) = lock.fence() {
                    self.write(&id, &res, fence);
                }
                let hold = self.hold_for(lock.remaining());
                tokio::time::sleep(hold).await;
                if kind == "plain" && self.rng.random_bool(0.3) && lock.extend(ttl).await.is_ok() {
                    self.rec.record(
                        "until",
                        &[
                            ("id", id.clone()),
                            ("until", instant_ns(lock.deadline()).to_string()),
                        ],
                    );
                    let hold = self.hold_for(lock.remaining());
                    tokio::time::sleep(hold).await;
                }
                if let Some(fence) = lock.fence().filter(|_| lock.is_valid()) {
                    // Checked valid; a pause here is the one fencing is for.
                    if self.rng.random_bool(self.config.pause_chance) {
                        self.rec.record("note", &[("text", "self-pause".into())]);
                        // SAFETY: raising a signal on our own process.
                        unsafe { libc::raise(libc::SIGSTOP) };
                    }
                    self.write(&id, &res, fence);
                }
                self.end(&id);
                self.released(&id, lock.release().await);
            }
            "reentrant" => {
                let res = format!("re-{}", self.rng.random_range(0..2));
                let owner = self.owner.clone();
                let job = ReentrantLock::new(&redlock, &res, &owner).expect("a name and an owner");
                let outer = match job.lock(ttl).await {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, &res, &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, &res, &owner, outer.deadline(), None);
                if self.rng.random_bool(0.5) {
                    match job.lock(ttl).await {
                        Ok(inner) => {
                            let inner_id = self.next_id();
                            self.grant(&inner_id, kind, &res, &owner, inner.deadline(), None);
                            let hold = self.hold_for(inner.remaining());
                            tokio::time::sleep(hold).await;
                            self.end(&inner_id);
                            self.released(&inner_id, inner.release().await);
                        }
                        Err(e) => self.fail(kind, &res, &e),
                    }
                }
                let hold = self.hold_for(outer.remaining());
                tokio::time::sleep(hold).await;
                self.end(&id);
                self.released(&id, outer.release().await);
            }
            "many" => {
                let first = self.rng.random_range(0..3);
                let second = (first + self.rng.random_range(1..3)) % 3;
                let (a, b) = (format!("m-{first}"), format!("m-{second}"));
                let res = format!("{a},{b}");
                let lock = match redlock.lock_many(&[&a, &b], ttl).await {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, &res, &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, &res, &id, lock.deadline(), None);
                let hold = self.hold_for(lock.remaining());
                tokio::time::sleep(hold).await;
                self.end(&id);
                self.released(&id, lock.release().await);
            }
            "permit" => {
                let sem = match Semaphore::new(&redlock, "sem", PERMITS) {
                    Ok(s) => s,
                    Err(e) => return self.fail(kind, "sem", &e.into()),
                };
                let permit = match sem.acquire(ttl).await {
                    Ok(p) => p,
                    Err(e) => return self.fail(kind, "sem", &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, "sem", &id, permit.lock().deadline(), None);
                let hold = self.hold_for(permit.remaining());
                tokio::time::sleep(hold).await;
                self.end(&id);
                self.released(&id, permit.release().await);
            }
            "read" | "write" => {
                let got = if kind == "read" {
                    RwLock::new(&redlock, "rw").expect("a name").read(ttl).await
                } else {
                    RwLock::new(&redlock, "rw")
                        .expect("a name")
                        .write(ttl)
                        .await
                };
                let lock = match got {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, "rw", &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, "rw", &id, lock.deadline(), None);
                let hold = self.hold_for(lock.remaining());
                tokio::time::sleep(hold).await;
                self.end(&id);
                self.released(&id, lock.release().await);
            }
            "lease" => {
                let lock = match redlock.lock("lease", ttl).await {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, "lease", &e),
                };
                let id = self.next_id();
                self.grant(&id, kind, "lease", &id, lock.deadline(), None);
                let keep = match lock.keep_alive() {
                    Ok(k) => k,
                    Err(e) => {
                        self.end(&id);
                        return self.fail(kind, "lease", &e);
                    }
                };
                self.keep_for(&id, || keep.lease().deadline(), || keep.lease().is_valid())
                    .await;
                self.end(&id);
                self.released(&id, keep.release().await);
            }
            "leader" => {
                let election = match Election::new(&redlock, "leader") {
                    Ok(e) => e,
                    Err(e) => return self.fail(kind, "leader", &e.into()),
                };
                let options = AcquireOptions::new().wait(ttl);
                let leadership = match election
                    .campaign_with(ttl, &options, &LeaseOptions::new())
                    .await
                {
                    Ok(l) => l,
                    Err(e) => return self.fail(kind, "leader", &e),
                };
                let id = self.next_id();
                let lease = leadership.lease();
                self.grant(
                    &id,
                    kind,
                    "leader",
                    &id,
                    lease.deadline(),
                    Some(leadership.term()),
                );
                self.keep_for(
                    &id,
                    || leadership.lease().deadline(),
                    || leadership.is_valid(),
                )
                .await;
                self.end(&id);
                self.released(&id, leadership.resign().await);
            }
            _ => unreachable!("kind {kind}"),
        }
    }

    /// Holds a kept lease (up to two TTLs), recording each new deadline the
    /// keep-alive reached; stops early when it is no longer valid.
    async fn keep_for(
        &mut self,
        id: &str,
        deadline: impl Fn() -> Instant,
        valid: impl Fn() -> bool,
    ) {
        let hold = if self.rng.random_bool(0.7) {
            Duration::from_millis(self.rng.random_range(0..20))
        } else {
            self.config.ttl.mul_f64(self.rng.random_range(0.5..2.0))
        };
        let until = Instant::now() + hold;
        let mut last = deadline();
        let step = self.config.ttl / 10;
        while Instant::now() < until && valid() {
            tokio::time::sleep(step.min(until.saturating_duration_since(Instant::now()))).await;
            let now = deadline();
            if now != last {
                last = now;
                self.rec.record(
                    "until",
                    &[("id", id.into()), ("until", instant_ns(now).to_string())],
                );
            }
        }
    }
}

/// The chaos clients' deployment record (docs/agreement.md).
pub const DEPLOYMENT: &str = "chaos:redquorum:deployment";

/// Deletes the chaos clients' deployment record on every node (at most
/// 5 s a node).
pub async fn forget_deployment(urls: &[String]) -> Result<(), String> {
    for url in urls {
        let delete = async {
            let client = redis::Client::open(url.as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("DEL")
                .arg(DEPLOYMENT)
                .query_async::<()>(&mut conn)
                .await
        };
        match tokio::time::timeout(std::time::Duration::from_secs(5), delete).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("{url}: deleting the deployment record: {e}")),
            Err(_) => return Err(format!("{url}: deleting the deployment record: no answer")),
        }
    }
    Ok(())
}
