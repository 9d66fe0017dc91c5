//! The kernel's floor for one lone lock+release cycle on five nodes: no
//! runtime, no library, one thread, blocking sockets. Each cycle writes
//! `SET key token NX PX 10000` to the five nodes, reads the five replies,
//! then writes `DEL key` to the five and reads those: ten sends and ten
//! receives, the fewest a two-round cycle on five nodes can make, each
//! receive sleeping until its reply is there. It prints the wall time per
//! cycle (p50, and mean) and the client CPU and context switches per cycle,
//! for docs/benchmarks.md ("The lone caller"): what no client on this
//! machine can go below.
//!
//! ```text
//! export REDQUORUM_NODES=$(scripts/nodes urls)
//! cargo run --profile bench -p redquorum-bench --bin floor
//! ```
//!
//! Environment: `REDQUORUM_NODES` (five `redis://host:port` URLs, no
//! password), `REDQUORUM_BENCH_CYCLES` (default 5000).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redquorum_bench::cpu::{context_switches, process_cpu};

fn main() {
    let nodes = std::env::var("REDQUORUM_NODES").unwrap_or_else(|_| {
        eprintln!("floor: REDQUORUM_NODES is not set (five redis://host:port URLs)");
        std::process::exit(2);
    });
    let cycles: usize = std::env::var("REDQUORUM_BENCH_CYCLES")
        .ok()
        .map(|s| s.parse().expect("REDQUORUM_BENCH_CYCLES: a count"))
        .unwrap_or(5000);
    let mut conns: Vec<(TcpStream, BufReader<TcpStream>)> = nodes
        .split(',')
        .map(|url| {
            let address = url
                .trim()
                .trim_start_matches("redis://")
                .trim_end_matches('/');
            let stream = TcpStream::connect(address)
                .unwrap_or_else(|e| panic!("floor: cannot connect to {address}: {e}"));
            stream.set_nodelay(true).expect("nodelay");
            let reader = BufReader::new(stream.try_clone().expect("a second handle"));
            (stream, reader)
        })
        .collect();
    assert_eq!(conns.len(), 5, "REDQUORUM_NODES must list five nodes");

    let round = |conns: &mut [(TcpStream, BufReader<TcpStream>)], command: &[u8]| {
        for (stream, _) in conns.iter_mut() {
            stream.write_all(command).expect("write");
        }
        let mut line = String::new();
        for (_, reader) in conns.iter_mut() {
            line.clear();
            reader.read_line(&mut line).expect("read");
            assert!(!line.starts_with('-'), "the node refused: {line}");
        }
    };
    let mut samples = Vec::with_capacity(cycles);
    let (cpu, switches, started) = (process_cpu(), context_switches(), Instant::now());
    for i in 0..cycles {
        let key = format!("bench:floor:{}:{i}", std::process::id());
        let set = command(&[b"SET", key.as_bytes(), b"token", b"NX", b"PX", b"10000"]);
        let del = command(&[b"DEL", key.as_bytes()]);
        let start = Instant::now();
        round(&mut conns, &set);
        round(&mut conns, &del);
        samples.push(start.elapsed());
    }
    let (wall, cpu, switches) = (
        started.elapsed(),
        process_cpu().saturating_sub(cpu),
        context_switches() - switches,
    );
    samples.sort_unstable();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / cycles as f64;
    println!(
        "floor: {cycles} cycles (blocking sockets, one thread): p50 {:.0} µs, mean {:.0} µs; \
         client CPU {:.0} µs and {:.1} context switches per cycle",
        samples[cycles / 2].as_secs_f64() * 1e6,
        per(wall),
        per(cpu),
        switches as f64 / cycles as f64,
    );
}

/// `args` as one RESP command.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}
