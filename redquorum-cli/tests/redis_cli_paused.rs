//! A paused holder process: `redquorum exec --fence` and its command both
//! stopped (SIGSTOP, as a VM freeze or a stop-the-world pause would) past
//! the lease, while another process takes the lock and writes to a fenced
//! store on Redis; then resumed. The stale command's writes are rejected
//! by the store (the fence is what protects it: a paused redquorum cannot
//! stop anything), and the resumed redquorum stops its command and exits
//! 79 at once (docs/cli.md, "A paused redquorum").
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use support::cli::*;
use support::*;
use tokio::time::Instant;

/// The fenced store: takes a write only with a fence at least as large as
/// every fence it took; numbers every write (KEYS[2]), so that the test
/// knows which came after which. Returns `{taken, number}`.
const STORE: &str = "local seq = redis.call('INCR', KEYS[2]) \
     local h = tonumber(redis.call('GET', KEYS[1]) or '0') \
     if tonumber(ARGV[1]) < h then return {0, seq} end \
     redis.call('SET', KEYS[1], ARGV[1]) return {1, seq}";

/// The command: writes to the store with its fence every 100 ms, appending
/// each verdict and the store's number for it to $OUT; its process group
/// id goes to $PGID_FILE first.
const WRITER: &str = r#"
import os, socket, time
store = os.environ["STORE"]
key, fence, out = os.environ["STORE_KEY"], os.environ["REDQUORUM_FENCE"], os.environ["OUT"]
def resp(*args):
    return ("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a.encode()), a) for a in args)).encode()
with open(os.environ["PGID_FILE"] + ".tmp", "w") as f:
    f.write(str(os.getpgid(0)))
os.rename(os.environ["PGID_FILE"] + ".tmp", os.environ["PGID_FILE"])
host, port = os.environ["STORE_ADDR"].split(":")
s = socket.create_connection((host, int(port)))
r = s.makefile("rb")
while True:
    s.sendall(resp("EVAL", store, "2", key, key + ":seq", fence))
    r.readline()  # *2
    verdict = "accepted" if r.readline().strip() == b":1" else "rejected"
    seq = int(r.readline().strip()[1:])
    with open(out, "a") as o:
        o.write("%s %s %d\n" % (fence, verdict, seq))
    time.sleep(0.1)
"#;

fn signal(pid: i32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, "--", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// The command's writes: `(fence, accepted, the store's number)`.
fn verdicts(out: &std::path::Path) -> Vec<(u64, bool, u64)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut words = l.split(' ');
            let fence = words.next()?.parse().ok()?;
            let accepted = words.next()? == "accepted";
            Some((fence, accepted, words.next()?.parse().ok()?))
        })
        .collect()
}

async fn until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holders_late_writes_are_rejected_and_it_stops_on_resume() {
    let nodes = node_urls();
    let resource = unique("cli-paused");
    let store_key = format!("{resource}:store");
    let dir = scratch("paused");
    let (out, pgid_file, script) = (dir.join("out"), dir.join("pgid"), dir.join("writer.py"));
    std::fs::write(&script, WRITER).unwrap();
    let addr = nodes[0].trim_start_matches("redis://").to_owned();
    let ttl = Duration::from_secs(2);
    let holder = redquorum(
        &nodes,
        &[
            "exec", "--fence", "--ttl", "2s", "--grace", "600ms", &resource, "--",
        ],
    )
    .args(["python3", &script.display().to_string()])
    .env("STORE", STORE)
    .env("STORE_ADDR", &addr)
    .env("STORE_KEY", &store_key)
    .env("OUT", &out)
    .env("PGID_FILE", &pgid_file)
    .spawn()
    .unwrap();
    let cli = holder.id().expect("redquorum's pid") as i32;
    until(
        "the holder's first accepted write",
        Duration::from_secs(10),
        || verdicts(&out).iter().any(|&(_, ok, _)| ok),
    )
    .await;
    let pgid: i32 = std::fs::read_to_string(&pgid_file)
        .unwrap()
        .parse()
        .unwrap();
    let old_fence = verdicts(&out)[0].0;

    // The holder process freezes: redquorum and its command.
    signal(cli, "-STOP");
    signal(-pgid, "-STOP");
    let paused = Instant::now();

    // Another process takes the lock once the lease has run out, and writes.
    let other = redlock().await;
    let lock = other
        .lock_with(
            &resource,
            Duration::from_secs(10),
            &redquorum::LockOptions::new().fenced().wait(ttl * 3),
        )
        .await
        .expect("the lock, once the paused holder's lease ran out");
    let new_fence = lock.fence().unwrap();
    assert!(new_fence > old_fence, "{new_fence} > {old_fence}");
    let mut store = raw_all().await.swap_remove(0);
    let (took, new_write): (i64, u64) = redis::cmd("EVAL")
        .arg(STORE)
        .arg(2)
        .arg(&store_key)
        .arg(format!("{store_key}:seq"))
        .arg(new_fence)
        .query_async(&mut store)
        .await
        .unwrap();
    assert_eq!(took, 1, "the new holder's write");

    // The command wakes first and writes with its old fence: rejected.
    // (A write it sent just before the pause may be recorded after it: the
    // store's numbers say which came after the new holder's.)
    signal(-pgid, "-CONT");
    let after_new = |v: Vec<(u64, bool, u64)>| -> Vec<(u64, bool, u64)> {
        v.into_iter()
            .filter(|&(_, _, seq)| seq > new_write)
            .collect()
    };
    until(
        "the stale command's next write",
        Duration::from_secs(10),
        || !after_new(verdicts(&out)).is_empty(),
    )
    .await;
    let late = after_new(verdicts(&out));
    assert!(
        late.iter().all(|&(f, ok, _)| f == old_fence && !ok),
        "a stale write was accepted after the new holder's: {late:?}"
    );

    // redquorum wakes: its lease is long gone; it stops the command at once.
    signal(cli, "-CONT");
    let resumed = Instant::now();
    let output = finish(holder).await;
    let stopped_in = resumed.elapsed();
    assert_eq!(code(&output), 79, "{}", stderr(&output));
    assert!(
        stopped_in < Duration::from_secs(2),
        "redquorum took {stopped_in:?} after resuming to stop its command"
    );
    let after = verdicts(&out).len();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        verdicts(&out).len(),
        after,
        "the command still writes after exit 79"
    );
    println!(
        "paused {:?}; {} late write(s) with fence {old_fence} rejected after fence {new_fence}; \
         redquorum stopped the command {stopped_in:?} after resuming",
        resumed - paused,
        late.len()
    );
    lock.release().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
