//! The `redquorum` binary's other kinds of lock on the five real nodes:
//! permits (`exec -n`), read/write locks (`--read`, `--write`), cluster
//! members and distant nodes, `release` of every kind, and elections
//! (`elect`, `leader`).
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::process::Stdio;
use std::time::Duration;

use redquorum::LeaseOptions;
use redquorum::RwLock;
use redquorum::{Semaphore, election::Election};
use redquorum_test_support::checks::eventually_ok;
use support::cli::*;
use support::proxy::Proxy;
use support::*;
use tokio::process::Command;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn exec_n_runs_at_most_n_commands_at_once() {
    let nodes = node_urls();
    let resource = unique("cli-permits");
    let dir = scratch("permits");
    let log = dir.join("log");
    // Each run logs its start (with its permit's slot) and its end.
    let script = "echo start $REDQUORUM_PERMIT >> \"$LOG\"; sleep 1; echo end >> \"$LOG\"";
    let spawn = |wait: &str| {
        redquorum(
            &nodes,
            &[
                "exec", "-n", "2", "--wait", wait, "--ttl", "5s", &resource, "--", "sh", "-c",
                script,
            ],
        )
        .env("LOG", &log)
        .spawn()
        .expect("spawn")
    };
    let (a, b, c) = (spawn("10s"), spawn("10s"), spawn("10s"));
    let (a, b, c) = tokio::join!(finish(a), finish(b), finish(c));
    for out in [&a, &b, &c] {
        assert_eq!(code(out), 0, "{}", stderr(out));
    }
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    let (mut running, mut most) = (0, 0);
    for line in &lines {
        if let Some(slot) = line.strip_prefix("start ") {
            assert!(slot == "0" || slot == "1", "{lines:?}");
            running += 1;
            most = most.max(running);
        } else {
            running -= 1;
        }
    }
    assert_eq!(most, 2, "at most and at last two at once: {lines:?}");
    // Without waiting, a third while two hold is refused as held elsewhere.
    let hold = "sleep 2";
    let (a, b) = (
        redquorum(
            &nodes,
            &[
                "exec", "-n", "2", "--ttl", "5s", &resource, "--", "sh", "-c", hold,
            ],
        )
        .spawn()
        .expect("spawn"),
        redquorum(
            &nodes,
            &[
                "exec", "-n", "2", "--ttl", "5s", &resource, "--", "sh", "-c", hold,
            ],
        )
        .spawn()
        .expect("spawn"),
    );
    // Wait until both hold their permits (`status -n 2`).
    eventually_ok("both hold a permit", Duration::from_secs(10), async || {
        let out = run(&nodes, &["status", "-n", "2", "--json", &resource]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let permits: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            permits["slots"].as_array().map(Vec::len),
            Some(2),
            "{permits}"
        );
        if permits["held"] == 2 {
            Ok(())
        } else {
            Err(permits)
        }
    })
    .await;
    let third = run(&nodes, &["exec", "-n", "2", &resource, "--", "true"]).await;
    assert_eq!(code(&third), 75, "{}", stderr(&third));
    // A third with another count is refused as a usage error, and runs
    // nothing (it would have found slot 2 free).
    let other = run(&nodes, &["exec", "-n", "3", &resource, "--", "false"]).await;
    assert_eq!(code(&other), 64, "{}", stderr(&other));
    assert!(stderr(&other).contains("-n 2"), "{}", stderr(&other));
    let (a, b) = tokio::join!(finish(a), finish(b));
    assert_eq!((code(&a), code(&b)), (0, 0));
    let bad = run(&nodes, &["exec", "-n", "0", &resource, "--", "true"]).await;
    assert_eq!(code(&bad), 64, "{}", stderr(&bad));
    let _ = std::fs::remove_dir_all(dir);
}

