//! `redquorum exec`: acquire, run the command under a kept-alive lease,
//! stop it when the lease cannot be kept, release.

use std::io;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Pid, getpgrp};
use redquorum::AcquireOptions;
use redquorum::LockOptions;
use redquorum::RwLock;
use redquorum::{Lease, Lock, LockError, Redlock, Retry, Semaphore};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::cli::{ExecArgs, Global};
use crate::exit::{self, Code};
use crate::process::{
    Signals, become_subreaper, group_alive, kill_with_parent, name, signal_group,
};
use crate::ui::Ui;

/// Below this a lease cannot be kept alive and a command stopped in time.
const MIN_TTL: Duration = Duration::from_millis(100);
/// The pause ceiling between rounds while waiting (releases wake waiters
/// sooner; see `Builder::notify_waiters`).
const WAIT_PAUSE: Duration = Duration::from_millis(200);
/// `--grace` unless the TTL is under four times this.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// How often a left-over process group is checked for having gone.
const GROUP_POLL: Duration = Duration::from_millis(20);

pub async fn exec(global: &Global, nodes: &[String], mut args: ExecArgs, ui: &Ui) -> Code {
    // Once per period: the period is --at-least's, kept by its own mark,
    // and the lease needs no more than --max-ttl (scripts written when
    // --at-least had to be within --ttl give --ttl as long as the period).
    let max_ttl = global.max_ttl.unwrap_or(redquorum::DEFAULT_MAX_TTL);
    if args.at_least.is_some() && args.ttl > max_ttl {
        ui.note(format_args!(
            "--ttl {} is above --max-ttl {}: the lease is kept in steps of {} (--at-least \
             keeps the period by itself)",
            humantime::format_duration(args.ttl),
            humantime::format_duration(max_ttl),
            humantime::format_duration(max_ttl)
        ));
        args.ttl = max_ttl;
    }
    if args.ttl < MIN_TTL {
        ui.usage(&format!(
            "--ttl {} is too short: at least {}",
            humantime::format_duration(args.ttl),
            humantime::format_duration(MIN_TTL)
        ));
        return exit::USAGE;
    }
    let grace = args.grace.unwrap_or(DEFAULT_GRACE.min(args.ttl / 4));
    if grace.saturating_mul(3) > args.ttl {
        ui.usage(&format!(
            "--grace {} must be at most a third of --ttl {}: the command must be stoppable \
             within the lock's validity once extensions start failing",
            humantime::format_duration(grace),
            humantime::format_duration(args.ttl)
        ));
        return exit::USAGE;
    }
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => {
            ui.error(format_args!("cannot handle signals: {e}"));
            return exit::OSERR;
        }
    };
    // One round unless --wait; while waiting, pauses up to WAIT_PAUSE.
    let redlock = match crate::connect(global, nodes, Retry::new(1, WAIT_PAUSE)).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let code = exec_with(&redlock, args, grace, &mut signals, ui).await;
    // Whatever the way out, what was handed to the nodes reaches them
    // before the process ends: the tail of a release, the release of a
    // round given up, a writer's intent taken back.
    redlock.shutdown().await;
    code
}

