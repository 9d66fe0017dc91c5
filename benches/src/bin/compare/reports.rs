//! The printed tables and the figures for docs/benchmarks.md.

use super::*;

pub(crate) fn pct(samples: &[Duration], p: usize) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    Some(s[(s.len() - 1) * p / 100])
}

pub(crate) fn ms(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(100) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1e3),
    }
}

pub(crate) fn ratio(a: f64, b: f64) -> String {
    if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// " (3 err: taken, 2 cut)" when a phase had failed or cut-short cycles.
pub(crate) fn notes(errors: u64, first: Option<&String>, cut: u64) -> String {
    let err = match first {
        Some(e) if errors > 0 => format!("{errors} err: {e}"),
        _ => format!("{errors} err"),
    };
    match (errors, cut) {
        (0, 0) => String::new(),
        (_, 0) => format!(" ({err})"),
        (0, c) => format!(" ({c} cut)"),
        (_, c) => format!(" ({err}, {c} cut)"),
    }
}

/// CPU per completed cycle, in µs.
pub(crate) fn per_cycle(cpu: Option<Duration>, cycles: u64) -> String {
    match cpu {
        Some(cpu) if cycles > 0 => format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / cycles as f64),
        _ => "-".into(),
    }
}

pub(crate) fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// One markdown table per scenario: a row per figure, a column per client,
/// then redquorum's ratio to rslock and to the floor (higher = redquorum
/// better).
pub(crate) fn table(scenario: Scenario, r: &Results) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "### {}\n", scenario.name());
    let _ = writeln!(
        t,
        "| figure | redquorum | rslock | raw floor | rq vs rslock | rq vs floor |"
    );
    let _ = writeln!(t, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let row = |t: &mut String, name: &str, cells: [String; 3], vs: [String; 2]| {
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {} | {} | {} |",
            cells[0], cells[1], cells[2], vs[0], vs[1]
        );
    };
    for (p, label) in [(50, "p50"), (99, "p99")] {
        let v: Vec<Option<Duration>> = r.lone.iter().map(|l| pct(&l.latencies, p)).collect();
        let s = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
        row(
            &mut t,
            &format!("lone lock+release {label}"),
            [ms(v[0]), ms(v[1]), ms(v[2])],
            [ratio(s(v[1]), s(v[0])), ratio(s(v[2]), s(v[0]))],
        );
    }
    let cells = |f: &dyn Fn(usize) -> String| [f(0), f(1), f(2)];
    row(
        &mut t,
        "lone cycles",
        cells(&|i| {
            let l = &r.lone[i];
            format!(
                "{}{}",
                l.latencies.len(),
                notes(l.errors, l.first_error.as_ref(), u64::from(l.cut))
            )
        }),
        ["".into(), "".into()],
    );
    row(
        &mut t,
        "heap allocations per cycle",
        cells(&|i| format!("{:.1}", r.lone[i].allocs_per_cycle())),
        [
            ratio(r.lone[1].allocs_per_cycle(), r.lone[0].allocs_per_cycle()),
            ratio(r.lone[2].allocs_per_cycle(), r.lone[0].allocs_per_cycle()),
        ],
    );
    for (c, tasks) in CONCURRENCY.iter().enumerate() {
        let rate = |i: usize| r.load[i][c].rate();
        row(
            &mut t,
            &format!("cycles/s, {tasks} tasks"),
            cells(&|i| {
                let l = &r.load[i][c];
                // A phase left out (REDQUORUM_BENCH_PHASES) says so, not 0.
                if l.secs == 0.0 {
                    return "not run".into();
                }
                format!(
                    "{:.0}{}",
                    l.rate(),
                    notes(l.errors, l.first_error.as_ref(), l.cut)
                )
            }),
            [ratio(rate(0), rate(1)), ratio(rate(0), rate(2))],
        );
    }
    if let Some(ceiling) = r.ceiling {
        let _ = writeln!(
            t,
            "| cycles/s, pipelined C ceiling | {ceiling:.0} | | | {} | |",
            CONCURRENCY
                .iter()
                .enumerate()
                .map(|(c, tasks)| format!("{tasks}: {:.2}x", r.load[0][c].rate() / ceiling))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    row(
        &mut t,
        "client CPU per cycle, lone",
        cells(&|i| per_cycle(Some(r.lone[i].cpu.client), r.lone[i].latencies.len() as u64)),
        ["".into(), "".into()],
    );
    row(
        &mut t,
        "client context switches per cycle, lone",
        cells(&|i| {
            let cycles = r.lone[i].latencies.len() as f64;
            if cycles == 0.0 {
                "not run".into()
            } else {
                format!("{:.1}", r.lone[i].cpu.switches as f64 / cycles)
            }
        }),
        ["".into(), "".into()],
    );
    for tasks in [64, 256] {
        let c = CONCURRENCY.iter().position(|&c| c == tasks).unwrap_or(0);
        let cycles = |i: usize| r.load[i][c].ok;
        let cpu_client = |i: usize| r.load[i][c].cpu.client.as_secs_f64() / cycles(i).max(1) as f64;
        let cpu_servers = |i: usize| {
            r.load[i][c]
                .cpu
                .servers
                .map_or(0.0, |d| d.as_secs_f64() / cycles(i).max(1) as f64)
        };
        row(
            &mut t,
            &format!("client CPU per cycle, {tasks} tasks"),
            cells(&|i| per_cycle(Some(r.load[i][c].cpu.client), cycles(i))),
            [
                ratio(cpu_client(1), cpu_client(0)),
                ratio(cpu_client(2), cpu_client(0)),
            ],
        );
        row(
            &mut t,
            &format!("Redis CPU per cycle (5 servers), {tasks} tasks"),
            cells(&|i| per_cycle(r.load[i][c].cpu.servers, cycles(i))),
            [
                ratio(cpu_servers(1), cpu_servers(0)),
                ratio(cpu_servers(2), cpu_servers(0)),
            ],
        );
    }
    let last = CONCURRENCY.len() - 1;
    row(
        &mut t,
        "peak RSS (process), 256 tasks",
        cells(&|i| mib(r.load[i][last].peak_rss)),
        ["".into(), "".into()],
    );
    row(
        &mut t,
        "peak heap growth, 256 tasks",
        cells(&|i| mib(r.load[i][last].peak_heap)),
        ["".into(), "".into()],
    );
    let g = |i: usize| {
        let c = &r.contention[i];
        c.grants as f64 / c.secs.max(f64::MIN_POSITIVE)
    };
    row(
        &mut t,
        &format!("hand-offs/s, {CONTENDERS} tasks on one key"),
        cells(&|i| {
            let c = &r.contention[i];
            // A phase left out (REDQUORUM_BENCH_PHASES) says so, not 0.
            if c.secs == 0.0 {
                return "not run".into();
            }
            let mut s = format!("{:.0}{}", g(i), notes(c.errors, None, c.cut));
            if c.overlaps > 0 {
                let _ = write!(s, " ({} OVERLAPS)", c.overlaps);
            }
            s
        }),
        if r.contention[0].secs == 0.0 {
            ["".into(), "".into()]
        } else {
            [ratio(g(0), g(1)), ratio(g(0), g(2))]
        },
    );
    t
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

pub(crate) fn targets(all: &[(Scenario, Results)]) -> String {
    let mut t = String::new();
    let get = |s: Scenario| all.iter().find(|(x, _)| *x == s).map(|(_, r)| r);
    let p50 = |l: &Lone| pct(&l.latencies, 50).map_or(f64::NAN, |d| d.as_secs_f64());
    if let Some(h) = get(Scenario::Healthy) {
        // A ratio with a client left out (REDQUORUM_BENCH_CLIENTS) says so.
        let ratio = |what: &str, x: f64, target: &str, ok: bool| {
            if x.is_nan() {
                format!("- lone lock+release p50, {what}: not run\n")
            } else {
                format!(
                    "- lone lock+release p50, {what}: {x:.2}x (target {target}): {}\n",
                    verdict(ok)
                )
            }
        };
        let x = p50(&h.lone[1]) / p50(&h.lone[0]);
        t.push_str(&ratio("rslock / redquorum", x, ">= 1.6x", x >= 1.6));
        let floor = p50(&h.lone[0]) / p50(&h.lone[2]);
        t.push_str(&ratio(
            "redquorum / raw floor",
            floor,
            "<= 1.2x",
            floor <= 1.2,
        ));
        let lone = &h.lone[0];
        let lone_cpu = lone.cpu.client.as_secs_f64() * 1e6 / lone.latencies.len().max(1) as f64;
        let _ = writeln!(
            t,
            "- client CPU per lone cycle: {lone_cpu:.1} us (target <= 80 us): {}",
            verdict(lone_cpu <= 80.0)
        );
        let c64 = CONCURRENCY.iter().position(|&c| c == 64).unwrap_or(0);
        if h.load[0][c64].secs == 0.0 {
            let _ = writeln!(
                t,
                "- throughput and CPU under load: not run (REDQUORUM_BENCH_PHASES)"
            );
        } else {
            let c256 = CONCURRENCY.len() - 1;
            let rq = h.load[0][c64].rate();
            let a = rq / h.load[1][c64].rate();
            let _ = writeln!(
                t,
                "- throughput at 64 tasks, redquorum / rslock: {a:.2}x (target >= 1.7x): {}",
                verdict(a >= 1.7)
            );
            if let Some(ceiling) = h.ceiling {
                let b = rq / ceiling;
                let c = h.load[0][c256].rate() / ceiling;
                let _ = writeln!(
                    t,
                    "- throughput at 64 tasks, redquorum / pipelined C ceiling: {b:.2}x (target >= 0.75x): {}",
                    verdict(b >= 0.75)
                );
                let _ = writeln!(
                    t,
                    "- throughput at 256 tasks, redquorum / pipelined C ceiling: {c:.2}x (target >= 0.8x): {}",
                    verdict(c >= 0.8)
                );
            }
            let cpu =
                h.load[0][c64].cpu.client.as_secs_f64() * 1e6 / h.load[0][c64].ok.max(1) as f64;
            let _ = writeln!(
                t,
                "- client CPU per cycle at 64 tasks: {cpu:.1} us (target <= 15 us): {}",
                verdict(cpu <= 15.0)
            );
        }
        let allocs = h.lone[0].allocs_per_cycle();
        let _ = writeln!(
            t,
            "- heap allocations per lock+release cycle: {allocs:.1} (target <= 40): {}",
            verdict(allocs <= 40.0)
        );
        if let Some(f) = get(Scenario::Frozen) {
            let x = p50(&f.lone[0]) / p50(&h.lone[0]);
            let _ = writeln!(
                t,
                "- 1 of 5 frozen / healthy, redquorum lone p50: {x:.2}x (target <= 1.5x): {} \
                 (rslock: {} per cycle frozen)",
                verdict(x <= 1.5),
                ms(pct(&f.lone[1].latencies, 50))
            );
        }
    }
    t
}
