//! What the `redquorum` binary checks of the nodes before it runs anything:
//! a user who may not run the scripts exits 77 before the command starts,
//! a TTL above `--max-ttl` is bad usage, and `nodes` and `status` name a
//! node that may evict lock keys; and what it reads of them: the leader's
//! own term, and what `list` shows held. Once per period (`exec
//! --at-least`), with the default `--max-ttl`.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redquorum::Semaphore;
use support::cli::*;
use support::*;

/// `ACL args…` on every node.
fn acl_all(args: &[&str]) {
    for url in node_urls() {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        let _: redis::Value = redis::cmd("ACL").arg(args).query(&mut conn).unwrap();
    }
}

/// A user on every node, deleted on drop.
struct User(String);

impl Drop for User {
    fn drop(&mut self) {
        acl_all(&["DELUSER", &self.0]);
    }
}

/// Before: the user's plain acquire (a native SET) succeeded, the command
/// started, and the first extension (a script) got NOPERM: exit 79, the key
/// left for its TTL. Now: exit 77 before the command runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_script_permissions_exits_77_before_the_command() {
    let user = User(format!("cli-noscripts-{:08x}", rand::random::<u32>()));
    acl_all(&[
        "SETUSER",
        &user.0,
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-fcall",
        "-function|load",
        "-eval",
    ]);
    let urls: Vec<String> = node_urls()
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://{}:pw@", user.0), 1))
        .collect();
    let touched = std::env::temp_dir().join(format!("redquorum-77-{:08x}", rand::random::<u32>()));
    let resource = unique("cli-noperm");
    let out = run(
        &urls,
        &[
            "exec",
            "--ttl",
            "3s",
            &resource,
            "--",
            "touch",
            touched.to_str().unwrap(),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{stderr}");
    assert!(stderr.contains("eval"), "{stderr}");
    assert!(
        !stderr.contains(":pw@"),
        "a password in the output: {stderr}"
    );
    assert!(!touched.exists(), "the command ran");
}

/// A TTL above the longest one is refused as bad usage, with the setting
/// to change.
#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_above_max_ttl_is_bad_usage() {
    let out = run(
        &node_urls(),
        &[
            "--max-ttl",
            "60s",
            "exec",
            "--ttl",
            "61s",
            "r",
            "--",
            "true",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--max-ttl"), "{stderr}");
}

/// `nodes` names a node whose policy may evict lock keys; `--strict`
/// refuses it (exit 64).
#[tokio::test(flavor = "multi_thread")]
async fn nodes_names_an_evicting_policy() {
    let url = &node_urls()[1];
    let config = |name: &str, value: &str| {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut conn)
            .unwrap();
    };
    config("maxmemory", "1gb");
    config("maxmemory-policy", "allkeys-lru");
    let listed = run(&node_urls(), &["nodes"]).await;
    let status = run(&node_urls(), &["status", "r"]).await;
    let strict = run(&node_urls(), &["--strict", "exec", "r", "--", "true"]).await;
    config("maxmemory-policy", "noeviction");
    config("maxmemory", "0");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(stdout.contains("evicts:allkeys-lru"), "{stdout}");
    assert!(stdout.contains("may evict lock keys"), "{stdout}");
    let noted = String::from_utf8_lossy(&status.stderr);
    assert!(noted.contains("may evict lock keys"), "status: {noted}");
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("allkeys-lru"), "{stderr}");
}

