//! A loaded host on demand: threads that spin until dropped (or a bound),
//! so that tests about delivery run where the original bugs showed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `n` busy threads, stopped when this is dropped or after `bound`.
pub struct Burners {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Burners {
    pub fn start(n: usize, bound: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let end = Instant::now() + bound;
                    let mut spins = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                        for _ in 0..10_000 {
                            spins = std::hint::black_box(spins.wrapping_add(1));
                        }
                    }
                    spins
                })
            })
            .collect();
        Burners { stop, threads }
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
