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
//! cause). `--clock`: the nodes' clocks can be stepped (`scripts/clock-nodes`),
//! and `clock` joins the faults (unless `--faults none`: no fault at all).
//! `--clock-rate R` (with `--clock`): every node's clock runs R times as
//! fast for the whole run, set before the clients start and back to 1 at
//! its end; `--drift-factor F`: the clients' drift factor. Controls:
//! `quarantine-off` (rolling empty restarts, no quarantine), `two-of-five`
//! (each client sees three nodes, so two make its quorum), `paused-unfenced`
//! (paused holders write to a store that takes any fence), `clock-steps`
//! (with `--clock`: three nodes' clocks jump at once), `no-drift` (with
//! `--clock`: every clock runs [`NO_DRIFT_RATE`] times as fast, no fault,
//! and the clients subtract no drift; its honest twin is the same run with
//! `--clock-rate 1.25 --drift-factor 0.25 --faults none`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redquorum_chaos::check::{Report, Violation, check};
use redquorum_chaos::client::{self, ClientConfig};
use redquorum_chaos::history::{Line, Recorder};
use redquorum_chaos::nemesis::{CLOCK, CLOCK_MAJORITY, FAULTS, Nemesis};
use redquorum_test_support::proxy::Proxy;

const CONTROLS: &[&str] = &[
    "quarantine-off",
    "two-of-five",
    "paused-unfenced",
    "clock-steps",
    "no-drift",
];

/// How fast the clocks of the `no-drift` control run. The longest ordinary
/// hold is 0.9 of what was left of the validity (crate::client), about
/// 1.8 s of a 2 s TTL: the keys must expire sooner than that for a hold to
/// outlive them, so the rate must be above 1/0.9; at 1.25 they expire after
/// 1.6 s. A drift factor of 0.2 covers it; the honest twin takes 0.25.
const NO_DRIFT_RATE: f64 = 1.25;