/// `--timeout` is no option: it is refused with both it may mean, not
/// only the one clap finds similar (`--node-timeout`).
#[tokio::test(flavor = "multi_thread")]
async fn timeout_points_at_wait_and_node_timeout() {
    let out = run(
        &node_urls(),
        &["exec", "--timeout", "5s", "r", "--", "true"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("--wait") && stderr.contains("--node-timeout"),
        "{stderr}"
    );
}

/// `release --token` takes the prefix `status` shows (`3b99b6b3…`): the
/// one holder's token it begins. Before, it matched nothing: exit 65 and
/// a hint about --rw.
#[tokio::test(flavor = "multi_thread")]
async fn release_takes_the_token_prefix_status_shows() {
    let redlock = redlock().await;
    let resource = unique("cli-prefix");
    let lock = redlock
        .lock(&resource, Duration::from_secs(30))
        .await
        .expect("lock");
    let shown = format!("{}…", &lock.token()[..8]);
    let out = run(&node_urls(), &["release", &resource, "--token", &shown]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Gone: the lock is free for another.
    let again = redlock.try_lock(&resource, Duration::from_secs(5)).await;
    assert!(again.is_ok(), "still held: {again:?}");
    drop(lock);
}

/// `status NAME` of a semaphore whose permits are all held is never FREE,
/// with or without `-n`, and a wrong `-n` is corrected from the count its
/// nodes keep. Before: FREE and exit 0 without `-n`; "2 of 3 permits held"
/// with `-n 3` on a 2-permit semaphore.
#[tokio::test(flavor = "multi_thread")]
async fn status_reads_a_semaphores_permit_count_from_its_nodes() {
    let redlock = redlock().await;
    let name = unique("cli-sem");
    let api = Semaphore::new(&redlock, &name, 2).unwrap();
    let a = api.try_acquire(Duration::from_secs(30)).await.unwrap();
    let b = api.try_acquire(Duration::from_secs(30)).await.unwrap();
    for args in [
        vec!["status", "--json", name.as_str()],
        vec!["status", "-n", "3", "--json", name.as_str()],
    ] {
        let out = run(&node_urls(), &args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(status["permits"], 2, "{args:?}: {status}");
        assert_eq!(status["held"], 2, "{args:?}: {status}");
        assert_eq!(status["available"], 0, "{args:?}: {status}");
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
}

/// `leader --json` prints the leader's own term (its `REDQUORUM_TERM`), even
/// after other candidates' rounds moved the counters on some nodes past it.
#[tokio::test(flavor = "multi_thread")]
async fn leader_prints_the_leaders_own_term_after_counters_moved_on() {
    let nodes = node_urls();
    let name = unique("term");
    let dir = scratch("term");
    let (term_file, done) = (dir.join("term"), dir.join("done"));
    let leader = redquorum(
        &nodes,
        &[
            "elect",
            "--ttl",
            "5s",
            &name,
            "--",
            "sh",
            "-c",
            "echo \"$REDQUORUM_TERM\" > \"$TERM_FILE.tmp\"; mv \"$TERM_FILE.tmp\" \"$TERM_FILE\"; \
             i=0; while [ ! -f \"$DONE\" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
        ],
    )
    .env("TERM_FILE", &term_file)
    .env("DONE", &done)
    .spawn()
    .unwrap();
    wait_for_file(&term_file, Duration::from_secs(10)).await;
    let term: u64 = std::fs::read_to_string(&term_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Other candidates' rounds drew counters on nodes 1 and 5.
    let fence_key = format!("{{{name}}}:fence");
    let mut conns = raw_all().await;
    for i in [0, 4] {
        // The election's own counter (it exists: the layout written here is
        // the one in use). A node whose yes came after the grant's decision
        // keeps its own draw, which may be below the term (docs/fencing.md):
        // move it past the term, as a later candidate's round would.
        let counter: Option<u64> = redis::cmd("GET")
            .arg(&fence_key)
            .query_async(&mut conns[i])
            .await
            .unwrap();
        let counter = counter.unwrap_or_else(|| panic!("node {}: no counter", i + 1));
        let moved = counter.max(term) + 17;
        let _: () = redis::cmd("SET")
            .arg(&fence_key)
            .arg(moved)
            .query_async(&mut conns[i])
            .await
            .unwrap();
    }
    let out = run(&nodes, &["leader", "--json", &name]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["term"], term, "leader --json: {seen}");
    std::fs::write(&done, b"").unwrap();
    let out = finish(leader).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
}

/// `exec --at-least`: the slot stays taken after a command that ended
/// sooner, so a replica whose cron fires 2.5 s late does not run it again
/// (within the TTL the lock key itself stays: a replica without
/// `--at-least` is refused too).
#[tokio::test(flavor = "multi_thread")]
async fn at_least_keeps_the_slot_taken_after_the_command_ends() {
    let nodes = node_urls();
    let resource = unique("cron");
    let out = run(
        &nodes,
        &[
            "exec",
            "--ttl",
            "20s",
            "--at-least",
            "15s",
            &resource,
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The other replica's cron fires 2.5 s later (its clock 2.5 s behind):
    // the first replica's command is long over.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let dir = scratch("cron");
    let ran = dir.join("ran");
    let ran_arg = ran.display().to_string();
    let out = run(
        &nodes,
        &["exec", "--ttl", "20s", &resource, "--", "touch", &ran_arg],
    )
    .await;
    assert_eq!(code(&out), 75, "the late replica: {}", stderr(&out));
    assert!(!ran.exists(), "the late replica ran the slot again");
    let _ = std::fs::remove_dir_all(dir);
}

/// A nightly job with the default `--max-ttl` (60 s): `--ttl 23h
/// --at-least 23h` runs (the lease kept in steps of `--max-ttl`, the
/// period by its mark), and a second replica within the period exits 75
/// without running. Before, the first exited 64 ("TTL 82800s is above the
/// longest TTL 60s"). A zero period is bad usage.
#[tokio::test(flavor = "multi_thread")]
async fn a_nightly_period_runs_once_with_the_default_max_ttl() {
    let nodes = node_urls();
    let resource = unique("nightly");
    let nightly = ["exec", "--ttl", "23h", "--at-least", "23h", &resource, "--"];
    let out = run(&nodes, &[&nightly[..], &["true"]].concat()).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the lease is kept in steps of 1m"),
        "{}",
        stderr(&out)
    );
    let dir = scratch("nightly");
    let ran = dir.join("ran");
    let ran_arg = ran.display().to_string();
    let out = run(&nodes, &[&nightly[..], &["touch", &ran_arg]].concat()).await;
    assert_eq!(code(&out), 75, "the second replica: {}", stderr(&out));
    assert!(!ran.exists(), "the second replica ran within the period");
    let zero = ["exec", "--at-least", "0s", &resource, "--", "true"];
    let out = run(&nodes, &zero).await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("hold at least"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
}

/// `status` names a holder's key that lives longer than `--max-ttl` (a
/// peer such as rslock holding with `PX 120000`, or a client with a longer
/// max_ttl): its lock can outlive a restarted node's quarantine. Before,
/// the table showed the time to live and said nothing of it. A holder
/// within it (`PX 30000`) is not named.
#[tokio::test(flavor = "multi_thread")]
async fn status_names_a_holder_longer_than_max_ttl() {
    let resource = unique("cli-long-peer");
    let key = format!("{{{resource}}}:lock");
    redquorum_test_support::set_px_everywhere(&key, "peer-token", 120_000).await;
    let mut conns = raw_all().await;
    let out = run(&node_urls(), &["status", &resource]).await;
    redquorum_test_support::set_px_everywhere(&key, "peer-token", 30_000).await;
    let long = run(&node_urls(), &["status", &resource]).await;
    for conn in &mut conns {
        let _: () = redis::cmd("DEL").arg(&key).query_async(conn).await.unwrap();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("above --max-ttl 1m").count(), 5, "{stdout}");
    let stdout = String::from_utf8_lossy(&long.stdout);
    assert!(!stdout.contains("above --max-ttl"), "{stdout}");
}

/// The deployment record (docs/agreement.md): `nodes` shows it and each
/// node's member id; a list of other nodes is refused before anything runs,
/// exit 64 with the same words as the library's `ConfigError::Deployment`.
#[tokio::test(flavor = "multi_thread")]
async fn nodes_shows_the_deployment_and_another_list_exits_64() {
    let prefix = format!("{}:", unique("cli-deployment"));
    let urls = node_urls();
    let shown = run(&urls, &["--key-prefix", &prefix, "nodes"]).await;
    let stdout = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(code(&shown), 0, "{stdout}");
    assert!(stdout.contains("deployment: 5 members (set "), "{stdout}");
    assert!(stdout.contains("max_ttl 60s"), "{stdout}");
    let json = run(&urls, &["--key-prefix", &prefix, "nodes", "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["deployment"]["members"].as_array().map(Vec::len),
        Some(5)
    );
    assert!(json["nodes"][0]["member"].is_string(), "{json}");
    let three = run(&urls[..3], &["--key-prefix", &prefix, "nodes"]).await;
    let stderr = String::from_utf8_lossy(&three.stderr);
    assert_eq!(code(&three), 64, "{stderr}");
    assert!(
        stderr.contains("this client lists 3 nodes, the deployment has 5 members"),
        "{stderr}"
    );
}

/// `members change` moves a deployment of nodes 1-3 to nodes 1-4 (after
/// max_ttl 1 s and the freshness bound), printing each step; then the old
/// list exits 64 as moved, the new one is the deployment; too many members
/// at once exits 64 and writes nothing.
#[tokio::test]
async fn members_change_moves_the_deployment_and_the_old_list_exits_64() {
    let prefix = format!("{}:", unique("cli-members"));
    let urls = node_urls();
    let (three, four) = (&urls[..3], &urls[..4]);
    let first = run(
        three,
        &["--key-prefix", &prefix, "--max-ttl", "1s", "nodes"],
    )
    .await;
    assert_eq!(
        code(&first),
        0,
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let other = [urls[0].clone(), urls[3].clone(), urls[4].clone()].join(",");
    let refused = run(
        three,
        &["--key-prefix", &prefix, "members", "change", "--to", &other],
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(code(&refused), 64, "{stderr}");
    assert!(stderr.contains("change fewer members at once"), "{stderr}");
    let changed = run(
        three,
        &[
            "--key-prefix",
            &prefix,
            "members",
            "change",
            "--to",
            &four.join(","),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&changed.stdout);
    assert_eq!(
        code(&changed),
        0,
        "{stdout}{}",
        String::from_utf8_lossy(&changed.stderr)
    );
    assert!(stdout.contains("declared: 3 members (set "), "{stdout}");
    assert!(stdout.contains("changing to 4 members"), "{stdout}");
    assert!(
        stdout.contains("done: the deployment is now 4 members"),
        "{stdout}"
    );
    let old = run(three, &["--key-prefix", &prefix, "nodes"]).await;
    let stderr = String::from_utf8_lossy(&old.stderr);
    assert_eq!(code(&old), 64, "{stderr}");
    assert!(stderr.contains("the membership moved"), "{stderr}");
    let new = run(four, &["--key-prefix", &prefix, "nodes"]).await;
    let stdout = String::from_utf8_lossy(&new.stdout);
    assert_eq!(code(&new), 0, "{stdout}");
    assert!(stdout.contains("deployment: 4 members"), "{stdout}");
}

/// `list` shows what `exec` holds — kind, name, label, nodes — as a table
/// and as JSON, and refuses a limit out of range (exit 64).
#[tokio::test(flavor = "multi_thread")]
async fn list_shows_what_exec_holds() {
    let nodes = node_urls();
    let base = unique("cli-list");
    let resource = format!("{base}:job");
    let mut holder = redquorum(
        &nodes,
        &["exec", "--label", "nightly", &resource, "--", "sleep", "20"],
    )
    .spawn()
    .expect("spawn exec");
    let pattern = format!("{base}:*");
    let shows = || {
        let (nodes, pattern, resource) = (nodes.clone(), pattern.clone(), resource.clone());
        async move {
            let out = run(&nodes, &["list", &pattern]).await;
            code(&out) == 0 && String::from_utf8_lossy(&out.stdout).contains(&resource)
        }
    };
    redquorum_test_support::checks::eventually(
        "list shows the lock",
        Duration::from_secs(15),
        shows,
    )
    .await;
    let table =
        String::from_utf8_lossy(&run(&nodes, &["list", &pattern]).await.stdout).into_owned();
    let line = table.lines().find(|l| l.contains(&resource)).unwrap();
    assert!(
        line.starts_with("lock") && line.contains("nightly"),
        "{table}"
    );
    let out = run(&nodes, &["list", "--json", &pattern]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["complete"], true, "{json}");
    assert_eq!(json["held"][0]["resource"], resource.as_str(), "{json}");
    assert_eq!(json["held"][0]["nodes"], 5, "{json}");
    let out = run(&nodes, &["list", "--limit", "0"]).await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    holder.kill().await.unwrap();
}
