//! `redquorum-chaos`: a recorded chaos run, or the check of a history.
//!
//! ```text
//! redquorum-chaos run [--seconds S] [--grants N] [--clients K] [--tasks T]
//!                     [--ttl-ms MS] [--faults a,b|none] [--clock] [--clock-rate R]
//!                     [--drift-factor F] [--control NAME] [--dir DIR] [--seed N]
//! redquorum-chaos check HISTORY
//! ```
//!
//! `run` needs `REDQUORUM_NODES` (five URLs) and `REDQUORUM_SCRIPTS_NODES`
//! (`scripts/nodes`). It writes DIR/history.log, checks it and exits 0 when
//! the history is clean and every fault of the run began at least once (a
//! negative control: when the checker caught the violation it is meant to
//! cause). A run whose `S` seconds passed before every fault began goes on,
//! at most `S` seconds more, until each has. The clients trust durable
//! restarts (`Builder::trust_durable_restarts`: the nodes persist every
//! write on data that outlives the process) unless
//! `--no-trust-durable-restarts`. `--clock`: the nodes' clocks can be
//! stepped (`scripts/clock-nodes`),
//! and `clock` joins the faults (unless `--faults none`: no fault at all).
//! `--clock-rate R` (with `--clock`): every node's clock runs R times as
//! fast for the whole run, set before the clients start and back to 1 at
//! its end; `--drift-factor F`: the clients' drift factor. Controls:
//! `quarantine-off` (rolling empty restarts, no quarantine), `two-of-five`
//! (each client sees three nodes, so two make its quorum), `paused-unfenced`
//! (paused holders write to a store that takes any fence), `trust-aof-off`
//! (AOF switched off on three nodes for over 5 s, then each restarted and
//! its dataset mark written as a kept dataset would show it: the clients
//! trust the restarts, and locks granted meanwhile are forgotten by a
//! majority; its honest twin is `--faults aof-off3 --ttl-ms 20000`, the
//! marks left alone), `clock-steps`
//! (with `--clock`: three nodes' clocks jump at once), `no-drift` (with
//! `--clock`: every clock runs [`NO_DRIFT_RATE`](args::NO_DRIFT_RATE) times as fast, no fault,
//! and the clients subtract no drift; its honest twin is the same run with
//! `--clock-rate 1.25 --drift-factor 0.25 --faults none`), `members-unguarded`
//! (node 5 replaced by a new server and half the clients switched to the new
//! list without a declared change, nodes frozen meanwhile; its honest twin is
//! `--faults freeze,members`: the change declared, every client switching
//! at a time of its own).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redquorum_chaos::check::{Report, Violation, check};
use redquorum_chaos::client::{self, ClientConfig};
use redquorum_chaos::history::{Line, Recorder};
use redquorum_chaos::nemesis::{
    AOF_OFF_MAJORITY, CLOCK_MAJORITY, MEMBERS, Nemesis, replaced, switch_file,
};
use redquorum_test_support::proxy::Proxy;

use args::{Args, parse, usage};
use watch::{caught_so_far, faults_begun, grants_reached};

mod args;
mod watch;

/// Whether `v` is what the negative control `control` is meant to cause:
/// a control caught by something else (a key left) proves nothing.
fn meant(control: &str, v: &Violation) -> bool {
    match control {
        "paused-unfenced" => matches!(v, Violation::StaleWrite { .. }),
        // Keys that expire early, or that a majority forgot, let a second
        // holder in; fences still grow (floored at the nodes' clocks).
        "no-drift" | "trust-aof-off" => matches!(
            v,
            Violation::Overlap { .. } | Violation::TooManyPermits { .. }
        ),
        _ => matches!(
            v,
            Violation::Overlap { .. }
                | Violation::TooManyPermits { .. }
                | Violation::FenceBackwards { .. }
        ),
    }
}