/// [`exec`] on a connected client.
async fn exec_with(
    redlock: &Redlock,
    args: ExecArgs,
    grace: Duration,
    signals: &mut Signals,
    ui: &Ui,
) -> Code {
    let mut options = AcquireOptions::new();
    if let Some(wait) = args.wait {
        options = options.wait(wait);
    }
    if !args.read {
        let label = args.label.clone().unwrap_or_else(default_label);
        options = options.label(&label);
    }
    let (lock, slot) = match acquire(redlock, &args, &options, signals, ui).await {
        Ok(held) => held,
        Err(code) => return code,
    };
    let resource = args.resource.as_str();
    // The permit's slot.
    let permit = slot.map(|slot| slot.to_string());
    let token = lock.token().to_owned();
    let fence = lock.fence();
    tracing::info!(
        resource,
        token = &token[..token.len().min(8)],
        fence,
        remaining_ms = lock.remaining().as_millis() as u64,
        "acquired"
    );
    let watchdog = match lock.keep_alive() {
        Ok(watchdog) => watchdog,
        Err(e) => {
            // The lock was dropped, and is being released in the background.
            ui.usage(&format!("cannot keep the lease alive: {e}"));
            return exit::USAGE;
        }
    };
    let lease = watchdog.lease().clone();

    become_subreaper();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDQUORUM_RESOURCE", resource)
        .env("REDQUORUM_TOKEN", &token)
        .env_remove("REDQUORUM_PERMIT")
        // The node list may carry passwords: the command gets the lock's
        // variables, not the credentials (docs/cli.md says how to pass them
        // on deliberately).
        .env_remove("REDQUORUM_NODES")
        .process_group(0);
    match fence {
        Some(fence) => command.env("REDQUORUM_FENCE", fence.to_string()),
        None => command.env_remove("REDQUORUM_FENCE"),
    };
    match fence.filter(|_| args.term) {
        Some(term) => command.env("REDQUORUM_TERM", term.to_string()),
        None => command.env_remove("REDQUORUM_TERM"),
    };
    if let Some(slot) = &permit {
        command.env("REDQUORUM_PERMIT", slot);
    }
    kill_with_parent(&mut command);
    let code = match command.spawn() {
        Ok(mut child) => match child.id().and_then(|id| i32::try_from(id).ok()) {
            Some(pgid) if pgid > 1 && Pid::from_raw(pgid) != getpgrp() => {
                let group = Pid::from_raw(pgid);
                let run = Run {
                    group,
                    lease: &lease,
                    grace,
                    ui,
                    resource,
                };
                let (code, kill_at) = run.supervise(&mut child, signals).await;
                run.sweep_group(kill_at).await;
                code
            }
            _ => {
                ui.error(format_args!("the command has no process id of its own"));
                let _ = child.start_kill();
                let _ = child.wait().await;
                exit::SOFTWARE
            }
        },
        Err(e) => {
            let shown = args.command[0].to_string_lossy();
            ui.error(format_args!("cannot run {shown}: {e}"));
            match e.kind() {
                io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            }
        }
    };

    let lost = code == exit::LOST;
    if let Err(e) = watchdog.release().await {
        if lost {
            tracing::info!(resource, error = %e, "release after loss failed");
        } else {
            ui.note(format_args!(
                "could not release {resource} (its keys expire at their TTL): {e}"
            ));
        }
    }
    // `release` returns at a quorum and finishes in the background: the
    // caller's `shutdown` lets it reach the other nodes.
    code
}

/// Who holds a lock taken without `--label`: this host and process.
fn default_label() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host} pid {}", std::process::id())
}

/// Acquires the lock, with a spinner after a second of waiting; a signal
/// stops waiting.
async fn acquire(
    redlock: &Redlock,
    args: &ExecArgs,
    options: &AcquireOptions,
    signals: &mut Signals,
    ui: &Ui,
) -> Result<(Lock, Option<u32>), Code> {
    let resource = args.resource.as_str();
    let spinner = ui.spinner(format!("waiting for the lock on {resource}"));
    let lock = |l: Lock| (l, None);
    let mut attempt: Attempt<'_> = match args.permits {
        None if args.read => Box::pin(async move {
            RwLock::new(redlock, resource)?
                .read_with(args.ttl, options)
                .await
                .map(lock)
        }),
        None if args.write => Box::pin(async move {
            RwLock::new(redlock, resource)?
                .write_with(args.ttl, options)
                .await
                .map(lock)
        }),
        None => {
            // What only a plain lock carries (clap refuses them with the others).
            let mut plain = LockOptions::from(options.clone());
            if args.fence {
                plain = plain.fenced();
            }
            if let Some(at_least) = args.at_least {
                plain = plain.hold_at_least(at_least);
            }
            Box::pin(async move {
                redlock
                    .lock_with(resource, args.ttl, &plain)
                    .await
                    .map(lock)
            })
        }
        Some(permits) => {
            let semaphore = match Semaphore::new(redlock, resource, permits) {
                Ok(semaphore) => semaphore,
                Err(e) => {
                    spinner.clear();
                    ui.usage(&e.to_string());
                    return Err(exit::USAGE);
                }
            };
            let (ttl, options) = (args.ttl, options.clone());
            Box::pin(async move {
                semaphore.acquire_with(ttl, &options).await.map(|permit| {
                    let slot = permit.slot();
                    (permit.into_lock(), Some(slot))
                })
            })
        }
    };
    let show = tokio::time::sleep(Duration::from_secs(1));
    tokio::pin!(show);
    let mut shown = false;
    loop {
        tokio::select! {
            result = &mut attempt => {
                spinner.clear();
                drop(attempt);
                return match result {
                    Ok(held) => Ok(held),
                    Err(e) => {
                        let code = not_acquired(&e, args, ui);
                        quarantines(redlock, &e, ui).await;
                        Err(code)
                    }
                };
            }
            () = &mut show, if !shown => {
                shown = true;
                spinner.show();
            }
            signo = signals.next(ui) => {
                spinner.clear();
                // Dropping the attempt releases whatever its round had set
                // and takes a writer's intent back, in the background; the
                // caller's `shutdown` waits for those calls.
                drop(attempt);
                ui.note(format_args!("got {}: gave up waiting for {resource}", name(signo)));
                return Err(exit::signalled(signo));
            }
        }
    }
}

