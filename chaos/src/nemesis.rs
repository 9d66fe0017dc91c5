//! The nemesis: faults on a minority of the nodes and on client
//! processes, each logged in the history as it begins and ends.
//!
//! Node faults go through `scripts/nodes` (freeze, kill and start, restarts
//! that wipe the data, with and without persistence), through the node
//! itself (`CLIENT PAUSE`, `CLIENT KILL` of every client connection,
//! `CONFIG SET timeout 1` for idle closes, `CONFIG SET appendonly no`
//! before a kill for `aof-off`) and through the proxy every client reaches
//! the node by (`cut`: the connection that next carries a chosen call — an
//! acquire, an extension or a release — is reset, the call never reaching
//! the node). At most two of five nodes are faulted at a time (but for a
//! rolling restart: three nodes one after another, each down for about
//! 0.8 s on the Docker nodes and for milliseconds on Valkey, a majority
//! without its keys within a TTL, which the restart quarantine keeps
//! safe).
//!
//! A restarted node counts as faulted until the clients' quarantine of it
//! ends ([`Nemesis::quarantine_until`]): the clients trust durable
//! restarts (the nodes persist every write on data that outlives the
//! process), so a `kill` whose dataset mark shows the dataset kept counts
//! at once, and every restart the mark cannot vouch for is quarantined —
//! `wipe` and `lost-volume` (no mark), `bare` and `rolling` (no
//! persistence), `aof-off` (the mark replayed from an AOF switched off
//! more than 5 s before, older than the stamps the clients saw
//! acknowledged), and a `kill` whose node was down for more than 5 s after
//! a stamp the mark does not hold. The nemesis reads the mark as the
//! clients do and records what it found (`note restart=N quarantine_ms=…`).
//!
//! A client process is paused (SIGSTOP) for longer
//! than a TTL, one at a time, and every process that stops itself (the
//! paused holder, crate::client) is resumed after the same delay.
//!
//! On nodes whose clocks can be stepped (`scripts/clock-nodes`), `clock`
//! steps one node's clock forward past the TTL, so that it expires every
//! key early. A grant on `m` of five nodes survives `m − 3` jumped clocks
//! (docs/guarantees.md): one jump needs every valid hold to be on four
//! nodes. A step waits until no node fault has been under way for three
//! TTLs (the longest hold is two, its grant one more before), holding new
//! node faults back meanwhile, and the stepped node counts as faulted for
//! two TTLs after (keys it expired early were valid at most one TTL more);
//! one other node fault may begin meanwhile. Contention still makes grants
//! on a bare quorum, which one jump can break: the checker reports those
//! overlaps apart (crate::check).
//!
//! Every run begins with each of its faults once, in a random order, then
//! draws at random: a short run has seen every kind.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::Mutex;

use redquorum_test_support::proxy::Proxy;

use crate::history::Recorder;
use cut::{RESENT_WITHIN, holds_token, plain_releases};

mod cut;
mod members;
mod pauses;
mod restarts;

pub use members::{MEMBERS, replaced, switch_file};
pub use pauses::process_stopped;

/// Every fault the nemesis knows.
pub const FAULTS: &[&str] = &[
    "freeze",
    "kill",
    "aof-off",
    "lost-volume",
    "wipe",
    "bare",
    "rolling",
    "pause",
    "resets",
    "idle",
    "stop-client",
    "cut",
];

/// The calls `cut` chooses from, by their functions' names.
const CUT_CALLS: [&str; 3] = ["redquorum_acquire", "redquorum_extend", "redquorum_release"];

/// The fault that needs nodes whose clocks step (`scripts/clock-nodes`).
pub const CLOCK: &str = "clock";

/// The negative control's fault: three nodes' clocks stepped at once.
pub const CLOCK_MAJORITY: &str = "clock3";