fn main() -> ExitCode {
    let mut words = std::env::args().skip(1);
    let Some(command) = words.next() else {
        return usage("no command");
    };
    if command == "check" {
        let Some(path) = words.next() else {
            return usage("check needs a history file");
        };
        return match read_history(Path::new(&path)) {
            Ok(report) => {
                print!("{report}");
                ExitCode::from(u8::from(!report.violations.is_empty()))
            }
            Err(e) => {
                eprintln!("redquorum-chaos: {path}: {e}");
                ExitCode::from(2)
            }
        };
    }
    let args = match parse(words) {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match command.as_str() {
        "client" => {
            let config = ClientConfig {
                proc: args.proc,
                nodes: args.nodes,
                dir: args.dir,
                ttl: args.ttl,
                max_ttl: args.ttl,
                tasks: args.tasks,
                quarantine: args.quarantine,
                deployment_record: args.deployment_record,
                switch: args.switch,
                trust_durable: args.trust_durable,
                fenced_store: args.fenced_store,
                pause_chance: args.pause_chance,
                seed: args.seed,
                drift_factor: args.drift_factor,
            };
            match runtime.block_on(client::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("redquorum-chaos client: {e}");
                    ExitCode::from(1)
                }
            }
        }
        "run" => runtime.block_on(run(args)),
        other => usage(&format!("unknown command {other}")),
    }
}

fn read_history(path: &Path) -> std::io::Result<Report> {
    let text = std::fs::read_to_string(path)?;
    Ok(check(text.lines().filter_map(Line::parse)))
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (scripts/chaos sets it)"))
}