/// Acquiring: the lock, and a permit's slot.
type Attempt<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(Lock, Option<u32>), LockError>> + Send + 'a>,
>;

/// After a refusal that counted quarantined nodes' yes as no: which nodes,
/// and for how long more (their standing, read by a probe).
async fn quarantines(redlock: &Redlock, error: &LockError, ui: &Ui) {
    let last = match error {
        LockError::Timeout { last, .. } => last.as_ref(),
        other => other,
    };
    let Some(votes) = last.votes() else {
        return;
    };
    if votes.count(|a| matches!(a, redquorum::Answer::Quarantined)) == 0 {
        return;
    }
    let health = redlock.nodes().probe(Duration::from_millis(500)).await;
    let lines: Vec<String> = health
        .iter()
        .filter_map(|h| {
            let left = h.quarantined_for?;
            let left = Duration::from_secs(left.as_secs().max(1));
            Some(format!(
                "{} ({} more)",
                h.node,
                humantime::format_duration(left)
            ))
        })
        .collect();
    if !lines.is_empty() {
        ui.note(format_args!(
            "quarantined (restarted, or first seen, within --max-ttl; their yes does not count): {}",
            lines.join(", ")
        ));
    }
}

/// The exit code and message for a lock not had.
fn not_acquired(error: &LockError, args: &ExecArgs, ui: &Ui) -> Code {
    let resource = args.resource.as_str();
    tracing::info!(resource, %error, "not acquired");
    let (last, waited) = match error {
        LockError::Timeout { last, waited } => (last.as_ref(), Some(*waited)),
        other => (other, None),
    };
    let after = waited
        .map(|w| {
            let w = Duration::from_millis(w.as_millis() as u64);
            format!(" after waiting {}", humantime::format_duration(w))
        })
        .unwrap_or_default();
    match last {
        LockError::Taken { votes } => {
            let (held, n) = (votes.held(), votes.len());
            let quarantined = votes.count(|a| matches!(a, redquorum::Answer::Quarantined));
            let n = if quarantined > 0 {
                format!("{n}, {quarantined} quarantined")
            } else {
                n.to_string()
            };
            let what = match (args.permits, args.read, args.write) {
                (Some(permits), ..) => format!("all {permits} permits of {resource} are held"),
                (_, true, _) => format!(
                    "{resource} has a writer, or a writer waiting (refused by {held} of {n} nodes)"
                ),
                (_, _, true) => format!(
                    "{resource} is held by readers or another writer (refused by {held} of {n} nodes)"
                ),
                _ => format!("{resource} is held elsewhere (refused by {held} of {n} nodes)"),
            };
            let hint = if args.wait.is_none() {
                "; --wait D waits for it"
            } else {
                ""
            };
            ui.note(format_args!("{what}; not acquired{after}{hint}"));
            exit::TEMPFAIL
        }
        LockError::Expired { votes } => {
            ui.note(format_args!(
                "{resource}: a quorum agreed too late ({votes}); not acquired{after}"
            ));
            exit::TEMPFAIL
        }
        LockError::Unavailable { votes } if crate::denied(votes) => {
            ui.error(format_args!(
                "cannot lock {resource}: the nodes refuse this user ({votes}); grant the \
                 commands docs/operations.md lists, or fix the credentials"
            ));
            exit::NOPERM
        }
        LockError::Unavailable { votes } => {
            ui.error(format_args!(
                "too few nodes answered to lock {resource}{after}: {votes}"
            ));
            exit::UNAVAILABLE
        }
        LockError::Input(e) => {
            ui.usage(&e.to_string());
            exit::USAGE
        }
        LockError::PermitCount { held_under, .. } => {
            let asked = args.permits.unwrap_or_default();
            ui.usage(&format!(
                "{resource} is held by commands run with -n {held_under}, not -n {asked}: \
                 every exec of {resource} must give the same -n (change it once they are done)"
            ));
            exit::USAGE
        }
        other => {
            ui.error(format_args!("cannot lock {resource}: {other}"));
            exit::SOFTWARE
        }
    }
}

/// Why the command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Lost,
    Signal(i32),
}

#[derive(Debug)]
struct Stopping {
    cause: Cause,
    /// When SIGKILL follows, unless the group has gone.
    kill_at: Instant,
    killed: bool,
}

/// One running command and its lease.
struct Run<'a> {
    group: Pid,
    lease: &'a Lease,
    grace: Duration,
    ui: &'a Ui,
    resource: &'a str,
}