/// Whether `v` is what the negative control `control` is meant to cause:
/// a control caught by something else (a key left) proves nothing.
fn meant(control: &str, v: &Violation) -> bool {
    match control {
        "paused-unfenced" => matches!(v, Violation::StaleWrite { .. }),
        // Keys that expire early let a second holder in; fences still grow.
        "no-drift" => matches!(
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

#[derive(Debug, Clone)]
struct Args {
    seconds: u64,
    grants: Option<u64>,
    clients: usize,
    tasks: usize,
    ttl: Duration,
    faults: Vec<String>,
    clock: bool,
    /// Every node's clock this many times as fast, for the run.
    clock_rate: Option<f64>,
    /// The clients' drift factor.
    drift_factor: Option<f64>,
    control: Option<String>,
    dir: PathBuf,
    seed: u64,
    // client only
    proc: String,
    nodes: Vec<String>,
    quarantine: bool,
    fenced_store: bool,
    pause_chance: f64,
}

fn usage(why: &str) -> ExitCode {
    eprintln!("redquorum-chaos: {why}");
    eprintln!(
        "usage: redquorum-chaos run [--seconds S] [--grants N] [--clients K] [--tasks T] \
         [--ttl-ms MS] [--faults a,b|none] [--clock] [--clock-rate R] [--drift-factor F] \
         [--control {}] [--dir DIR] [--seed N]\n       \
         redquorum-chaos check HISTORY\nfaults: {},{CLOCK} (with --clock)",
        CONTROLS.join("|"),
        FAULTS.join(",")
    );
    ExitCode::from(2)
}

fn parse(mut words: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        seconds: 60,
        grants: None,
        clients: 4,
        tasks: 4,
        ttl: Duration::from_millis(2000),
        faults: FAULTS.iter().map(|s| s.to_string()).collect(),
        clock: false,
        clock_rate: None,
        drift_factor: None,
        control: None,
        dir: PathBuf::from("target/chaos"),
        seed: rand::random(),
        proc: String::new(),
        nodes: Vec::new(),
        quarantine: true,
        fenced_store: true,
        pause_chance: 0.0,
    };
    // `--faults none`: no fault at all, not even `clock` with `--clock`.
    let mut no_faults = false;
    while let Some(flag) = words.next() {
        let mut value = || words.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        let real = |v: String| {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or(format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--seconds" => a.seconds = num(value()?)?,
            "--grants" => a.grants = Some(num(value()?)?),
            "--clients" => a.clients = num(value()?)?.clamp(1, 16) as usize,
            "--tasks" => a.tasks = num(value()?)?.clamp(1, 64) as usize,
            "--ttl-ms" => a.ttl = Duration::from_millis(num(value()?)?.clamp(200, 60_000)),
            "--seed" => a.seed = num(value()?)?,
            "--dir" => a.dir = PathBuf::from(value()?),
            "--faults" => {
                let v = value()?;
                no_faults = v == "none";
                a.faults = v
                    .split(',')
                    .filter(|s| *s != "none")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                if let Some(bad) = a
                    .faults
                    .iter()
                    .find(|f| !FAULTS.contains(&f.as_str()) && f.as_str() != CLOCK)
                {
                    return Err(format!("unknown fault {bad}"));
                }
            }
            "--clock" => a.clock = true,
            "--clock-rate" => {
                let r = real(value()?)?;
                if !(0.5..=4.0).contains(&r) {
                    return Err(format!("--clock-rate {r}: between 0.5 and 4"));
                }
                a.clock_rate = Some(r);
            }
            "--drift-factor" => {
                let f = real(value()?)?;
                if !(0.0..1.0).contains(&f) {
                    return Err(format!("--drift-factor {f}: in [0, 1)"));
                }
                a.drift_factor = Some(f);
            }
            "--control" => {
                let v = value()?;
                if !CONTROLS.contains(&v.as_str()) {
                    return Err(format!("unknown control {v}"));
                }
                a.control = Some(v);
            }
            "--proc" => a.proc = value()?,
            "--nodes" => a.nodes = value()?.split(',').map(str::to_owned).collect(),
            "--no-quarantine" => a.quarantine = false,
            "--open-store" => a.fenced_store = false,
            "--pause-chance" => {
                let v = value()?;
                a.pause_chance = v.parse().map_err(|_| format!("--pause-chance: {v}"))?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.clock && !no_faults && !a.faults.iter().any(|f| f == CLOCK) {
        a.faults.push(CLOCK.to_owned());
    }
    if !a.clock && a.faults.iter().any(|f| f == CLOCK) {
        return Err("the clock fault needs --clock (nodes whose clocks step)".into());
    }
    if let Some(c @ ("clock-steps" | "no-drift")) = a.control.as_deref()
        && !a.clock
    {
        return Err(format!("the {c} control needs --clock"));
    }
    if a.clock_rate.is_some() && !a.clock {
        return Err("--clock-rate needs --clock (nodes whose clocks can run fast)".into());
    }
    if a.control.as_deref() == Some("no-drift") {
        // Fast clocks, nothing subtracted for them, and nothing else.
        a.clock_rate = Some(NO_DRIFT_RATE);
        a.drift_factor = Some(0.0);
        a.faults.clear();
    }
    Ok(a)
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
    // Rolling restarts take about 2.5 s for three nodes: a TTL that holds
    // span, so that forgetting a majority can bite when nothing guards it.
    let mut args = args.clone();
    if args.control.as_deref() == Some("quarantine-off") {
        args.ttl = args.ttl.max(Duration::from_secs(6));
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
        Some("clock-steps") => vec![CLOCK_MAJORITY.into()],
        _ => args.faults.clone(),
    };
    let nemesis = Nemesis {
        script: script.to_path_buf(),
        urls: urls.to_vec(),
        faults,
        ttl: args.ttl,
        quarantine: args.ttl,
        rec: rec.clone(),
        clients: children.iter().filter_map(|c| c.id()).collect(),
        faulted: Default::default(),
        proxies,
    };
    let watcher = tokio::spawn(Arc::new(nemesis.clone()).resume_self_stopped());
    let stop = Arc::new(AtomicBool::new(false));
    let faults_run = nemesis.faults.clone();
    let faults = tokio::spawn(nemesis.run(stop.clone(), args.seed));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.seconds);
    tokio::select! {
        _ = grants_reached(history, args.grants) => {}
        _ = tokio::time::sleep_until(deadline) => {}
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

/// Resolves once the history holds `want` grants; never without `want`.
async fn grants_reached(history: &Path, want: Option<u64>) {
    let Some(want) = want else {
        return std::future::pending().await;
    };
    // Only what was appended since the last look is read (the history of
    // a long run is tens of MB); lines are whole (one write(2) each), but
    // a read may end inside one: its start is read again next time.
    let (mut offset, mut grants) = (0u64, 0u64);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(new) = read_from(history, offset).await else {
            continue;
        };
        let whole = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        grants += String::from_utf8_lossy(&new[..whole])
            .matches(" grant ")
            .count() as u64;
        offset += whole as u64;
        if grants >= want {
            return;
        }
    }
}

/// What `path` holds from byte `offset` on.
async fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut new = Vec::new();
    file.read_to_end(&mut new).await?;
    Ok(new)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Result<Args, String> {
        parse(words.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn no_drift_is_fast_clocks_no_drift_and_no_fault() {
        let a = args("--clock --control no-drift --drift-factor 0.3 --faults freeze").unwrap();
        assert_eq!(a.clock_rate, Some(NO_DRIFT_RATE));
        assert_eq!(a.drift_factor, Some(0.0));
        assert!(a.faults.is_empty(), "{:?}", a.faults);
        assert!(args("--control no-drift").is_err(), "needs --clock");
    }

    #[test]
    fn its_honest_twin_differs_in_the_drift_factor_only() {
        let a = args("--clock --clock-rate 1.25 --drift-factor 0.25 --faults none").unwrap();
        let (rate, drift) = (a.clock_rate.unwrap(), a.drift_factor.unwrap());
        assert_eq!((rate, drift), (NO_DRIFT_RATE, 0.25));
        assert!(a.faults.is_empty(), "{:?}", a.faults);
        assert!(a.control.is_none());
        // A drift factor of 0.25 covers clocks 1.25x fast: a key set for a
        // TTL lives TTL / 1.25 = 0.8 TTL, the client counts on 0.75 TTL.
        assert!(1.0 - drift < 1.0 / rate);
    }

    #[test]
    fn clock_runs_keep_the_clock_fault_unless_none() {
        let a = args("--clock --faults freeze").unwrap();
        assert_eq!(a.faults, ["freeze", CLOCK]);
        assert!(args("--clock-rate 1.1").is_err(), "needs --clock");
        assert!(args("--clock --drift-factor 1").is_err());
        assert!(args("--clock --clock-rate nan").is_err());
    }
}
