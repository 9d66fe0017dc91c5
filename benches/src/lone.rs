//! Lone lock+release cycles and their percentiles, shared by the experiments
//! that compare two ways of reaching the nodes in one run (tls, cluster).

use std::time::{Duration, Instant};

use redquorum::Redlock;

/// Cycles per half of a comparison.
pub const CYCLES: usize = 2000;

/// The `q`th percentile of `samples`, in µs.
pub fn p(samples: &mut [Duration], q: usize) -> f64 {
    samples.sort_unstable();
    samples[(samples.len() - 1) * q / 100].as_secs_f64() * 1e6
}

/// `CYCLES` lone lock+release cycles on fresh resources, each timed.
pub async fn lone(redlock: &Redlock, label: &str) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(CYCLES);
    for i in 0..CYCLES {
        let start = Instant::now();
        let lock = redlock
            .try_lock(&format!("bench:{label}:{i}"), Duration::from_secs(10))
            .await
            .expect("lock");
        lock.release().await.expect("release");
        samples.push(start.elapsed());
    }
    samples
}
