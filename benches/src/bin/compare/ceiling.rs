//! The machine's ceiling for the lock cycle: five pipelined C clients
//! (`redis-benchmark -P 16 -c 8`, one per node, all at once) sending the
//! cycle's two commands to the same five servers — `SET k tok NX PX 10000`,
//! then the compare-and-delete `EVAL` of the release script. A cycle needs
//! one of each on every node, so the ceiling is the slowest node's
//! `1 / (1 / set rate + 1 / eval rate)`.

use std::process::{Command, Stdio};

/// Requests per node per command: about a second each on the 2-core
/// machine.
const REQUESTS: u32 = 150_000;

/// The ceiling in cycles/s, or why there is none (no `redis-benchmark`).
pub(crate) fn measure(urls: &[String]) -> Result<f64, String> {
    let nodes: Vec<(String, String)> = urls
        .iter()
        .map(|u| {
            let at = u.trim_start_matches("redis://").trim_end_matches('/');
            let (host, port) = at.rsplit_once(':').unwrap_or((at, "6379"));
            (host.to_owned(), port.to_owned())
        })
        .collect();
    // The release script, as the library sends it.
    let release = super::release_lua();
    let set = ["SET", "ceiling:__rand_int__", "tok", "NX", "PX", "10000"];
    let eval = ["EVAL", release, "1", "ceiling:__rand_int__", "tok"];
    let sets = all_at_once(&nodes, &set)?;
    let evals = all_at_once(&nodes, &eval)?;
    Ok(sets
        .iter()
        .zip(&evals)
        .map(|(s, e)| 1.0 / (1.0 / s + 1.0 / e))
        .fold(f64::INFINITY, f64::min))
}

/// `args` on every node at once, one `redis-benchmark` each: each node's
/// requests per second.
fn all_at_once(nodes: &[(String, String)], args: &[&str]) -> Result<Vec<f64>, String> {
    let children: Vec<_> = nodes
        .iter()
        .map(|(host, port)| {
            Command::new("redis-benchmark")
                .args(["-h", host, "-p", port, "-P", "16", "-c", "8"])
                .args(["-n", &REQUESTS.to_string(), "-r", "1000000", "--csv"])
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("redis-benchmark: {e}"))
        })
        .collect::<Result<_, _>>()?;
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            // "test","rps",…  then  "SET …","134228.19",… (the test's name
            // spans lines where the script does).
            let text = String::from_utf8_lossy(&out.stdout);
            text.lines()
                .last()
                .and_then(|line| line.split("\",\"").nth(1))
                .and_then(|rps| rps.trim_matches('"').parse::<f64>().ok())
                .ok_or_else(|| format!("unreadable redis-benchmark output: {text}"))
        })
        .collect()
}
