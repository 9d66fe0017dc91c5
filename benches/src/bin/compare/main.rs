//! Side by side on the same five Redis masters, in one process, interleaved:
//! redquorum, `rslock` (the best Rust peer on crates.io) and a raw `redis`
//! floor (`SET NX PX` to all five nodes at once, waiting for every reply, then
//! the release script on all five, again waiting for every reply).
//!
//! ```text
//! export REDQUORUM_NODES_MODE=local REDQUORUM_BASE_PORT=7200 REDQUORUM_STATE_DIR=/tmp/rq-nodes-bench
//! scripts/nodes up
//! export REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=$PWD/scripts/nodes
//! cargo run --profile bench -p redquorum-bench --bin compare
//! ```
//!
//! For each scenario (all healthy; node 3 frozen with `scripts/nodes freeze 3`;
//! node 5 behind a proxy adding 10 ms each way, +20 ms per round trip) it
//! measures, per client:
//!
//! - a lone client doing lock+release back to back: p50, p99, heap
//!   allocations per cycle (a counting global allocator);
//! - throughput with 1, 16, 64 and 256 tasks, each on its own key, plus peak
//!   RSS and peak heap growth at 256 tasks;
//! - hand-offs per second with 8 tasks contending for one key (retry pauses
//!   drawn from 0-10 ms for all three clients).
//!
//! Every phase is bounded in time (and the lone phase in count too), so a
//! client that stalls on a frozen node cannot hang the run; cycles cut short
//! are reported. Each phase gives every client four slices of a quarter of
//! its time, in the order A B C, C B A, A B C, C B A, so that changes in the
//! machine's load during the run favour nobody.
//!
//! Environment:
//! - `REDQUORUM_NODES` (required): five comma-separated URLs.
//! - `REDQUORUM_SCRIPTS_NODES`: `scripts/nodes` to freeze/thaw with (default:
//!   this repository's). Keep `REDQUORUM_BASE_PORT`/`REDQUORUM_STATE_DIR`
//!   exported: the script reads them. The bench refuses to freeze anything
//!   unless `scripts/nodes urls` prints exactly `REDQUORUM_NODES`.
//! - `REDQUORUM_BENCH_SECS`: seconds per client per phase (default 2).
//! - `REDQUORUM_BENCH_SCENARIOS`: any of `healthy,frozen,slow` (default all).
//! - `REDQUORUM_BENCH_CLIENTS`: any of `redquorum,rslock,raw` (default all;
//!   one alone is for profiling).
//! - `REDQUORUM_BENCH_PHASES`: any of `lone,load,contention` (default all).
//! - `REDQUORUM_BENCH_NODE_TIMEOUT_MS`: node timeout for redquorum and the
//!   floor (default 50 ms); only for profiling under valgrind.
//! - `REDQUORUM_BENCH_RUNTIME`: the clients' tokio runtime, `multi` (the
//!   default: multi-thread, one worker per core) or `current` (one thread).
//! - `REDQUORUM_BENCH_LONE`: where the lone client runs, `main` (the
//!   default: in the future the main thread blocks on, as `#[tokio::main]`
//!   runs it) or `task` (a spawned task, on one of the runtime's workers).
//! - `REDQUORUM_BENCH_CHART`: where to write the SVG chart (default this
//!   repository's `docs/throughput.svg`; `none` to skip).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redquorum::{LockError, Redlock, Retry};
use redquorum_bench::{cpu::*, proxy};
use tokio::time::Instant;

mod allocator;
mod ceiling;
mod chart;
mod clients;
mod faults;
mod phases;
mod reports;
mod scenarios;

use allocator::*;
use chart::*;
use clients::*;
use faults::*;
use phases::*;
use reports::*;
use scenarios::*;