async fn run(args: Args) -> ExitCode {
    match run_inner(&args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redquorum-chaos run: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run_inner(args: &Args) -> Result<ExitCode, String> {
    // The quarantine-off control: only a holder granted before a rolling
    // restart's first node and still valid after its third can meet a
    // rival. Three Docker restarts take 2.5 s on an idle machine and took
    // up to 16 s on a loaded one, where a 6 s TTL let every holder expire
    // first: a 20 s TTL outlasts that span, and 45 s of run leave room for
    // a second rolling restart (a 20 s run held one, which caught nothing
    // in one full run of five; the run ends once caught, so only a miss
    // pays for the length).
    let mut args = args.clone();
    // The trust-aof-off control likewise: a holder granted while AOF was off
    // on three nodes must still be valid after their three restarts.
    // It first brings back with AOF any node a run left without
    // persistence, and waits out that quarantine: a minute.
    if matches!(
        args.control.as_deref(),
        Some("quarantine-off" | "trust-aof-off")
    ) {
        args.ttl = args.ttl.max(Duration::from_secs(20));
        args.seconds = args.seconds.max(45);
    }
    if args.control.as_deref() == Some("trust-aof-off") {
        args.seconds = args.seconds.max(60);
    }
    // The members-unguarded control needs a long hold of an old-list
    // client across the thaw of two nodes it was granted without; the run
    // ends once caught.
    if args.control.as_deref() == Some("members-unguarded") {
        args.seconds = args.seconds.max(45);
    }
    let args = &args;
    let urls: Vec<String> = env("REDQUORUM_NODES")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let script = PathBuf::from(env("REDQUORUM_SCRIPTS_NODES")?);
    if urls.len() != 5 {
        return Err(format!(
            "five nodes expected, REDQUORUM_NODES has {}",
            urls.len()
        ));
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    let history = args.dir.join("history.log");
    let rec = Arc::new(Recorder::open(&history, "run").map_err(|e| e.to_string())?);
    let control = args.control.as_deref();
    rec.record(
        "note",
        &[
            ("seed", args.seed.to_string()),
            ("control", control.unwrap_or("none").into()),
            ("ttl_ms", args.ttl.as_millis().to_string()),
        ],
    );
    println!(
        "chaos: {} clients x {} tasks, TTL {:?}, up to {} s{}, seed {}, control {}, history {}",
        args.clients,
        args.tasks,
        args.ttl,
        args.seconds,
        args.grants
            .map(|g| format!(" or {g} grants"))
            .unwrap_or_default(),
        args.seed,
        control.unwrap_or("none"),
        history.display()
    );
    let Some(rate) = args.clock_rate else {
        return run_clients(args, &urls, &script, &rec, &history).await;
    };
    // The rate counts from each node's start, so changing it steps the
    // clock too: done before any key of the run is set, and undone after
    // the last scan.
    rec.record(
        "note",
        &[
            ("clock_rate", rate.to_string()),
            (
                "drift_factor",
                args.drift_factor
                    .map_or_else(|| "default".into(), |f| f.to_string()),
            ),
        ],
    );
    println!(
        "chaos: every node's clock {rate}x as fast, drift factor {}",
        args.drift_factor
            .map_or_else(|| "default".into(), |f| f.to_string())
    );
    let set = clock_rates(&script, rate).await;
    let out = match set {
        Ok(()) => run_clients(args, &urls, &script, &rec, &history).await,
        Err(e) => Err(e),
    };
    let reset = clock_rates(&script, 1.0).await;
    match (out, reset) {
        (Ok(_), Err(e)) => Err(format!("{e} (resetting the clock rates after the run)")),
        (out, _) => out,
    }
}

/// Sets every node's clock rate (`scripts/clock-nodes rate N R`).
async fn clock_rates(script: &Path, rate: f64) -> Result<(), String> {
    let mut failed = Vec::new();
    for n in 1..=5 {
        let status = tokio::process::Command::new(script)
            .args(["rate", &n.to_string(), &rate.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .await;
        if !matches!(status, Ok(s) if s.success()) {
            failed.push(n.to_string());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} rate N {rate} failed for node(s) {}",
            script.display(),
            failed.join(", ")
        ))
    }
}

/// The run proper, once the nodes are set up: proxies, client processes,
/// the nemesis, the final scan and the check.
async fn run_clients(
    args: &Args,
    urls: &[String],
    script: &Path,
    rec: &Arc<Recorder>,
    history: &Path,
) -> Result<ExitCode, String> {
    let control = args.control.as_deref();
    // The clients reach each node through a proxy of this process, which
    // the nemesis can have reset the connection carrying a chosen call
    // (`cut`); the nemesis's own commands and the final scan go direct.
    let mut proxies = Vec::new();
    for url in urls {
        let address = url
            .strip_prefix("redis://")
            .filter(|a| !a.contains(['@', '/']))
            .ok_or_else(|| format!("{url}: the chaos run takes plain redis://host:port nodes"))?;
        proxies.push(Arc::new(Proxy::start(address).await));
    }
    let via: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    // Each run is a deployment of its own: its TTL and its proxies' ports
    // (the addresses the record's members are known by) are its own.
    // (And on node 5's second database, the `members` fault's new node.)
    redquorum_chaos::client::forget_deployment(urls).await?;
    redquorum_chaos::client::forget_deployment(&replaced(urls)[4..]).await?;
    let unguarded = control == Some("members-unguarded");
    let members = unguarded || args.faults.iter().any(|f| f == MEMBERS);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for i in 1..=args.clients {
        let nodes = if control == Some("two-of-five") {
            // Two clients that share one node and need two of their three.
            if i % 2 == 1 { &via[0..3] } else { &via[2..5] }
        } else {
            &via[..]
        };
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("client")
            .args(["--proc", &format!("c{i}")])
            .args(["--nodes", &nodes.join(",")])
            .args(["--dir", &args.dir.display().to_string()])
            .args(["--ttl-ms", &args.ttl.as_millis().to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--seed", &(args.seed.wrapping_add(i as u64)).to_string()])
            .args([
                "--pause-chance",
                if control == Some("paused-unfenced") {
                    "0.2"
                } else {
                    "0.01"
                },
            ])
            .kill_on_drop(true);
        if control == Some("quarantine-off") {
            cmd.arg("--no-quarantine");
        }
        if control == Some("two-of-five") || unguarded {
            // Clients that list different nodes: what the deployment
            // record refuses (docs/agreement.md), broken on purpose.
            cmd.arg("--no-deployment-record");
        }
        // With the `members` fault every client switches to the new list
        // (once declared, at a time of its own); in the control, half of
        // them, at once, the others staying on the old list.
        if members && (!unguarded || i % 2 == 1) {
            cmd.arg("--switch");
        }
        if !args.trust_durable {
            cmd.arg("--no-trust-durable-restarts");
        }
        if let Some(factor) = args.drift_factor {
            cmd.args(["--drift-factor", &factor.to_string()]);
        }
        if control == Some("paused-unfenced") {
            cmd.arg("--open-store");
        }
        children.push(cmd.spawn().map_err(|e| format!("spawning a client: {e}"))?);
    }
    let faults: Vec<String> = match control {
        Some("quarantine-off") => vec!["rolling".into()],
        Some("two-of-five") => vec!["freeze".into()],
        Some("members-unguarded") => vec!["freeze".into(), MEMBERS.into()],
        Some("clock-steps") => vec![CLOCK_MAJORITY.into()],
        Some("trust-aof-off") => vec![AOF_OFF_MAJORITY.into()],
        _ => args.faults.clone(),
    };
    let nemesis = Nemesis {
        script: script.to_path_buf(),
        urls: urls.to_vec(),
        faults,
        ttl: args.ttl,
        // As long as a client keeps a node restarted empty out: the
        // longest TTL (the run's), its drift allowance, and the second the
        // server's uptime may be ahead (`restart::SECOND_CUT`).
        quarantine: args.ttl.mul_f64(1.0 + args.drift_factor.unwrap_or(0.01))
            + redquorum::internals::restart::SECOND_CUT
            + Duration::from_millis(3),
        quarantine_off: control == Some("quarantine-off"),
        trust_durable: args.trust_durable,
        forge_marks: control == Some("trust-aof-off"),
        rec: rec.clone(),
        clients: children.iter().filter_map(|c| c.id()).collect(),
        faulted: Default::default(),
        proxies,
        switch: switch_file(&args.dir),
        declare_members: !unguarded,
    };
    let watcher = tokio::spawn(Arc::new(nemesis.clone()).resume_self_stopped());
    let stop = Arc::new(AtomicBool::new(false));
    let faults_run = nemesis.faults.clone();
    let faults = tokio::spawn(nemesis.run(stop.clone(), args.seed));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.seconds);
    tokio::select! {
        _ = grants_reached(history, args.grants) => {}
        _ = tokio::time::sleep_until(deadline) => {}
        _ = caught_so_far(history, control) => {}
    }
    // A run proves nothing of a fault that never began: one still to begin
    // gets its turn, the run going on at most `seconds` more for it (a
    // loaded machine slows the faults, and each waits for room).
    if control.is_none() {
        let more = Duration::from_secs(args.seconds);
        let _ = tokio::time::timeout(more, faults_begun(history, &faults_run)).await;
    }
    // Faults end (each after its hold), every node answers again, then the
    // clients finish their holds and release.
    stop.store(true, Ordering::Relaxed);
    let _ = faults.await;
    for (i, url) in urls.iter().enumerate() {
        if !answers(url, Duration::from_secs(30)).await {
            return Err(format!("node {} does not answer after the faults", i + 1));
        }
    }
    std::fs::write(client::stop_file(&args.dir), b"").map_err(|e| e.to_string())?;
    for (i, mut child) in children.into_iter().enumerate() {
        let bound = args.ttl * 10 + Duration::from_secs(30);
        match tokio::time::timeout(bound, child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            other => {
                let _ = child.kill().await;
                return Err(format!(
                    "client c{} did not finish cleanly: {other:?}",
                    i + 1
                ));
            }
        }
    }
    watcher.abort();
    for (i, url) in urls.iter().enumerate() {
        leftovers(i + 1, url, rec).await?;
    }
    let report = read_history(history).map_err(|e| e.to_string())?;
    print!("{report}");
    let caught = !report.violations.is_empty();
    let never: Vec<&str> = faults_run
        .iter()
        .filter(|f| !report.faults.contains_key(f.as_str()))
        .map(String::as_str)
        .collect();
    Ok(match control {
        None if caught => ExitCode::from(1),
        None if report.total_grants() == 0 => {
            println!("chaos: no grant at all: the run proved nothing");
            ExitCode::from(1)
        }
        None if !never.is_empty() => {
            println!(
                "chaos: faults that never began: {} (a longer run)",
                never.join(", ")
            );
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
        Some(c) if report.violations.iter().any(|v| meant(c, v)) => {
            println!("chaos: negative control {c} caught");
            ExitCode::SUCCESS
        }
        Some(c) => {
            println!("chaos: negative control {c} NOT caught: the checker missed it");
            ExitCode::from(1)
        }
    })
}

async fn connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Whether the node at `url` answers PING within `bound`.
async fn answers(url: &str, bound: Duration) -> bool {
    let ping = async {
        loop {
            if let Ok(mut c) = connection(url).await
                && redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(bound, ping).await.is_ok()
}

/// Records every key of the run that still has a TTL on node `n`: each is
/// a hold that was released yet stayed.
async fn leftovers(n: usize, url: &str, rec: &Recorder) -> Result<(), String> {
    let mut c = connection(url)
        .await
        .map_err(|e| format!("node {n}: {e}"))?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("chaos:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .map_err(|e| format!("node {n}: {e}"))?;
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut c)
                .await
                .map_err(|e| format!("node {n}: {e}"))?;
            if pttl > 0 {
                rec.record(
                    "left",
                    &[
                        ("node", n.to_string()),
                        ("key", key.replace(char::is_whitespace, "_")),
                        ("pttl", pttl.to_string()),
                    ],
                );
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
