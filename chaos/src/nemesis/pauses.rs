//! Clock steps and process stops: a node's clock jumped once the nodes
//! are quiet, a client paused past a TTL, and the clients that stop
//! themselves resumed.

use super::*;

impl Nemesis {
    /// Whole seconds a stepped clock jumps: past twice the TTL, so that
    /// every key the node holds expires at once.
    pub(super) fn step_seconds(&self) -> String {
        (self.ttl * 2).as_secs_f64().ceil().max(1.0).to_string()
    }

    /// Steps node `n`'s clock once no node fault has been under way for
    /// three TTLs (new ones held back meanwhile); the node then counts as
    /// faulted for two TTLs. Gives up when the run stops first.
    pub(super) async fn step_when_quiet(self: Arc<Self>, n: usize, stop: Arc<AtomicBool>) {
        loop {
            let mut f = self.faulted.lock().await;
            if stop.load(Ordering::Relaxed) {
                f.step_pending = false;
                return;
            }
            let quiet =
                f.nodes.is_empty() && f.last_end.is_none_or(|at| at.elapsed() >= self.ttl * 3);
            if quiet {
                f.nodes.insert(n);
                f.step_pending = false;
                break;
            }
            drop(f);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let target = n.to_string();
        // The jump takes effect somewhere between these two lines (no
        // `stepped`: it did not happen).
        self.log(CLOCK, &target, "begin");
        if self.nodes(&["step", &target, &self.step_seconds()]).await {
            self.log(CLOCK, &target, "stepped");
        }
        tokio::time::sleep(self.ttl * 2).await;
        self.log(CLOCK, &target, "end");
        let mut f = self.faulted.lock().await;
        f.nodes.remove(&n);
        f.last_end = Some(Instant::now());
    }

    /// Stops a client process past a TTL, then resumes it.
    pub(super) async fn stop_client(self: Arc<Self>, pid: u32) {
        let target = pid.to_string();
        self.log("stop-client", &target, "begin");
        signal(pid, libc::SIGSTOP);
        tokio::time::sleep(self.ttl.mul_f64(1.5)).await;
        signal(pid, libc::SIGCONT);
        self.log("stop-client", &target, "end");
        self.faulted.lock().await.client_stopped = None;
    }

    /// Resumes every client that stopped itself (the paused holder) a TTL
    /// and a half later; runs until aborted.
    pub async fn resume_self_stopped(self: Arc<Self>) {
        let mut stopped_at: Vec<Option<tokio::time::Instant>> = vec![None; self.clients.len()];
        loop {
            let by_nemesis = self.faulted.lock().await.client_stopped;
            for (i, &pid) in self.clients.iter().enumerate() {
                let stopped = process_stopped(pid) && by_nemesis != Some(pid);
                match (stopped, stopped_at[i]) {
                    (true, None) => {
                        stopped_at[i] = Some(tokio::time::Instant::now());
                        self.log("paused-holder", &pid.to_string(), "begin");
                    }
                    (true, Some(at)) if at.elapsed() >= self.ttl.mul_f64(1.5) => {
                        signal(pid, libc::SIGCONT);
                    }
                    (false, Some(_)) => {
                        stopped_at[i] = None;
                        self.log("paused-holder", &pid.to_string(), "end");
                    }
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: a signal to one of our own children.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Whether process `pid` is stopped (state `T` in /proc).
pub fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}
