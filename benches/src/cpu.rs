//! CPU time read from `/proc`: this process's and the Redis servers', for
//! the experiments that print CPU per cycle (compare).

use std::time::Duration;

/// CPU time (user + system) used so far by this process, all threads.
pub fn process_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// CPU time used so far by the Redis servers: the pids in
/// `REDQUORUM_SERVER_PIDS` (comma-separated; e.g. Docker nodes' host pids),
/// or local processes started by `scripts/nodes` (their pid files are under
/// `REDQUORUM_STATE_DIR`); `None` otherwise.
pub fn servers_cpu() -> Option<Duration> {
    if let Ok(pids) = std::env::var("REDQUORUM_SERVER_PIDS") {
        return Some(
            pids.split(',')
                .map(|pid| cpu_of(&format!("/proc/{}/stat", pid.trim())))
                .sum(),
        );
    }
    let dir = std::env::var("REDQUORUM_STATE_DIR").ok()?;
    let mut total = Duration::ZERO;
    for n in 1..=5 {
        let pid = std::fs::read_to_string(format!("{dir}/{n}/redis.pid")).ok()?;
        total += cpu_of(&format!("/proc/{}/stat", pid.trim()));
    }
    Some(total)
}

/// utime + stime of a `/proc/PID/stat` file (clock ticks of 10 ms).
pub fn cpu_of(path: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

/// Context switches so far of all this process's threads (voluntary: a
/// thread went to sleep in a system call, to be woken later; plus
/// involuntary), from `/proc/self/task/*/status`. Threads that ended are
/// not counted, so read it around work whose threads live throughout.
pub fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}