fn main() {
    let nodes = std::env::var("REDQUORUM_NODES").unwrap_or_else(|_| {
        eprintln!(
            "compare: REDQUORUM_NODES is not set. It needs five Redis masters:\n  \
             export REDQUORUM_NODES_MODE=local REDQUORUM_BASE_PORT=7200 REDQUORUM_STATE_DIR=/tmp/rq-nodes-bench\n  \
             scripts/nodes up\n  \
             export REDQUORUM_NODES=$(scripts/nodes urls) REDQUORUM_SCRIPTS_NODES=$PWD/scripts/nodes"
        );
        std::process::exit(2);
    });
    let urls: Vec<String> = nodes.split(',').map(|s| s.trim().to_owned()).collect();
    assert_eq!(urls.len(), 5, "REDQUORUM_NODES must list five nodes");
    let secs: f64 = std::env::var("REDQUORUM_BENCH_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("REDQUORUM_BENCH_SECS: a number of seconds")
        })
        .unwrap_or(2.0);
    let wanted =
        std::env::var("REDQUORUM_BENCH_SCENARIOS").unwrap_or_else(|_| "healthy,frozen,slow".into());
    let mut scenarios: Vec<Scenario> = [Scenario::Healthy, Scenario::Frozen, Scenario::Slow]
        .into_iter()
        .filter(|s| wanted.split(',').any(|w| w.trim() == s.tag()))
        .collect();
    if scenarios.contains(&Scenario::Frozen)
        && let Err(e) = script_matches(&urls)
    {
        eprintln!("compare: not freezing anything: {e}");
        scenarios.retain(|s| *s != Scenario::Frozen);
    }
    let chart_path = std::env::var("REDQUORUM_BENCH_CHART")
        .unwrap_or_else(|_| redquorum_bench::repo("docs/throughput.svg"));

    let flavor = std::env::var("REDQUORUM_BENCH_RUNTIME").unwrap_or_else(|_| "multi".into());
    let runtime = match flavor.as_str() {
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        "current" => tokio::runtime::Builder::new_current_thread(),
        other => {
            eprintln!("compare: REDQUORUM_BENCH_RUNTIME={other}: say multi or current");
            std::process::exit(2);
        }
    }
    .enable_all()
    .build()
    .expect("runtime");
    println!(
        "compare: {} nodes, ttl {TTL:?}, {secs} s per client per phase, scenarios {:?}, \
         client runtime: tokio {flavor}-thread, {} workers",
        urls.len(),
        scenarios.iter().map(|s| s.tag()).collect::<Vec<_>>(),
        runtime.metrics().num_workers()
    );
    let started = std::time::Instant::now();
    let all = runtime.block_on(async {
        // Ctrl-C: thaw before leaving (Drop does not run on a signal).
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                let n = FROZEN_NOW.load(Ordering::SeqCst);
                if n != 0 {
                    run_nodes("thaw", n);
                }
                std::process::exit(130);
            }
        });
        let mut all = Vec::new();
        for &s in &scenarios {
            let r = run_scenario(s, &urls, secs).await;
            all.push((s, r));
            // Let a thawed node drain its backlog before the next scenario.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        all
    });

    println!();
    for (s, r) in &all {
        println!("{}", table(*s, r));
    }
    println!("Targets (same run):\n{}", targets(&all));
    if chart_path != "none" {
        match chart(&chart_path, &all) {
            Ok(()) => println!("chart: {chart_path}"),
            Err(e) => eprintln!("chart: could not write {chart_path}: {e}"),
        }
    }
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    // A client that erred on most of its cycles measured nothing: fail
    // loudly, not with a figure.
    let broken = erring(&all);
    if !broken.is_empty() {
        for line in &broken {
            eprintln!("compare: {line}");
        }
        eprintln!("compare: FAILED: a client erred on most cycles; its figures above mean nothing");
        std::process::exit(1);
    }
}

/// Each healthy-scenario phase in which a client erred on more cycles
/// than it completed, with its first error.
fn erring(all: &[(Scenario, Results)]) -> Vec<String> {
    let mut out = Vec::new();
    for (s, r) in all.iter().filter(|(s, _)| *s == Scenario::Healthy) {
        for (i, which) in CLIENTS.iter().enumerate() {
            let lone = &r.lone[i];
            if lone.errors > lone.latencies.len() as u64 {
                out.push(format!(
                    "[{}] {} lone: {} errors, {} cycles; first: {}",
                    s.tag(),
                    which.name(),
                    lone.errors,
                    lone.latencies.len(),
                    lone.first_error.as_deref().unwrap_or("?")
                ));
            }
            for (c, load) in r.load[i].iter().enumerate() {
                if load.errors > load.ok {
                    out.push(format!(
                        "[{}] {} load {}: {} errors, {} cycles; first: {}",
                        s.tag(),
                        which.name(),
                        CONCURRENCY[c],
                        load.errors,
                        load.ok,
                        load.first_error.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
    }
    out
}