impl Run<'_> {
    /// Waits for the command, stopping it when the lease cannot be kept or a
    /// signal comes. Returns the exit code, and when the group is to be
    /// killed if it is being stopped.
    async fn supervise(&self, child: &mut Child, signals: &mut Signals) -> (Code, Option<Instant>) {
        let (resource, grace, group) = (self.resource, self.grace, self.group);
        let mut lost = std::pin::pin!(self.lease.lost());
        let mut lost_seen = false;
        let mut stopping: Option<Stopping> = None;
        loop {
            let deadline = Instant::from_std(self.lease.deadline());
            // Once less than `grace` of validity is left, the command must
            // stop now to be gone by the end of the validity.
            let danger_at = deadline.checked_sub(grace).unwrap_or(deadline);
            let kill_at = stopping.as_ref().filter(|s| !s.killed).map(|s| s.kill_at);
            tokio::select! {
                biased;
                status = child.wait() => {
                    let kill_at = kill_at.or_else(|| Some(Instant::now() + grace));
                    let status = match status {
                        Ok(status) => status,
                        Err(e) => {
                            self.ui.error(format_args!("cannot wait for the command: {e}"));
                            signal_group(group, Signal::SIGKILL);
                            return (exit::SOFTWARE, None);
                        }
                    };
                    let code = match stopping.map(|s| s.cause) {
                        None => exit::of_status(status),
                        Some(Cause::Lost) => {
                            self.ui.note(format_args!(
                                "the command was stopped because the lease on {resource} was lost ({status})"
                            ));
                            exit::LOST
                        }
                        Some(Cause::Signal(signo)) => exit::signalled(signo),
                    };
                    return (code, kill_at);
                }
                signo = signals.next(self.ui) => match &mut stopping {
                    None => {
                        self.ui.note(format_args!(
                            "got {}: passing it on to the command (process group {group})",
                            name(signo)
                        ));
                        signal_group(group, Signal::try_from(signo).unwrap_or(Signal::SIGTERM));
                        stopping = Some(Stopping {
                            cause: Cause::Signal(signo),
                            kill_at: Instant::now() + grace,
                            killed: false,
                        });
                    }
                    Some(s) if !s.killed => {
                        self.ui.note(format_args!("got {} again: killing the command", name(signo)));
                        signal_group(group, Signal::SIGKILL);
                        s.killed = true;
                    }
                    Some(_) => {}
                },
                () = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    if stopping.is_none() {
                        self.ui.note(format_args!(
                            "lease on {resource} lost: stopping the command (SIGTERM to process group {group})"
                        ));
                        signal_group(group, Signal::SIGTERM);
                        stopping = Some(Stopping {
                            cause: Cause::Lost,
                            kill_at: Instant::now() + grace,
                            killed: false,
                        });
                    }
                }
                () = tokio::time::sleep_until(danger_at), if stopping.is_none() => {
                    let left = self.lease.remaining();
                    // Otherwise the lease was extended meanwhile: look again.
                    if left <= grace {
                        self.ui.note(format_args!(
                            "lease on {resource} could not be extended and has {} left: stopping \
                             the command (SIGTERM to process group {group})",
                            humantime::format_duration(left)
                        ));
                        signal_group(group, Signal::SIGTERM);
                        stopping = Some(Stopping {
                            cause: Cause::Lost,
                            kill_at: (Instant::now() + grace).min(deadline),
                            killed: false,
                        });
                    }
                }
                () = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    self.ui.note(format_args!(
                        "the command is still running: SIGKILL to process group {group}"
                    ));
                    signal_group(group, Signal::SIGKILL);
                    if let Some(s) = &mut stopping {
                        s.killed = true;
                    }
                }
            }
        }
    }

    /// Stops whatever the command left running in its process group before
    /// the lock is released: SIGTERM, then SIGKILL at `kill_at` or at the end
    /// of the validity, whichever is first.
    async fn sweep_group(&self, kill_at: Option<Instant>) {
        let group = self.group;
        if !group_alive(group) {
            return;
        }
        let deadline = Instant::from_std(self.lease.deadline());
        let kill_at = kill_at
            .unwrap_or_else(|| Instant::now() + self.grace)
            .min(deadline);
        tracing::info!(%group, "processes left in the command's process group: SIGTERM");
        let mut warned = false;
        signal_group(group, Signal::SIGTERM);
        let mut killed = false;
        // After SIGKILL, a last bound for processes to be reaped.
        let give_up = kill_at.max(Instant::now()) + Duration::from_secs(1);
        while group_alive(group) && Instant::now() < give_up {
            if !killed && Instant::now() >= kill_at {
                signal_group(group, Signal::SIGKILL);
                killed = true;
            }
            if !warned && Instant::now() >= kill_at {
                self.ui.note(format_args!(
                    "the command left processes running in its process group {group}: killed them"
                ));
                warned = true;
            }
            tokio::time::sleep(GROUP_POLL).await;
        }
    }
}
