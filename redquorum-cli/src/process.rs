//! The command's process group and redquorum's signals: what `exec` needs
//! from the OS to run a command that never outlives its lock.

use std::io;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::ui::Ui;

/// Has the kernel SIGKILL the command if redquorum dies without stopping it
/// (SIGKILL, the OOM killer): it would otherwise run on without the lock.
/// Linux only; covers the command's own process, not what it starts.
///
/// The parent-death signal follows the thread that forks: this is called
/// and the command spawned from the thread running `block_on`, which lives
/// as long as the process.
pub fn kill_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = nix::unistd::getpid();
        let arm = move || -> io::Result<()> {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // redquorum may have died before the line above.
            if nix::unistd::getppid() != parent {
                return Err(Errno::ESRCH.into());
            }
            Ok(())
        };
        // SAFETY: `arm` runs in the forked child before exec and only makes
        // the async-signal-safe prctl and getppid system calls; it neither
        // allocates nor takes locks.
        unsafe {
            command.pre_exec(arm);
        }
    }
}

/// Makes this process the reaper of the command's orphaned descendants
/// (Linux), so that a left-over process that has exited is reaped here
/// instead of lingering as a zombie in the process group.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::debug!(error = %e, "cannot become a child subreaper");
    }
}

/// Reaps exited members of `group` that are this process's children (the
/// command's orphans, with [`become_subreaper`]).
fn reap(group: Pid) {
    let any_in_group = Pid::from_raw(-group.as_raw());
    while let Ok(status) = waitpid(any_in_group, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Sends `signal` to every process of `group`; a group already gone is fine.
pub fn signal_group(group: Pid, signal: Signal) {
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(%group, ?signal, error = %e, "cannot signal the command's process group")
        }
    }
}

/// Whether any process is left in `group`, once its exited members that
/// are ours have been reaped.
pub fn group_alive(group: Pid) -> bool {
    reap(group);
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}

pub fn name(signo: i32) -> &'static str {
    Signal::try_from(signo).map_or("a signal", Signal::as_str)
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, handled instead of ending
/// redquorum; SIGTSTP, ignored.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    /// A stopped redquorum could neither extend the lease nor stop the
    /// command, which runs on in its own process group: Ctrl-Z is refused.
    tstp: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            tstp: signal(SignalKind::from_raw(Signal::SIGTSTP as i32))?,
        })
    }

    /// The next signal received to act on (its number).
    pub async fn next(&mut self, ui: &Ui) -> i32 {
        loop {
            tokio::select! {
                Some(()) = self.int.recv() => return Signal::SIGINT as i32,
                Some(()) = self.term.recv() => return Signal::SIGTERM as i32,
                Some(()) = self.hup.recv() => return Signal::SIGHUP as i32,
                Some(()) = self.quit.recv() => return Signal::SIGQUIT as i32,
                Some(()) = self.tstp.recv() => ui.note(format_args!(
                    "ignoring SIGTSTP: a stopped redquorum would let the lease lapse while the command runs"
                )),
                else => std::future::pending::<()>().await,
            }
        }
    }
}
