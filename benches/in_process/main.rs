//! The micro-benchmarks: redquorum's own work, in process, without a network.
//!
//! - `quorum`: the pure quorum path (deciding a 5-node `Round`, the per-lock
//!   arithmetic);
//! - `driver`: lock+release against five in-memory nodes that answer at
//!   once, with the heap allocations per cycle printed first.
//!
//! Run: `cargo bench -p redquorum-bench` (add `-- --quick` for a fast pass,
//! or a filter: `-- round_5_nodes`). Under `cargo test` criterion runs each
//! benchmark once.
//!
//! The binary's global allocator counts allocations (for `driver`); the
//! quorum benchmarks allocate nothing, so it costs them nothing.

use criterion::{criterion_group, criterion_main};

mod driver;
mod quorum;

criterion_group!(
    benches,
    quorum::bench_round,
    quorum::bench_math,
    driver::bench_cycle
);
criterion_main!(benches);
