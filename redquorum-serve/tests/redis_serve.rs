//! `redquorum-serve` on real nodes, as a process: the official Dapr
//! Python SDK against it (the SDK's lock example, contention, every unlock
//! status, an expiry), curl against its HTTP API, its gRPC API from Rust,
//! two instances excluding each other, a SIGKILL while it holds 1 000
//! locks, and a SIGTERM.
//!
//! Needs `REDQUORUM_NODES` (five nodes up for longer than the longest TTL)
//! and `REDQUORUM_DAPR_PYTHON` (`scripts/dapr-sdk python`); `scripts/test`
//! sets both.
#![cfg(feature = "redis-tests")]

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redquorum_serve::grpc::pb;
use support::{http, try_lock, unlock};

/// A `redquorum-serve` process on ports the system picks, killed when
/// dropped.
struct Serve {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
}

impl Serve {
    fn spawn() -> Serve {
        let nodes =
            std::env::var("REDQUORUM_NODES").expect("REDQUORUM_NODES (scripts/test sets it)");
        let mut child = Command::new(env!("CARGO_BIN_EXE_redquorum-serve"))
            .args([
                "--nodes",
                &nodes,
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start redquorum-serve");
        // Its first line: `http ADDR grpc ADDR`, once it listens.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read its addresses");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4, "redquorum-serve printed {line:?}");
        Serve {
            http: words[1].parse().unwrap(),
            grpc: words[3].parse().unwrap(),
            child,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test at a time: the 1 000-lock test's bursts would starve the
/// others' rounds on a loaded host.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unique(name: &str) -> String {
    format!("serve:{name}:{:x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// Runs a script of tests/dapr/ with the Dapr SDK's venv, pointed at `serve`.
fn python(serve: &Serve, script: &str, args: &[&str]) -> String {
    let python = std::env::var("REDQUORUM_DAPR_PYTHON")
        .expect("REDQUORUM_DAPR_PYTHON is not set: scripts/dapr-sdk python");
    let out = Command::new("timeout")
        .args(["120", &python, &format!("tests/dapr/{script}")])
        .args(args)
        .env("DAPR_HTTP_PORT", serve.http.port().to_string())
        .env("DAPR_GRPC_PORT", serve.grpc.port().to_string())
        .env("DAPR_HEALTH_TIMEOUT", "30")
        .output()
        .expect("run python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script}: {}\n{text}", out.status);
    text
}

/// A try-lock asked again (up to 20 times) while the nodes do not decide
/// it (`ERR_TRY_LOCK`: nothing held, the round taken back) — on a loaded
/// host a round of 100 at once can meet every node late. Returns when the
/// decided attempt was sent, and its answer.
async fn decided_try_lock(
    addr: std::net::SocketAddr,
    resource: &str,
    owner: &str,
    ttl: i64,
) -> (Instant, (u16, String)) {
    let mut answer = (0, String::new());
    for _ in 0..20 {
        let sent = Instant::now();
        answer = try_lock(addr, resource, owner, ttl).await;
        if !(answer.0 == 500 && answer.1.contains("ERR_TRY_LOCK")) {
            return (sent, answer);
        }
    }
    panic!("20 try-locks of {resource} undecided: {answer:?}")
}

#[test]
fn the_dapr_python_sdk_locks_and_unlocks_through_serve() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let serve = Serve::spawn();
    let example = python(&serve, "lock_example.py", &[]);
    assert!(
        example.contains("Lock acquired successfully!!!"),
        "{example}"
    );
    assert!(example.contains("lock_does_not_exist"), "{example}");
    let checks = python(&serve, "sdk_checks.py", &[&unique("sdk")]);
    println!("{}", checks.trim());
}

#[test]
fn curl_speaks_the_http_api() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let serve = Serve::spawn();
    let resource = unique("curl");
    let curl = |path: &str, body: &str| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "30", "-X", "POST"])
            .arg(format!("http://{}{path}", serve.http))
            .args(["-H", "Content-Type: application/json", "-d", body])
            .output()
            .expect("curl");
        assert!(out.status.success(), "curl {path}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let lock = format!(r#"{{"resourceId":"{resource}","lockOwner":"vader","expiryInSeconds":60}}"#);
    let free = format!(r#"{{"resourceId":"{resource}","lockOwner":"vader"}}"#);
    assert_eq!(
        curl("/v1.0-alpha1/lock/lockstore", &lock),
        r#"{"success":true}"#
    );
    assert_eq!(
        curl("/v1.0-alpha1/lock/lockstore", &lock),
        r#"{"success":false}"#
    );
    assert_eq!(
        curl("/v1.0-alpha1/unlock/lockstore", &free),
        r#"{"status":0}"#
    );
    assert_eq!(
        curl("/v1.0-alpha1/unlock/lockstore", &free),
        r#"{"status":1}"#
    );
    let bad = curl("/v1.0-alpha1/lock/lockstore", "{not json");
    assert!(
        bad.contains(r#""errorCode":"ERR_MALFORMED_REQUEST""#),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_api_from_rust_on_real_nodes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let serve = Serve::spawn();
    let mut client = pb::dapr_client::DaprClient::connect(format!("http://{}", serve.grpc))
        .await
        .unwrap();
    let resource = unique("grpc");
    let lock = |owner: &str| pb::TryLockRequest {
        store_name: "lockstore".into(),
        resource_id: resource.clone(),
        lock_owner: owner.into(),
        expiry_in_seconds: 30,
    };
    let free = |owner: &str| pb::UnlockRequest {
        store_name: "lockstore".into(),
        resource_id: resource.clone(),
        lock_owner: owner.into(),
    };
    assert!(
        client
            .try_lock_alpha1(lock("a"))
            .await
            .unwrap()
            .into_inner()
            .success
    );
    assert!(
        !client
            .try_lock_alpha1(lock("b"))
            .await
            .unwrap()
            .into_inner()
            .success
    );
    assert_eq!(
        client
            .unlock_alpha1(free("b"))
            .await
            .unwrap()
            .into_inner()
            .status,
        2
    );
    assert_eq!(
        client
            .unlock_alpha1(free("a"))
            .await
            .unwrap()
            .into_inner()
            .status,
        0
    );
    let e = client
        .try_lock_alpha1(pb::TryLockRequest {
            expiry_in_seconds: 0,
            ..lock("a")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // The own API: a fenced lock, and a lease kept while its stream is open.
    use redquorum_serve::grpc::v1;
    let mut locks = v1::locks_client::LocksClient::connect(format!("http://{}", serve.grpc))
        .await
        .unwrap();
    let request = v1::AcquireRequest {
        resource: resource.clone(),
        ttl_ms: 3000,
        fenced: true,
        ..Default::default()
    };
    let mut events = locks
        .keep_alive(request.clone())
        .await
        .unwrap()
        .into_inner();
    let first = events.message().await.unwrap().unwrap();
    let Some(v1::lease_event::Event::Granted(grant)) = first.event else {
        panic!("{first:?}")
    };
    assert!(grant.fence.is_some());
    // Past its TTL, still held: the lease is extended.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let seen = locks
        .inspect(v1::InspectRequest {
            resource: resource.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen.verdict, "held", "{seen:?}");
    assert!(
        seen.nodes
            .iter()
            .filter(|n| grant.token.starts_with(&n.holder) && !n.holder.is_empty())
            .count()
            >= 3,
        "{seen:?}"
    );
    drop(events); // closing the stream releases it
    let granted = async {
        loop {
            match locks.acquire(request.clone()).await {
                Ok(grant) => break grant.into_inner(),
                Err(e) if e.code() == tonic::Code::Aborted => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    // Within the lease's TTL at the latest (sooner: the stream's end releases it).
    let next = tokio::time::timeout(Duration::from_secs(5), granted)
        .await
        .expect("free again");
    assert!(next.fence > grant.fence);

    // What is held, by pattern: the lock just granted, with its kind and fence.
    let listing = locks
        .list(v1::ListRequest {
            pattern: format!("{resource}*"),
            limit: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listing.complete, "{listing:?}");
    let listed: Vec<_> = listing
        .held
        .iter()
        .filter(|l| l.resource == resource)
        .collect();
    assert_eq!(listed.len(), 1, "{listing:?}");
    assert_eq!(
        (listed[0].kind.as_str(), listed[0].fence),
        ("fenced", next.fence)
    );
    assert!(
        next.token.starts_with(listed[0].holder.as_deref().unwrap()),
        "a prefix only"
    );
    let release = v1::ReleaseRequest {
        resource: resource.clone(),
        token: next.token,
        ..Default::default()
    };
    assert_eq!(
        locks
            .release(release)
            .await
            .unwrap()
            .into_inner()
            .released_on,
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_the_same_nodes_exclude_each_other() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (a, b) = (Serve::spawn(), Serve::spawn());
    let mut grants = 0;
    for round in 0..20 {
        let resource = unique(&format!("pair-{round}"));
        let (x, y) = tokio::join!(
            try_lock(a.http, &resource, "a", 30),
            try_lock(b.http, &resource, "b", 30)
        );
        let granted = [&x, &y]
            .iter()
            .filter(|(_, body)| body == r#"{"success":true}"#)
            .count();
        // One at most; none when both rounds split the nodes.
        assert!(granted <= 1, "round {round}: {x:?} and {y:?}");
        grants += granted;
        // Clean-up (an undecided unlock leaves a key for 30 s, of a
        // resource no other round uses).
        for (addr, owner) in [(a.http, "a"), (b.http, "b")] {
            let _ = unlock(addr, &resource, owner).await;
        }
    }
    assert!(grants > 0, "no round granted: nothing was checked");
}

/// 1 000 locks held through one instance, SIGKILLed: none is granted to
/// another owner while valid, and every one is free within its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_serve_leaves_no_second_holder_and_every_lock_frees_within_its_ttl() {
    let _one = ONE_AT_A_TIME.lock().await;
    const LOCKS: usize = 1000;
    const TTL: u64 = 10;
    let prefix = unique("kill");
    let a = Serve::spawn();
    // Granted 100 requests at a time; each lock's validity counted from
    // before its request was sent (no later than the library's deadline).
    let mut valid_until = Vec::with_capacity(LOCKS);
    let mut answered_by = Instant::now();
    for batch in 0..LOCKS / 100 {
        let requests = (0..100).map(|i| {
            let resource = format!("{prefix}:{}", batch * 100 + i);
            async move { decided_try_lock(a.http, &resource, "a", TTL as i64).await }
        });
        for (sent, answer) in futures::future::join_all(requests).await {
            assert_eq!(answer.1, r#"{"success":true}"#, "{answer:?}");
            valid_until.push(sent + Duration::from_secs(TTL) - Duration::from_millis(TTL * 10 + 2));
        }
        answered_by = Instant::now();
    }
    let mut a = a;
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();

    let b = Serve::spawn();
    let try_all = |owner: &'static str| {
        let prefix = prefix.clone();
        async move {
            let mut granted = Vec::new();
            for batch in 0..LOCKS / 100 {
                let requests = (0..100).map(|i| {
                    let resource = format!("{prefix}:{}", batch * 100 + i);
                    async move {
                        let (_, answer) =
                            decided_try_lock(b.http, &resource, owner, TTL as i64).await;
                        (batch * 100 + i, answer)
                    }
                });
                for (n, (status, body)) in futures::future::join_all(requests).await {
                    assert_eq!(status, 200, "{body}");
                    if body == r#"{"success":true}"# {
                        granted.push((n, Instant::now()));
                    }
                }
            }
            granted
        }
    };
    // While valid: no second holder.
    let early = try_all("b").await;
    let second_holders = |granted: &[(usize, Instant)], valid_until: &[Instant]| {
        granted
            .iter()
            .filter(|(n, at)| *at < valid_until[*n])
            .count()
    };
    assert_eq!(
        second_holders(&early, &valid_until),
        0,
        "second holders while valid"
    );
    // By every key's TTL from its grant's answer (and a margin for the
    // requests themselves): all free.
    let free_by = answered_by + Duration::from_secs(TTL) + Duration::from_millis(200);
    tokio::time::sleep_until(free_by.into()).await;
    let late = try_all("c").await;
    // The checker's negative control: had the locks been promised a TTL
    // longer than the keys' (say the keys set for 10 s, the owners told
    // 20 s), the late grants are second holders, and it counts them.
    let promised_too_long: Vec<Instant> = valid_until
        .iter()
        .map(|t| *t + Duration::from_secs(TTL))
        .collect();
    assert_eq!(second_holders(&late, &promised_too_long), late.len());
    assert!(!late.is_empty());
    let freed = early.len() + late.len();
    println!(
        "SIGKILL with {LOCKS} locks of {TTL} s: 0 second holders while valid, {freed} free within the TTL"
    );
    assert_eq!(freed, LOCKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_serve_gracefully_and_leaves_its_locks_to_their_owners() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut a = Serve::spawn();
    let resource = unique("term");
    assert_eq!(
        try_lock(a.http, &resource, "owner", 30).await.1,
        r#"{"success":true}"#
    );
    a.signal("TERM");
    let status = tokio::task::spawn_blocking(move || {
        let status = a.child.wait().unwrap();
        (status, a)
    })
    .await
    .unwrap()
    .0;
    assert!(status.success(), "{status}");
    let b = Serve::spawn();
    assert_eq!(
        try_lock(b.http, &resource, "other", 30).await.1,
        r#"{"success":false}"#
    );
    assert_eq!(
        unlock(b.http, &resource, "owner").await.1,
        r#"{"status":0}"#
    );
    let (status, _) = http(b.http, "GET", "/v1.0/healthz/outbound", "", &[]).await;
    assert_eq!(status, 204);
}
