//! The driver's own cost, without a network: lock+release against five
//! in-memory nodes that answer at once. What is left is redquorum's per-round
//! work (key, token, fan-out, vote counting, votes, clean-up), the part a
//! profile of the real thing can attribute to the library rather than to the
//! Redis client or the kernel.
//!
//! Before the timings it prints the heap allocations per lock+release cycle
//! that the driver makes by itself (the in-memory node boxes its reply
//! future, as every `Node` does, and allocates nothing else), counted by the
//! binary's global allocator, defined here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::Criterion;
use futures::future::BoxFuture;
use redquorum::node::{Node, Op, Reply};
use redquorum::{NodeError, Redlock};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A node that grants (and confirms) everything at once.
#[derive(Debug)]
struct Instant {
    name: Arc<str>,
}

impl Node for Instant {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn call<'a>(&'a self, _op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>> {
        Box::pin(async { Ok(Reply::Done) })
    }
}

const TTL: Duration = Duration::from_secs(10);

async fn redlock() -> Redlock {
    let nodes = (0..5).map(|i| {
        Arc::new(Instant {
            name: format!("instant://{i}").into(),
        }) as Arc<dyn Node>
    });
    Redlock::builder()
        .custom_nodes(nodes)
        .build()
        .await
        .expect("build")
}

async fn cycle(redlock: &Redlock) {
    let lock = redlock.try_lock("bench:resource", TTL).await.expect("lock");
    lock.release().await.expect("release");
}

pub(crate) fn bench_cycle(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redlock = rt.block_on(redlock());

    // Allocations per cycle, counted on this one thread's runtime.
    let cycles = 10_000u64;
    let per_cycle = rt.block_on(async {
        cycle(&redlock).await; // first use: lazy statics, timer wheel
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..cycles {
            cycle(&redlock).await;
        }
        // Let the background clean-up tasks finish inside the count.
        tokio::task::yield_now().await;
        (ALLOCS.load(Ordering::Relaxed) - before) as f64 / cycles as f64
    });
    println!("driver: {per_cycle:.1} heap allocations per lock+release cycle (5 in-memory nodes)");

    c.bench_function("lock+release, 5 in-memory nodes", |b| {
        b.to_async(&rt).iter(|| cycle(&redlock))
    });
}