/// `aof-off` on three nodes at once (none faulted before it): AOF switched
/// off on all three, more than [`AOF_OFF_FOR`] of work, then each killed
/// and started. The `trust-aof-off` control's fault, where the nemesis then
/// writes each mark as a kept dataset would show it
/// ([`Nemesis::forge_marks`]); without that (`--faults aof-off3`, the
/// control's honest twin) the marks quarantine all three.
pub const AOF_OFF_MAJORITY: &str = "aof-off3";

/// The dataset mark of the chaos clients (key prefix `chaos:`): the hash
/// the library's `stamp.lua` keeps (`run`, `at`, `since`).
pub const MARK: &str = "chaos:redquorum:dataset:2";

/// How long `aof-off` runs a node with `appendonly no` before it kills it,
/// at least: longer than the 5 s within which the dataset mark takes a
/// stamp just before a start as a dataset kept (the library's
/// `STAMP_KEPT_GAP`), so that the restart is one the mark must see.
pub const AOF_OFF_FOR: Duration = Duration::from_secs(5);

/// How long a client that trusts durable restarts may still hold a node
/// quarantined after the mark shows its dataset kept: a stamp's period
/// (the library's `STAMP_EVERY`; a client that stamped the new process
/// first learns of a dataset vouched for since at its next stamp).
const STAMP_PERIOD: Duration = Duration::from_secs(1);

/// What the nemesis needs.
#[derive(Debug, Clone)]
pub struct Nemesis {
    /// `scripts/nodes`.
    pub script: PathBuf,
    /// The nodes' URLs, node `i` at index `i - 1`.
    pub urls: Vec<String>,
    /// The faults to draw from.
    pub faults: Vec<String>,
    /// The clients' TTL.
    pub ttl: Duration,
    /// The clients' quarantine.
    pub quarantine: Duration,
    /// The clients' quarantine is off (the `quarantine-off` control): a
    /// restart is recorded as not quarantined.
    pub quarantine_off: bool,
    /// The clients trust durable restarts: a restart counts at once where
    /// its dataset mark shows the dataset kept (else every restart is
    /// quarantined for [`quarantine`](Self::quarantine)).
    pub trust_durable: bool,
    /// The `trust-aof-off` control: after [`AOF_OFF_MAJORITY`] restarts a
    /// node, its dataset mark is written as the first stamp of a kept
    /// dataset would write it (this process, now, and the `since` it had
    /// before AOF was switched off), so that the clients count at once a
    /// node that lost every write of the time AOF was off. What it breaks
    /// is the one assumption the opt-in documents and the mark cannot
    /// check beyond its last 5 s: AOF is never switched off at run time.
    /// Switched off just before a restart, the mark shows what this one
    /// writes; here the switch is stretched over seconds, so that locks
    /// granted meanwhile are lost on a majority while still held.
    pub forge_marks: bool,
    /// The history.
    pub rec: Arc<Recorder>,
    /// Client process ids.
    pub clients: Vec<u32>,
    /// What is faulted now.
    pub faulted: Arc<Mutex<Faulted>>,
    /// The proxy in front of each node, node `i` at index `i - 1`; the
    /// clients reach the nodes through them.
    pub proxies: Vec<Arc<Proxy>>,
    /// The [`MEMBERS`] fault's switch file (the clients switch lists when
    /// it appears), and whether the change is declared first (off: the
    /// `members-unguarded` control).
    pub switch: PathBuf,
    pub declare_members: bool,
}

/// Nodes faulted now, so that faults stay on a minority.
#[derive(Debug, Default)]
pub struct Faulted {
    nodes: BTreeSet<usize>,
    /// The client process the nemesis stopped, if any.
    client_stopped: Option<u32>,
    /// When the last node fault ended.
    last_end: Option<Instant>,
    /// A clock step waits for quiet: no new node fault begins.
    step_pending: bool,
}

