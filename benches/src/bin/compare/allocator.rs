//! A counting global allocator, peak heap and RSS, and CPU time.

use super::*;

/// Counts every allocation (`alloc`, `alloc_zeroed` and `realloc` calls) and
/// tracks live and peak heap bytes. Threads that set [`UNCOUNTED`] (the
/// latency proxy's) are left out.
pub(crate) struct Counting;

pub(crate) static ALLOCS: AtomicU64 = AtomicU64::new(0);
pub(crate) static LIVE: AtomicUsize = AtomicUsize::new(0);
pub(crate) static PEAK: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    pub(crate) static UNCOUNTED: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn counted() -> bool {
    !UNCOUNTED.try_with(Cell::get).unwrap_or(true)
}

pub(crate) fn grow(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping uses only atomics and a const thread-local without destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if counted() {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            if new_size >= layout.size() {
                grow(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
pub(crate) static GLOBAL: Counting = Counting;

/// Resets the peak heap and peak RSS marks; returns the live heap now.
pub(crate) fn reset_peaks() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    // "5" resets the peak resident set size (VmHWM) of the process.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    live
}

/// Peak RSS (VmHWM) of the process in bytes.
pub(crate) fn peak_rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Client and server CPU over a phase.
#[derive(Default, Clone, Copy)]
pub(crate) struct Cpu {
    pub(crate) client: Duration,
    pub(crate) servers: Option<Duration>,
    /// The client process's context switches.
    pub(crate) switches: u64,
}

impl Cpu {
    pub(crate) fn start() -> (Duration, Option<Duration>, u64) {
        (process_cpu(), servers_cpu(), context_switches())
    }

    pub(crate) fn since(start: (Duration, Option<Duration>, u64)) -> Cpu {
        Cpu {
            switches: context_switches().saturating_sub(start.2),
            client: process_cpu().saturating_sub(start.0),
            servers: servers_cpu()
                .zip(start.1)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }

    pub(crate) fn add(&mut self, o: Cpu) {
        self.client += o.client;
        self.switches += o.switches;
        self.servers = match (self.servers, o.servers) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}
