//! The `redquorum` binary on the five real nodes: exclusion between two
//! execs, exit codes, a lease lost mid-run, signals, status and release.
//!
//! A majority is "frozen" by cutting the binary's links to three nodes
//! through test proxies, so these tests never disturb the shared cluster.
//! Every wait is bounded; timing bounds are generous liveness bounds.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod interop;
mod processes;
#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use support::cli::*;
use support::proxy::Proxy;
use support::*;
use tokio::process::Command;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn two_execs_on_one_resource_run_one_after_the_other() {
    let nodes = node_urls();
    let resource = unique("cli-serial");
    let dir = scratch("serial");
    let log = dir.join("log");
    // Each run logs its start and end; under the lock they never interleave.
    let script = "echo start $$ >> \"$LOG\"; sleep 1; echo end $$ >> \"$LOG\"";
    let start = Instant::now();
    let spawn = || {
        redquorum(
            &nodes,
            &[
                "exec", "--wait", "10s", "--ttl", "5s", &resource, "--", "sh", "-c", script,
            ],
        )
        .env("LOG", &log)
        .spawn()
        .expect("spawn")
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = tokio::join!(finish(a), finish(b));
    let elapsed = start.elapsed();
    assert_eq!(code(&a), 0, "first exec: {}", stderr(&a));
    assert_eq!(code(&b), 0, "second exec: {}", stderr(&b));
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let kinds: Vec<&str> = lines.iter().map(|l| &l[..l.find(' ').unwrap()]).collect();
    assert_eq!(
        kinds,
        ["start", "end", "start", "end"],
        "overlap: {lines:?}"
    );
    assert_eq!(lines[0][6..], lines[1][4..], "{lines:?}");
    assert_eq!(lines[2][6..], lines[3][4..], "{lines:?}");
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    // The second started soon after the first released (woken, not polling
    // until a TTL), and both released: the resource is free.
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(status(&nodes, &resource).await["verdict"], "FREE");
    println!("two execs of `sleep 1` took {elapsed:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_commands_exit_code_passes_through() {
    let nodes = node_urls();
    let resource = unique("cli-code");
    let out = run(&nodes, &["exec", &resource, "--", "sh", "-c", "exit 7"]).await;
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    // Death by signal is reported as a shell would: 128 + 9.
    let out = run(&nodes, &["exec", &resource, "--", "sh", "-c", "kill -9 $$"]).await;
    assert_eq!(code(&out), 137, "{}", stderr(&out));
    // A command that does not exist: 127, and the lock is released.
    let out = run(&nodes, &["exec", &resource, "--", "/nonexistent/command"]).await;
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert_eq!(status(&nodes, &resource).await["verdict"], "FREE");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_sees_resource_token_and_fence() {
    let nodes = node_urls();
    let resource = unique("cli-env");
    let script = "printf '%s\\n%s\\n%s\\n' \"$REDQUORUM_RESOURCE\" \"$REDQUORUM_TOKEN\" \"$REDQUORUM_FENCE\"";
    // The nodes from REDQUORUM_NODES this time, not --nodes.
    let out = Command::new(BIN)
        .args(["exec", "--fence", &resource, "--", "sh", "-c", script])
        .env("REDQUORUM_NODES", nodes.join(","))
        .env("REDQUORUM_FENCE", "stale")
        .output()
        .await
        .expect("run");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], resource);
    assert_eq!(lines[1].len(), 32, "{lines:?}");
    assert!(lines[1].bytes().all(|b| b.is_ascii_hexdigit()), "{lines:?}");
    let first: u64 = lines[2].parse().expect("a numeric fence");
    // A second holder's fence is larger; without --fence there is none.
    let out = run(
        &nodes,
        &["exec", "--fence", &resource, "--", "sh", "-c", script],
    )
    .await;
    let second: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(second > first, "{second} after {first}");
    let out = Command::new(BIN)
        .args([
            "--nodes",
            &nodes.join(","),
            "exec",
            &resource,
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("REDQUORUM_FENCE", "stale")
        .output()
        .await
        .expect("run");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().lines().nth(2),
        Some("")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_resource_with_zero_wait_exits_75_at_once() {
    let nodes = node_urls();
    let resource = unique("cli-held");
    let redlock = redlock().await;
    let lock = redlock
        .lock(&resource, Duration::from_secs(20))
        .await
        .unwrap();
    let dir = scratch("held");
    let marker = dir.join("ran");
    for args in [
        &["exec", "--wait", "0s", &resource, "--", "touch"][..],
        // Without --wait: one try.
        &["exec", &resource, "--", "touch"][..],
    ] {
        let start = Instant::now();
        let mut command = redquorum(&nodes, args);
        command.arg(&marker);
        let out = finish(command.spawn().unwrap()).await;
        let elapsed = start.elapsed();
        assert_eq!(code(&out), 75, "{}", stderr(&out));
        // At once: a process's start and first connections, far below the
        // 20 s a wait for the holder's TTL would take (a loaded machine
        // starts a debug binary slowly, so the bound is not one second).
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
        assert!(stderr(&out).contains("held elsewhere"), "{}", stderr(&out));
        println!("{args:?}: exit 75 after {elapsed:?}");
    }
    assert!(!marker.exists(), "the command ran without the lock");
    // The holder is untouched.
    let s = status(&nodes, &resource).await;
    assert_eq!(s["verdict"], "HELD");
    assert_eq!(s["holder"]["token"], lock.token());
    lock.release().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_lost_mid_run_stops_the_command_before_it_finishes() {
    let mut proxies = Vec::new();
    for url in node_urls() {
        proxies.push(Proxy::start(url.trim_start_matches("redis://")).await);
    }
    let via: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let resource = unique("cli-lost");
    let dir = scratch("lost");
    let (started, finished) = (dir.join("started"), dir.join("finished"));
    let (ttl, grace) = (Duration::from_secs(3), Duration::from_secs(1));
    let child = redquorum(
        &via,
        &[
            "exec",
            "--ttl",
            "3s",
            "--grace",
            "1s",
            &resource,
            "--",
            "sh",
            "-c",
            "touch \"$STARTED\"; sleep 6; touch \"$FINISHED\"",
        ],
    )
    .env("STARTED", &started)
    .env("FINISHED", &finished)
    .spawn()
    .unwrap();
    wait_for_file(&started, Duration::from_secs(5)).await;
    let run_start = Instant::now();
    // Let one extension happen, then freeze a majority for this process.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for proxy in &proxies[..3] {
        proxy.set_cut(true);
    }
    let cut = Instant::now();
    let out = finish(child).await;
    let stopped_after = cut.elapsed();
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert!(
        stopped_after <= ttl + grace + Duration::from_secs(1),
        "stopped {stopped_after:?} after the cut"
    );
    assert!(stderr(&out).contains("lease on"), "{}", stderr(&out));
    // The command would have finished 6 s after it started: it never does.
    tokio::time::sleep_until(run_start + Duration::from_secs(7)).await;
    assert!(
        !finished.exists(),
        "the command ran on after the lease was lost"
    );
    println!(
        "lease lost: command stopped {stopped_after:?} after the cut (TTL {ttl:?}, grace {grace:?})"
    );
    drop(proxies);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_is_passed_on_and_the_lock_released() {
    let nodes = node_urls();
    let resource = unique("cli-signal");
    let dir = scratch("signal");
    let (started, got) = (dir.join("started"), dir.join("got-term"));
    let child = redquorum(
        &nodes,
        &[
            "exec",
            "--ttl",
            "20s",
            &resource,
            "--",
            "sh",
            "-c",
            "trap 'touch \"$GOT\"; exit 0' TERM; touch \"$STARTED\"; sleep 10 & wait",
        ],
    )
    .env("STARTED", &started)
    .env("GOT", &got)
    .spawn()
    .unwrap();
    let pid = child.id().unwrap().to_string();
    wait_for_file(&started, Duration::from_secs(5)).await;
    let sent = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = finish(child).await;
    // 128 + SIGTERM, whatever the command exited with.
    assert_eq!(code(&out), 143, "{}", stderr(&out));
    assert!(got.exists(), "the command did not get SIGTERM");
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent.elapsed()
    );
    // Released at once, not left to its 20 s TTL.
    assert_eq!(status(&nodes, &resource).await["verdict"], "FREE");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_the_holder_and_release_by_token_frees_it() {
    let nodes = node_urls();
    let resource = unique("cli-status");
    let redlock = redlock().await;
    let lock = redlock
        .lock(&resource, Duration::from_secs(20))
        .await
        .unwrap();
    let token = lock.token().to_owned();

    let s = status(&nodes, &resource).await;
    assert_eq!(s["verdict"], "HELD", "{s}");
    assert_eq!(s["quorum"], 3);
    assert_eq!(s["holder"]["nodes"], 5);
    assert_eq!(s["holder"]["token_prefix"], format!("{}…", &token[..8]));
    for node in s["nodes"].as_array().unwrap() {
        assert_eq!(node["reachable"], true, "{node}");
        assert_eq!(node["held"], true, "{node}");
        let pttl = node["pttl_ms"].as_u64().unwrap();
        assert!(pttl > 15_000 && pttl <= 20_000, "{node}");
    }
    // The table says the same, with the token shortened.
    let out = run(&nodes, &["status", &resource]).await;
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains(&format!("{}…", &token[..8])), "{table}");
    assert!(!table.contains(&token), "{table}");
    assert!(table.trim_end().ends_with(": HELD"), "{table}");

    // A wrong token releases nothing, and says so by its exit code.
    let out = run(&nodes, &["release", &resource, "--token", "not-the-token"]).await;
    assert_eq!(code(&out), 65, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing released"),
        "{}",
        stderr(&out)
    );
    assert_eq!(status(&nodes, &resource).await["verdict"], "HELD");

    let out = run(&nodes, &["release", &resource, "--token", &token]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("on 5 of 5 nodes"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let s = status(&nodes, &resource).await;
    assert_eq!(s["verdict"], "FREE", "{s}");
    assert!(s["holder"].is_null());
    // The holder finds its lock gone.
    let mut lock = lock;
    assert!(lock.extend(Duration::from_secs(20)).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_with_a_majority_unreachable_is_unknown() {
    let mut nodes = node_urls();
    let resource = unique("cli-unknown");
    // Three of five addresses where nothing listens.
    let closed: Vec<String> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("redis://{}", l.local_addr().unwrap())
        })
        .collect();
    nodes.splice(..3, closed);
    let out = run(&nodes, &["status", "--json", &resource]).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["verdict"], "UNKNOWN");
    assert_eq!(s["reachable"], 2);
    assert_eq!(s["nodes"][0]["reachable"], false);
    assert!(s["nodes"][0]["error"].is_string());
}

/// Over mutual TLS (`scripts/tls-nodes`): exec runs the command under the
/// lock and status reads the nodes, with --tls-ca / --tls-cert / --tls-key
/// (and the same through REDQUORUM_TLS_*); without the client certificate
/// the nodes refuse, as a clear error.
#[tokio::test(flavor = "multi_thread")]
async fn exec_and_status_over_mutual_tls() {
    let nodes: Vec<String> = std::env::var("REDQUORUM_TLS_NODES")
        .expect("REDQUORUM_TLS_NODES is not set: run scripts/test (it starts scripts/tls-nodes)")
        .split(',')
        .map(str::to_owned)
        .collect();
    let dir = std::env::var("REDQUORUM_TLS_DIR").expect("REDQUORUM_TLS_DIR");
    let file = |name: &str| format!("{dir}/{name}");
    let resource = unique("cli-tls");
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let out = run(
        &nodes,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "exec",
            &resource,
            "--",
            "sh",
            "-c",
            "test -n \"$REDQUORUM_TOKEN\"",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = Command::new(BIN)
        .args(["--node-timeout", "1s", "status", "--json", &resource])
        .env("REDQUORUM_NODES", nodes.join(","))
        .env("REDQUORUM_TLS_CA", &ca)
        .env("REDQUORUM_TLS_CERT", &cert)
        .env("REDQUORUM_TLS_KEY", &key)
        .output()
        .await
        .expect("run");
    let status: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(status["verdict"], "FREE", "{status}");
    let out = run(&nodes, &["--tls-ca", &ca, "exec", &resource, "--", "true"]).await;
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("TLS"), "{}", stderr(&out));
}

/// `redquorum nodes`: every node up with its server (exit 0); without a
/// quorum, the unreachable ones and why (exit 69).
#[tokio::test(flavor = "multi_thread")]
async fn nodes_shows_reachability_and_exits_69_without_a_quorum() {
    let nodes = node_urls();
    let out = run(&nodes, &["nodes", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reachable"], 5, "{v}");
    assert_eq!(v["verdict"], "OK");
    assert!(v["nodes"][0]["server"].is_string(), "{v}");
    let mut mixed = nodes[..2].to_vec();
    mixed.extend([
        "redis://127.0.0.1:1".to_owned(),
        "redis://127.0.0.1:2".to_owned(),
        "redis://127.0.0.1:3".to_owned(),
    ]);
    let out = run(&mixed, &["nodes"]).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.contains("down") && table.contains("2 of 5 reachable"),
        "{table}"
    );
}

/// The command gets the lock, not the node credentials; and no password
/// reaches stderr, whatever the URL form.
#[tokio::test(flavor = "multi_thread")]
async fn no_credentials_reach_the_command_or_the_output() {
    let nodes = node_urls();
    let resource = unique("cli-secret");
    let out = Command::new(BIN)
        .args([
            "--node-timeout",
            "1s",
            "exec",
            &resource,
            "--",
            "sh",
            "-c",
            "env",
        ])
        .env("REDQUORUM_NODES", nodes.join(","))
        .output()
        .await
        .expect("run");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let env = String::from_utf8(out.stdout).unwrap();
    assert!(env.contains("REDQUORUM_TOKEN="), "{env}");
    // (Other REDQUORUM_NODES_* variables of the caller's may pass through.)
    assert!(
        !env.lines().any(|l| l.starts_with("REDQUORUM_NODES="))
            && !nodes.iter().any(|url| env.contains(url.as_str())),
        "the command sees the node URLs"
    );
    for url in [
        "redis://:SECRETPW#X@127.0.0.1:7001",
        "redis://user:SECRETPW/X@127.0.0.1:7001",
        "redis://:SECRETPW@127.0.0.1:notaport",
        "redis+unix:///nonexistent.sock?pass=SECRETPW&db=x",
    ] {
        let nodes = vec![url.to_owned()];
        for args in [
            vec!["exec", "r", "--", "true"],
            vec!["status", "r"],
            vec!["-v", "status", "r"],
        ] {
            let out = run(&nodes, &args).await;
            let text = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
            assert!(!text.contains("SECRETPW"), "{url} {args:?}: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_usage_exits_64_without_running_anything() {
    let nodes = node_urls();
    let dir = scratch("usage");
    let marker = dir.join("ran");
    let touch = marker.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["exec", "--ttl", "soon", "r", "--", "touch", touch],
        vec!["exec", "--ttl", "0s", "r", "--", "touch", touch],
        vec![
            "exec", "--ttl", "3s", "--grace", "2s", "r", "--", "touch", touch,
        ],
        vec!["exec", "", "--", "touch", touch],
        vec!["exec", "r"],
        vec!["release", "r", "--token", ""],
        vec!["status", ""],
        vec!["--node-timeout", "0s", "exec", "r", "--", "touch", touch],
        vec!["no-such-command"],
    ];
    for args in &cases {
        let out = run(&nodes, args).await;
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
    for nodes in [vec![String::new()], vec!["http://x".to_owned()]] {
        let out = run(&nodes, &["exec", "r", "--", "touch", touch]).await;
        assert_eq!(code(&out), 64, "{nodes:?}: {}", stderr(&out));
    }
    assert!(!marker.exists());
    let out = run(&nodes, &["--help"]).await;
    assert_eq!(code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("79"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_degraded_node_shows_on_stderr_without_asking_and_v_shows_every_answer() {
    let mut nodes = node_urls();
    // Nothing listens on port 1: a dead fifth node.
    nodes[4] = "redis://127.0.0.1:1".to_owned();
    let resource = unique("cli-degraded");
    let out = run(&nodes, &["exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l.contains("WARN")
            && l.contains("redis://127.0.0.1:1")
            && l.contains("unreachable")),
        "no warning for the dead node:\n{err}"
    );
    assert_eq!(
        err.matches("WARN").count(),
        1,
        "one line, not one per call:\n{err}"
    );
    let out = run(&nodes, &["-v", "exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    for node in &nodes[..4] {
        assert!(
            err.contains(node.as_str()),
            "-v names every node's answer ({node}):\n{err}"
        );
    }
    assert!(err.contains("answer="), "{err}");
}