impl Nemesis {
    /// Draws and applies faults until `stop`, then waits for every fault
    /// to heal.
    pub async fn run(self, stop: Arc<AtomicBool>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let this = Arc::new(self);
        // Each fault once first (popped from the end), in a random order.
        let mut first: Vec<String> = this.faults.clone();
        for i in (1..first.len()).rev() {
            first.swap(i, rng.random_range(0..=i));
        }
        // A clock step waits for quiet: drawn first, before other faults
        // have begun, it does not wait out a short run.
        if let Some(at) = first.iter().position(|f| f == CLOCK) {
            let clock = first.remove(at);
            first.push(clock);
        }
        // The faults under way: at most one per node and one client.
        let mut healing = Vec::new();
        let mut members_begun = false;
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
            healing.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
            let fault = match first.last() {
                Some(f) => f.clone(),
                // No faults (`--faults none`): the run is the clients alone.
                None if this.faults.is_empty() => continue,
                None => this.faults[rng.random_range(0..this.faults.len())].clone(),
            };
            if fault == MEMBERS {
                // Once a run: the members change one way.
                if first.last() == Some(&fault) {
                    first.pop();
                }
                if !members_begun {
                    members_begun = true;
                    let this = this.clone();
                    healing.push(tokio::spawn(async move {
                        this.members(this.declare_members).await;
                    }));
                }
                continue;
            }
            let mut f = this.faulted.lock().await;
            if fault == CLOCK {
                if f.step_pending {
                    continue;
                }
                first.pop();
                f.step_pending = true;
                drop(f);
                let node = rng.random_range(1..=this.urls.len());
                healing.push(tokio::spawn(
                    this.clone().step_when_quiet(node, stop.clone()),
                ));
                continue;
            }
            if fault == "stop-client" {
                if f.client_stopped.is_some() || this.clients.is_empty() {
                    continue;
                }
                first.pop();
                let pid = this.clients[rng.random_range(0..this.clients.len())];
                f.client_stopped = Some(pid);
                drop(f);
                healing.push(tokio::spawn(this.clone().stop_client(pid)));
                continue;
            }
            // A rolling restart takes three nodes, none faulted before it;
            // any other fault one more, never past two.
            let majority = ["rolling", CLOCK_MAJORITY, AOF_OFF_MAJORITY];
            let (want, room) = if majority.contains(&fault.as_str()) {
                (3, f.nodes.is_empty())
            } else {
                (1, f.nodes.len() < 2)
            };
            if !room || f.step_pending {
                continue;
            }
            first.pop();
            let free: Vec<usize> = (1..=this.urls.len())
                .filter(|n| !f.nodes.contains(n))
                .collect();
            let mut chosen = Vec::new();
            while chosen.len() < want {
                let n = free[rng.random_range(0..free.len())];
                if !chosen.contains(&n) {
                    chosen.push(n);
                }
            }
            f.nodes.extend(&chosen);
            drop(f);
            let hold = Duration::from_millis(rng.random_range(300..3000));
            healing.push(tokio::spawn(this.clone().fault(fault, chosen, hold)));
        }
        for h in healing {
            let _ = h.await;
        }
    }

    /// Runs the nodes' script with `args`; whether it succeeded.
    async fn nodes(&self, args: &[&str]) -> bool {
        let out = tokio::process::Command::new(&self.script)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        let ok = matches!(out, Ok(s) if s.success());
        if !ok {
            eprintln!("nemesis: scripts/nodes {args:?} failed: {out:?}");
        }
        ok
    }

    /// One command on node `n`, bounded by a second; whether it was
    /// answered (an error reply too).
    async fn command(&self, n: usize, cmd: redis::Cmd) -> bool {
        self.query::<redis::Value>(n, &cmd).await.is_some()
    }

    /// One command on node `n` and its answer, bounded by a second; `None`
    /// (said on stderr) on any failure.
    async fn query<T: redis::FromRedisValue>(&self, n: usize, cmd: &redis::Cmd) -> Option<T> {
        let go = async {
            let client = redis::Client::open(self.urls[n - 1].as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            cmd.query_async::<T>(&mut conn).await
        };
        match tokio::time::timeout(Duration::from_secs(1), go).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                eprintln!("nemesis: node {n}: {e}");
                None
            }
            Err(_) => {
                eprintln!("nemesis: node {n}: no answer within a second");
                None
            }
        }
    }

    /// Node `n`'s process (`INFO server`'s `run_id`) and its clock (`TIME`,
    /// ms), in one round trip.
    async fn process_and_clock(&self, n: usize) -> Option<(String, u64)> {
        let mut ask = redis::pipe();
        ask.cmd("INFO").arg("server").cmd("TIME");
        let go = async {
            let client = redis::Client::open(self.urls[n - 1].as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            ask.query_async::<(String, (u64, u64))>(&mut conn).await
        };
        let (info, (secs, micros)) = tokio::time::timeout(Duration::from_secs(1), go)
            .await
            .ok()?
            .ok()?;
        let run = redquorum::internals::restart::info_field(&info, "run_id")?.to_owned();
        Some((run, secs * 1000 + micros / 1000))
    }

    fn log(&self, name: &str, target: &str, phase: &str) {
        self.rec.record(
            "fault",
            &[
                ("name", name.into()),
                ("target", target.into()),
                ("phase", phase.into()),
            ],
        );
    }

    async fn fault(self: Arc<Self>, name: String, nodes: Vec<usize>, hold: Duration) {
        let target = nodes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let n = nodes[0];
        let ns = n.to_string();
        self.log(&name, &target, "begin");
        match name.as_str() {
            "freeze" => {
                self.nodes(&["freeze", &ns]).await;
                tokio::time::sleep(hold).await;
                self.nodes(&["thaw", &ns]).await;
            }
            "kill" => {
                // SIGKILL, down for `hold`, started from its AOF: counted
                // at once where the mark shows the dataset kept.
                self.nodes(&["kill", &ns]).await;
                tokio::time::sleep(hold).await;
                self.nodes(&["start", &ns]).await;
                let until = self.quarantine_until(&name, n, Instant::now()).await;
                tokio::time::sleep_until(until).await;
            }
            "aof-off" => {
                // AOF switched off at run time while the clients go on: what
                // is granted meanwhile lives only in the node's memory. Then
                // SIGKILL, and a start with its durable config, which turns
                // AOF on again and replays it as it was when switched off:
                // the mark there is older than the stamps the clients saw
                // acknowledged, and older than 5 s at the start, so every
                // client must quarantine it.
                self.make_durable(&[n]).await;
                let off = self
                    .command(
                        n,
                        redis::cmd("CONFIG")
                            .arg("SET")
                            .arg("appendonly")
                            .arg("no")
                            .clone(),
                    )
                    .await;
                tokio::time::sleep(AOF_OFF_FOR + hold).await;
                self.nodes(&["kill", &ns]).await;
                self.nodes(&["start", &ns]).await;
                self.rec.record(
                    "note",
                    &[("aof_off", ns.clone()), ("ok", u8::from(off).to_string())],
                );
                let until = self.quarantine_until(&name, n, Instant::now()).await;
                tokio::time::sleep_until(until).await;
            }
            "lost-volume" => {
                // SIGKILL, down for `hold`, then its data deleted and the
                // node started with AOF on: a volume lost while it was down.
                self.nodes(&["kill", &ns]).await;
                tokio::time::sleep(hold).await;
                self.nodes(&["wipe-restart", &ns]).await;
                let until = self.quarantine_until(&name, n, Instant::now()).await;
                tokio::time::sleep_until(until).await;
            }
            "wipe" | "bare" => {
                let how = if name == "wipe" {
                    "wipe-restart"
                } else {
                    "bare-restart"
                };
                self.nodes(&[how, &ns]).await;
                let until = self.quarantine_until(&name, n, Instant::now()).await;
                tokio::time::sleep_until(until).await;
            }
            "rolling" => {
                // What an operator does: each node restarted empty, the next
                // one at once (the quarantine is what keeps this safe).
                let mut back = Vec::new();
                for n in &nodes {
                    self.nodes(&["bare-restart", &n.to_string()]).await;
                    back.push((*n, Instant::now()));
                }
                let mut until = Instant::now();
                for (n, at) in back {
                    until = until.max(self.quarantine_until(&name, n, at).await);
                }
                tokio::time::sleep_until(until).await;
            }
            AOF_OFF_MAJORITY => {
                // `aof-off` on three nodes at once; in the negative control,
                // each mark then written as a kept dataset would show it.
                self.make_durable(&nodes).await;
                let mut since = Vec::new();
                for n in &nodes {
                    since.push(self.mark_since(*n).await);
                }
                for n in &nodes {
                    let off = redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("appendonly")
                        .arg("no")
                        .clone();
                    self.command(*n, off).await;
                }
                // Locks granted now live only in these three nodes' memory.
                tokio::time::sleep(AOF_OFF_FOR + hold).await;
                let mut back = Vec::new();
                for (n, since) in nodes.iter().zip(since) {
                    let ns = n.to_string();
                    self.nodes(&["kill", &ns]).await;
                    self.nodes(&["start", &ns]).await;
                    if let (true, Some(since)) = (self.forge_marks, since) {
                        self.forge_mark(*n, since).await;
                    }
                    back.push((*n, Instant::now()));
                }
                let mut until = Instant::now();
                for (n, at) in back {
                    until = until.max(self.quarantine_until(&name, n, at).await);
                }
                tokio::time::sleep_until(until).await;
            }
            "pause" => {
                let ms = hold.as_millis().to_string();
                self.command(
                    n,
                    redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("ALL").clone(),
                )
                .await;
                tokio::time::sleep(hold).await;
            }
            "resets" => {
                // Every client connection dropped, calls in flight with them;
                // twice, a moment apart.
                for _ in 0..2 {
                    self.command(
                        n,
                        redis::cmd("CLIENT")
                            .arg("KILL")
                            .arg("TYPE")
                            .arg("normal")
                            .clone(),
                    )
                    .await;
                    tokio::time::sleep(hold / 2).await;
                }
            }
            "idle" => {
                self.command(
                    n,
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("timeout")
                        .arg("1")
                        .clone(),
                )
                .await;
                tokio::time::sleep(hold.max(Duration::from_secs(2))).await;
                self.command(
                    n,
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("timeout")
                        .arg("0")
                        .clone(),
                )
                .await;
            }
            "cut" => {
                // One chosen call on its way to node n: its connection is
                // reset and the call never arrives. A release so lost is
                // sent again on the next connection; an acquire or an
                // extension counts as that node's failure.
                let call = CUT_CALLS[hold.subsec_millis() as usize % CUT_CALLS.len()];
                let proxy = &self.proxies[n - 1];
                let before = proxy.resets();
                proxy.reset_on(call.as_bytes());
                let until = Instant::now() + hold.max(Duration::from_secs(1));
                while proxy.resets() == before && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                proxy.disarm_reset();
                let hit = proxy.resets() > before;
                let mut checked = 0;
                if hit && call == "redquorum_release" {
                    let chunk = proxy.reset_chunk().unwrap_or_default();
                    for (key, token) in plain_releases(&chunk) {
                        self.check_resent(n, &key, &token).await;
                        checked += 1;
                    }
                }
                self.rec.record(
                    "note",
                    &[
                        ("cut", call.into()),
                        ("node", ns.clone()),
                        ("reset", u8::from(hit).to_string()),
                        // Plain releases among the calls cut, each checked
                        // to have been sent again (`kept` if not).
                        ("checked", checked.to_string()),
                    ],
                );
            }
            CLOCK_MAJORITY => {
                // The negative control: a majority's clocks jump at once.
                let secs = self.step_seconds();
                for n in &nodes {
                    self.nodes(&["step", &n.to_string(), &secs]).await;
                }
                tokio::time::sleep(self.ttl * 2).await;
            }
            other => eprintln!("nemesis: unknown fault {other}"),
        }
        self.log(&name, &target, "end");
        let mut f = self.faulted.lock().await;
        for n in &nodes {
            f.nodes.remove(n);
        }
        f.last_end = Some(Instant::now());
    }
}
