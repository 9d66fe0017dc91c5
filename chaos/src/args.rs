//! The command line of `redquorum-chaos run`: what a run is asked for, and
//! what each negative control sets.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use redquorum_chaos::nemesis::{AOF_OFF_MAJORITY, CLOCK, FAULTS, MEMBERS};

pub(crate) const CONTROLS: &[&str] = &[
    "quarantine-off",
    "two-of-five",
    "paused-unfenced",
    "clock-steps",
    "no-drift",
    "trust-aof-off",
    "members-unguarded",
];

/// How fast the clocks of the `no-drift` control run. The longest ordinary
/// hold is 0.9 of what was left of the validity (crate::client), about
/// 1.8 s of a 2 s TTL: the keys must expire sooner than that for a hold to
/// outlive them, so the rate must be above 1/0.9; at 1.25 they expire after
/// 1.6 s. A drift factor of 0.2 covers it; the honest twin takes 0.25.
pub(crate) const NO_DRIFT_RATE: f64 = 1.25;

#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) seconds: u64,
    pub(crate) grants: Option<u64>,
    pub(crate) clients: usize,
    pub(crate) tasks: usize,
    pub(crate) ttl: Duration,
    pub(crate) faults: Vec<String>,
    pub(crate) clock: bool,
    /// Every node's clock this many times as fast, for the run.
    pub(crate) clock_rate: Option<f64>,
    /// The clients' drift factor.
    pub(crate) drift_factor: Option<f64>,
    pub(crate) control: Option<String>,
    pub(crate) dir: PathBuf,
    pub(crate) seed: u64,
    // client only
    pub(crate) proc: String,
    pub(crate) nodes: Vec<String>,
    pub(crate) quarantine: bool,
    /// Clients keep the deployment record (off: the two-of-five control,
    /// whose clients list different nodes on purpose).
    pub(crate) deployment_record: bool,
    /// The clients trust durable restarts (run and client; default on).
    pub(crate) trust_durable: bool,
    /// The client switches to the list the `members` fault's switch file
    /// names when it appears.
    pub(crate) switch: bool,
    pub(crate) fenced_store: bool,
    pub(crate) pause_chance: f64,
}

pub(crate) fn usage(why: &str) -> ExitCode {
    eprintln!("redquorum-chaos: {why}");
    eprintln!(
        "usage: redquorum-chaos run [--seconds S] [--grants N] [--clients K] [--tasks T] \
         [--ttl-ms MS] [--faults a,b|none] [--clock] [--clock-rate R] [--drift-factor F] \
         [--no-trust-durable-restarts] [--control {}] [--dir DIR] [--seed N]\n       \
         redquorum-chaos check HISTORY\nfaults: {},{CLOCK} (with --clock),{AOF_OFF_MAJORITY} (three nodes at once),{MEMBERS} (node 5 replaced, once)",
        CONTROLS.join("|"),
        FAULTS.join(",")
    );
    ExitCode::from(2)
}

pub(crate) fn parse(mut words: impl Iterator<Item = String>) -> Result<Args, String> {
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
        deployment_record: true,
        switch: false,
        trust_durable: true,
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
                if let Some(bad) = a.faults.iter().find(|f| {
                    !FAULTS.contains(&f.as_str())
                        && ![CLOCK, AOF_OFF_MAJORITY, MEMBERS].contains(&f.as_str())
                }) {
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
            "--no-deployment-record" => a.deployment_record = false,
            "--switch" => a.switch = true,
            "--no-trust-durable-restarts" => a.trust_durable = false,
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
    if a.control.as_deref() == Some("trust-aof-off") {
        // The opt-in's assumption broken, with the clients trusting it.
        a.trust_durable = true;
    }
    if a.control.as_deref() == Some("no-drift") {
        // Fast clocks, nothing subtracted for them, and nothing else.
        a.clock_rate = Some(NO_DRIFT_RATE);
        a.drift_factor = Some(0.0);
        a.faults.clear();
    }
    Ok(a)
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
    fn runs_trust_durable_restarts_unless_told_not_to() {
        assert!(args("").unwrap().trust_durable);
        assert!(!args("--no-trust-durable-restarts").unwrap().trust_durable);
        let control = args("--control trust-aof-off --no-trust-durable-restarts").unwrap();
        assert!(
            control.trust_durable,
            "the control is about trusting clients"
        );
        assert!(args("--faults aof-off,lost-volume").is_ok());
        // The control's honest twin: its fault, the marks left alone.
        assert!(args("--faults aof-off3").is_ok());
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
