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

mod support;

use std::process::Stdio;
use std::time::Duration;

use redquorum::Redlock;
use support::cli::*;
use support::proxy::Proxy;
use support::*;
use tokio::process::Command;
use tokio::time::Instant;

/// `redquorum status --json RESOURCE` parsed.
async fn status(nodes: &[String], resource: &str) -> serde_json::Value {
    let out = run(nodes, &["status", "--json", "--show-token", resource]).await;
    assert_eq!(code(&out), 0, "status failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

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
async fn a_held_resource_with_zero_wait_exits_75_within_a_second() {
    let nodes = node_urls();
    let resource = unique("cli-held");
    let redlock = Redlock::connect(&nodes).await.unwrap();
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
        assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
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
    let redlock = Redlock::connect(&nodes).await.unwrap();
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

/// Whether `pid` is gone or a zombie (dead, not yet reaped).
fn dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_redquorum_takes_the_command_with_it() {
    let nodes = node_urls();
    let resource = unique("cli-pdeath");
    let dir = scratch("pdeath");
    let pidfile = dir.join("pid");
    let mut child = redquorum(
        &nodes,
        &[
            "exec",
            "--ttl",
            "5s",
            &resource,
            "--",
            "sh",
            "-c",
            "echo $$ > \"$PIDFILE.tmp\"; mv \"$PIDFILE.tmp\" \"$PIDFILE\"; exec sleep 20",
        ],
    )
    .env("PIDFILE", &pidfile)
    .spawn()
    .unwrap();
    wait_for_file(&pidfile, Duration::from_secs(5)).await;
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    assert!(!dead(&pid));
    // SIGKILL: redquorum gets no chance to stop the command itself.
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let start = Instant::now();
    while !dead(&pid) {
        if start.elapsed() > Duration::from_secs(2) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
            panic!("the command outlived a SIGKILLed redquorum");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_left_in_the_group_are_stopped_before_the_release() {
    let nodes = node_urls();
    let resource = unique("cli-leftover");
    let dir = scratch("leftover");
    let late = dir.join("late");
    let start = Instant::now();
    // The command exits at once, leaving a background job that would write
    // `late` after the lock is released.
    let out = run(
        &nodes,
        &[
            "exec",
            "--grace",
            "1s",
            &resource,
            "--",
            "sh",
            "-c",
            &format!("(sleep 3; touch '{}') & exit 0", late.display()),
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status(&nodes, &resource).await["verdict"], "FREE");
    tokio::time::sleep_until(start + Duration::from_secs(4)).await;
    assert!(!late.exists(), "a process of the command outlived the lock");
    let _ = std::fs::remove_dir_all(dir);
}

/// Sets `key` to a foreign holder's value on every node (as an rslock,
/// node-redlock or redsync holder would), for `ttl_ms`.
async fn foreign_holder(key: &str, ttl_ms: u64) {
    for url in node_urls() {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let () = redis::cmd("SET")
            .arg(key)
            .arg("foreign-holder")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn interop_keys_meet_a_foreign_holder_of_the_resource_name() {
    let nodes = node_urls();
    let resource = unique("cli-interop");
    foreign_holder(&resource, 30_000).await;
    // Interop mode, by flag and by environment: the resource name is the
    // key, held elsewhere.
    let out = run(&nodes, &["--interop-keys", "exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("held elsewhere"), "{}", stderr(&out));
    let out = finish(
        redquorum(&nodes, &["exec", &resource, "--", "true"])
            .env("REDQUORUM_INTEROP_KEYS", "1")
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Without it (the negative control) the two never meet.
    let out = run(&nodes, &["exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A prefix names another key: free.
    let out = run(
        &nodes,
        &[
            "--interop-keys",
            "--key-prefix",
            "app:",
            "exec",
            &resource,
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(
        &nodes,
        &["--key-prefix", "{bad}", "exec", &resource, "--", "true"],
    )
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
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
    let start = Instant::now();
    loop {
        let out = run(&nodes, &["status", "-n", "2", "--json", &resource]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let permits: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            permits["slots"].as_array().map(Vec::len),
            Some(2),
            "{permits}"
        );
        if permits["held"] == 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{permits}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
/// `until` holds of it (bounded).
async fn rw_status_until(
    nodes: &[String],
    resource: &str,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let out = run(nodes, &["status", "--rw", "--json", resource]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if until(&status) {
            return status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let status = rw_status_until(&nodes, &resource, |s| s["readers"] == 2).await;
    assert_eq!(status["writer"]["verdict"], "FREE", "{status}");
    assert_eq!(status["intent_nodes"], 0, "{status}");
    // A writer waits for them, and its intent keeps a new reader off.
    let writer = spawn(
        "--write",
        "echo start w >> \"$LOG\"; echo end w >> \"$LOG\"",
    );
    let status = rw_status_until(&nodes, &resource, |s| s["intent_nodes"] == 5).await;
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
    let status = rw_status_until(&nodes, &resource, |_| true).await;
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
    let reader = redlock
        .read_lock(&resource, Duration::from_secs(30))
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
    while redlock.in_flight().any(|(_, n)| n > 0) {
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
        // The default node timeout (50 ms) against a 40 ms round trip.
        let mut command = Command::new(BIN);
        command
            .args(["--nodes", &via.join(","), "exec", &resource, "--", "true"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = finish(command.spawn().expect("spawn")).await;
        assert_eq!(code(&out), 0, "run {run_no}: {}", stderr(&out));
        assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
    }
}

/// `release --rw` frees a read/write lock by its writer's or a reader's
/// token, `release -n N` a permit by its holder's, and the plain `release`
/// of such a token releases nothing (exit 65, with a hint).
#[tokio::test(flavor = "multi_thread")]
async fn release_takes_read_write_locks_and_permits() {
    let nodes = node_urls();
    let resource = unique("cli-release-kinds");
    let redlock = Redlock::connect(&nodes).await.unwrap();
    let ttl = Duration::from_secs(20);

    let writer = redlock.write_lock(&resource, ttl).await.unwrap();
    let token = writer.token().to_owned();
    let out = run(&nodes, &["release", &resource, "--token", &token]).await;
    assert_eq!(code(&out), 65, "{}", stderr(&out));
    assert!(stderr(&out).contains("--rw"), "{}", stderr(&out));
    let out = run(&nodes, &["release", "--rw", &resource, "--token", &token]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let reader = redlock
        .try_read_lock(&resource, ttl)
        .await
        .expect("the writer is gone");
    let out = run(
        &nodes,
        &["release", "--rw", &resource, "--token", reader.token()],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let again = redlock
        .try_write_lock(&resource, ttl)
        .await
        .expect("the reader is gone");
    again.release().await.unwrap();
    std::mem::forget((writer, reader));

    let semaphore = redlock.semaphore(&resource, 3).unwrap();
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
    let redlock = Redlock::connect(&nodes).await.unwrap();
    let election = redlock.election(&name).unwrap();
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
        .campaign(
            Duration::from_secs(10),
            &redquorum::LockOptions::new().label("watched"),
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
