//! Micro-benchmarks of the pure quorum path (no I/O): deciding a 5-node
//! `Round`, and the per-lock arithmetic `drift` + `validity` + `node_timeout`.

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use redquorum::internals::{Count, Decision, Vote, node_timeout};
use redquorum::quorum::{DriftFactor, drift, validity};

/// Records votes until the round decides; returns the decision.
fn decide(n: usize, votes: &[Vote]) -> Decision {
    let mut round = Count::new(n);
    for &vote in votes {
        let d = round.record(vote);
        if d != Decision::Pending {
            return d;
        }
    }
    round.decision()
}

pub(crate) fn bench_round(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_5_nodes");
    // Granted after 3 votes (all yes).
    let all_yes = [Vote::Yes; 5];
    group.bench_function("granted_fast", |b| {
        b.iter(|| decide(black_box(5), black_box(&all_yes)))
    });
    // Granted at the 5th vote (2 refusals first).
    let late_grant = [Vote::No, Vote::Yes, Vote::No, Vote::Yes, Vote::Yes];
    group.bench_function("granted_last_vote", |b| {
        b.iter(|| decide(black_box(5), black_box(&late_grant)))
    });
    // Refused at the 3rd refusal.
    let refused = [Vote::Yes, Vote::No, Vote::No, Vote::Yes, Vote::No];
    group.bench_function("refused", |b| {
        b.iter(|| decide(black_box(5), black_box(&refused)))
    });
    group.finish();
}

pub(crate) fn bench_math(c: &mut Criterion) {
    // What every lock operation computes: the factor is parsed once at build
    // time, so the per-lock cost is the integer arithmetic only.
    let factor = DriftFactor::new(0.01).unwrap();
    c.bench_function("per-lock validity+node_timeout ttl=10s", |b| {
        b.iter(|| {
            let ttl_ms = black_box(10_000u64);
            let v = black_box(&factor)
                .validity(ttl_ms)
                .unwrap_or(Duration::ZERO);
            let t = node_timeout(black_box(None), ttl_ms, v);
            (v, t)
        })
    });
    // The f64 convenience functions parse the factor on every call.
    c.bench_function("drift+validity(f64) ttl=10s", |b| {
        b.iter(|| {
            let ttl_ms = black_box(10_000u64);
            let f = black_box(0.01f64);
            (drift(ttl_ms, f), validity(ttl_ms, f))
        })
    });
}