/// `redquorum status --rw --json RESOURCE` parsed, once it exits 0 and
/// `until` holds of it (at most 10 s); `what` names the wait.
async fn rw_status_until(
    nodes: &[String],
    resource: &str,
    what: &str,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    eventually_ok(what, Duration::from_secs(10), async || {
        let out = run(nodes, &["status", "--rw", "--json", resource]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if until(&status) {
            Ok(status)
        } else {
            Err(status)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_read_runs_readers_together_and_write_alone_after_them() {
    let nodes = node_urls();
    let resource = unique("cli-rw");
    let dir = scratch("rw");
    let (log, go) = (dir.join("log"), dir.join("go"));
    // Two readers that hold until `go` exists.
    let reader = "echo start r >> \"$LOG\"; while [ ! -e \"$GO\" ]; do sleep 0.02; done; \
                  echo end r >> \"$LOG\"";
    let spawn = |mode: &str, script: &str| {
        redquorum(
            &nodes,
            &[
                "exec", mode, "--wait", "20s", "--ttl", "5s", &resource, "--", "sh", "-c", script,
            ],
        )
        .env("LOG", &log)
        .env("GO", &go)
        .spawn()
        .expect("spawn")
    };
    let (a, b) = (spawn("--read", reader), spawn("--read", reader));
    let status = rw_status_until(&nodes, &resource, "two readers", |s| s["readers"] == 2).await;
    assert_eq!(status["writer"]["verdict"], "FREE", "{status}");
    assert_eq!(status["intent_nodes"], 0, "{status}");
    // A writer waits for them, and its intent keeps a new reader off.
    let writer = spawn(
        "--write",
        "echo start w >> \"$LOG\"; echo end w >> \"$LOG\"",
    );
    let status = rw_status_until(
        &nodes,
        &resource,
        "the writer's intent on five nodes",
        |s| s["intent_nodes"] == 5,
    )
    .await;
    assert_eq!(status["readers"], 2, "{status}");
    let late = run(&nodes, &["exec", "--read", &resource, "--", "true"]).await;
    assert_eq!(code(&late), 75, "{}", stderr(&late));
    std::fs::write(&go, b"").expect("go");
    let (a, b, writer) = tokio::join!(finish(a), finish(b), finish(writer));
    for out in [&a, &b, &writer] {
        assert_eq!(code(out), 0, "{}", stderr(out));
    }
    let lines = std::fs::read_to_string(&log).expect("log");
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        ["start r", "start r", "end r", "end r", "start w", "end w"],
        "readers together, the writer alone after them"
    );
    // Everything released: no writer, no reader, no intent left.
    let status = rw_status_until(&nodes, &resource, "a status", |_| true).await;
    assert_eq!(status["writer"]["verdict"], "FREE", "{status}");
    assert_eq!(status["writer"]["free"], 5, "{status}");
    assert_eq!(
        (&status["readers"], &status["intent_nodes"]),
        (&0.into(), &0.into()),
        "{status}"
    );
    for bad in [
        &["exec", "--read", "--write", &resource, "--", "true"][..],
        &["exec", "--read", "-n", "2", &resource, "--", "true"],
        &["exec", "--write", "--fence", &resource, "--", "true"],
        &["status", "--rw", "-n", "2", &resource],
    ] {
        let out = run(&nodes, bad).await;
        assert_eq!(code(&out), 64, "{bad:?}: {}", stderr(&out));
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// How many nodes hold `key` now.
async fn nodes_holding(conns: &mut [redis::aio::MultiplexedConnection], key: &str) -> usize {
    let mut holding = 0;
    for conn in conns.iter_mut() {
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(conn)
            .await
            .expect("EXISTS");
        holding += usize::from(exists);
    }
    holding
}

/// A writer refused (at once, or after waiting) or interrupted while it
/// waits takes its intent back before `redquorum` exits: nothing is left
/// that would turn the next reader away.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_or_interrupted_writer_leaves_no_intent() {
    let nodes = node_urls();
    let redlock = redlock().await;
    let resource = unique("cli-intent");
    let intent = format!("{{{resource}}}:intent");
    let mut conns = raw_all().await;
    let reader = RwLock::new(&redlock, &resource)
        .unwrap()
        .read(Duration::from_secs(30))
        .await
        .expect("a reader");
    let once = ["exec", "--write", "--ttl", "20s", &resource, "--", "true"];
    let waited = [
        "exec", "--write", "--ttl", "20s", "--wait", "300ms", &resource, "--", "true",
    ];
    for args in [&once[..], &waited[..]] {
        for run_no in 0..5 {
            let out = run(&nodes, args).await;
            assert_eq!(code(&out), 75, "{args:?}: {}", stderr(&out));
            // Checked the moment it exited: its clean-up is done by then.
            let left = nodes_holding(&mut conns, &intent).await;
            assert_eq!(
                left, 0,
                "{args:?} run {run_no}: the intent stayed on {left} nodes"
            );
        }
    }
    // Interrupted while it waits: exit 130, and no intent either.
    let writer = redquorum(
        &nodes,
        &[
            "exec", "--write", "--ttl", "20s", "--wait", "30s", &resource, "--", "true",
        ],
    )
    .spawn()
    .expect("spawn");
    let start = Instant::now();
    while nodes_holding(&mut conns, &intent).await < 5 {
        assert!(
            start.elapsed() < BOUND,
            "the writer never marked its intent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = nix::unistd::Pid::from_raw(writer.id().expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let out = finish(writer).await;
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let left = nodes_holding(&mut conns, &intent).await;
    assert_eq!(
        left, 0,
        "an interrupted writer left its intent on {left} nodes"
    );
    // So a new reader is let in at once.
    let out = run(&nodes, &["exec", "--read", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    reader.release().await.expect("release");
}

/// `status` reads through the library's own members: a Redis Cluster
/// member (`redis+cluster://`) is read with slot routing like a lock call,
/// for a lock, a semaphore and a read/write lock.
#[tokio::test(flavor = "multi_thread")]
async fn status_reads_cluster_members() {
    let clusters: Vec<String> = std::env::var("REDQUORUM_CLUSTER_NODES")
        .expect("REDQUORUM_CLUSTER_NODES: three Redis Clusters (scripts/test)")
        .split(',')
        .map(str::to_owned)
        .collect();
    let redlock = redquorum::Redlock::builder()
        .nodes(&clusters)
        .node_timeout(Duration::from_secs(1))
        .require_quorum(true)
        .build()
        .await
        .expect("the clusters");
    let resource = unique("cli-cluster-status");
    let lock = redlock
        .lock(&resource, Duration::from_secs(30))
        .await
        .expect("lock");
    // Every member has the key: no call of the client is in flight.
    let start = Instant::now();
    while redlock
        .nodes()
        .iter()
        .map(|n| (n.name(), n.in_flight()))
        .any(|(_, n)| n > 0)
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "calls still in flight"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = run(&clusters, &["status", "--json", "--show-token", &resource]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(status["verdict"], "HELD", "{status}");
    assert_eq!(status["holder"]["token"], lock.token(), "{status}");
    assert_eq!(status["holder"]["nodes"], 3, "{status}");
    for args in [
        &["status", "-n", "2", "--json", &resource][..],
        &["status", "--rw", "--json", &resource],
    ] {
        let out = run(&clusters, args).await;
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
    std::mem::forget(lock); // the client is shut down: it expires
}

/// Healthy nodes 40 ms away: `exec` waits for their first connections
/// (not counted in the lock's validity) and runs the command; it never
/// exits 69 ("the cluster needs attention") against healthy nodes.
#[tokio::test(flavor = "multi_thread")]
async fn exec_against_distant_healthy_nodes_runs_the_command() {
    let mut proxies = Vec::new();
    for url in node_urls() {
        let proxy = Proxy::start(url.trim_start_matches("redis://")).await;
        proxy.set_latency(Duration::from_millis(20));
        proxies.push(proxy);
    }
    let via: Vec<String> = proxies.iter().map(Proxy::url).collect();
    for run_no in 0..3 {
        let resource = unique("cli-far");
        // A node timeout of six round trips: the default (50 ms) against a
        // 40 ms round trip leaves 10 ms for a shared machine's stalls, and
        // one try (no `--wait`) fails on the first.
        let mut command = Command::new(BIN);
        command
            .args(["--nodes", &via.join(","), "--node-timeout", "250ms"])
            .args(["exec", &resource, "--", "true"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = finish(command.spawn().expect("spawn")).await;
        assert_eq!(code(&out), 0, "run {run_no}: {}", stderr(&out));
        // Nothing degraded; a round trip this near the node timeout may be
        // named as such (docs/operations.md §4, distant nodes).
        let warned = stderr(&out);
        assert!(
            warned
                .lines()
                .filter(|l| l.contains("WARN"))
                .all(|l| l.contains("near or past the node timeout")),
            "{warned}"
        );
    }
}

/// `release --rw` frees a read/write lock by its writer's or a reader's
/// token, `release -n N` a permit by its holder's, and the plain `release`
/// of such a token releases nothing (exit 65, with a hint).
#[tokio::test(flavor = "multi_thread")]
async fn release_takes_read_write_locks_and_permits() {
    let nodes = node_urls();
    let resource = unique("cli-release-kinds");
    let redlock = redlock().await;
    let ttl = Duration::from_secs(20);

    let writer = RwLock::new(&redlock, &resource)
        .unwrap()
        .write(ttl)
        .await
        .unwrap();
    let token = writer.token().to_owned();
    let out = run(&nodes, &["release", &resource, "--token", &token]).await;
    assert_eq!(code(&out), 65, "{}", stderr(&out));
    assert!(stderr(&out).contains("--rw"), "{}", stderr(&out));
    let out = run(&nodes, &["release", "--rw", &resource, "--token", &token]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let reader = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_read(ttl)
        .await
        .expect("the writer is gone");
    let out = run(
        &nodes,
        &["release", "--rw", &resource, "--token", reader.token()],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let again = RwLock::new(&redlock, &resource)
        .unwrap()
        .try_write(ttl)
        .await
        .expect("the reader is gone");
    again.release().await.unwrap();
    std::mem::forget((writer, reader));

    let semaphore = Semaphore::new(&redlock, &resource, 3).unwrap();
    let permit = semaphore.try_acquire(ttl).await.unwrap();
    let token = permit.lock().token().to_owned();
    let out = run(
        &nodes,
        &["release", "-n", "3", &resource, "--token", &token],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(semaphore.inspect().await.unwrap().held(), 0);
    let out = run(
        &nodes,
        &["release", "-n", "3", &resource, "--token", &token],
    )
    .await;
    assert_eq!(code(&out), 65, "{}", stderr(&out));
    std::mem::forget(permit);
}

/// `redquorum leader --json NAME` parsed (exit 0 required).
async fn leader(nodes: &[String], name: &str) -> serde_json::Value {
    let out = run(nodes, &["leader", "--json", name]).await;
    assert_eq!(code(&out), 0, "leader failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("leader --json prints JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn elect_runs_one_leader_at_a_time_with_growing_terms_and_leader_shows_it() {
    let nodes = node_urls();
    let name = unique("cli-elect");
    let dir = scratch("elect");
    assert_eq!(leader(&nodes, &name).await["state"], "vacant");

    // The first candidate leads until its file is removed; the second waits
    // (elect waits as long as it takes) and leads after it.
    let gate = dir.join("gate");
    std::fs::write(&gate, "").unwrap();
    let script = format!(
        "echo \"$REDQUORUM_TERM\" > {dir}/term-$1; touch {dir}/leading-$1; \
         while [ -e {gate} ]; do sleep 0.02; done",
        dir = dir.display(),
        gate = gate.display()
    );
    let candidate = |who: &'static str| {
        redquorum(
            &nodes,
            &[
                "elect", "--ttl", "3s", "--label", who, &name, "--", "sh", "-c", &script, "sh", who,
            ],
        )
        .spawn()
        .expect("spawn elect")
    };
    let a = candidate("a");
    wait_for_file(&dir.join("leading-a"), BOUND).await;
    let b = candidate("b");
    let shown = leader(&nodes, &name).await;
    assert_eq!(shown["state"], "leading", "{shown}");
    assert_eq!(shown["label"], "a", "{shown}");
    let a_term: u64 = std::fs::read_to_string(dir.join("term-a"))
        .unwrap()
        .trim()
        .parse()
        .expect("a numeric term");
    assert_eq!(shown["term"], a_term);
    // status shows the label too.
    assert_eq!(status(&nodes, &name).await["holder"]["label"], "a");
    let text = run(&nodes, &["leader", &name]).await;
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(&format!("term {a_term} led by a")), "{text}");
    assert!(!dir.join("leading-b").exists(), "b led beside a");

    // a's command ends: b is elected, with a larger term.
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(code(&finish(a).await), 0);
    std::fs::write(&gate, "").unwrap();
    wait_for_file(&dir.join("leading-b"), BOUND).await;
    let b_term: u64 = std::fs::read_to_string(dir.join("term-b"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(b_term > a_term, "{b_term} after {a_term}");
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(code(&finish(b).await), 0);
    assert_eq!(leader(&nodes, &name).await["state"], "vacant");
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_watch_prints_each_change_and_leader_exits_69_without_a_quorum() {
    let nodes = node_urls();
    let name = unique("cli-watch");
    let redlock = redlock().await;
    let election = Election::new(&redlock, &name).unwrap();
    let mut watch = redquorum(&nodes, &["leader", "--watch", "--json", &name])
        .spawn()
        .expect("spawn leader --watch");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
    let mut next = async || -> serde_json::Value {
        let line = tokio::time::timeout(BOUND, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await["state"], "vacant");
    let leadership = election
        .campaign_with(
            Duration::from_secs(10),
            &redquorum::AcquireOptions::new().label("watched"),
            &LeaseOptions::new(),
        )
        .await
        .unwrap();
    let seen = next().await;
    assert_eq!(
        (seen["term"].as_u64(), seen["label"].as_str()),
        (Some(leadership.term()), Some("watched"))
    );
    leadership.resign().await.unwrap();
    assert_eq!(next().await["state"], "vacant");
    watch.kill().await.unwrap();

    // Three of five addresses where nothing listens: too few answers to
    // say who leads.
    let mut urls = nodes.clone();
    let closed: Vec<String> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("redis://{}", l.local_addr().unwrap())
        })
        .collect();
    urls.splice(..3, closed);
    let out = run(&urls, &["leader", "--node-timeout", "200ms", &name]).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("unknown"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
