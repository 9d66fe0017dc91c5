//! The in-memory model of a node (`redquorum::internals::Store`, which the
//! in-memory nodes and the simulation run on) against a real Redis master:
//! every operation kind, on both of its branches, through the scripts as a
//! lock round sends them, must get the same reply (times within a
//! tolerance) and leave the same keys.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod line;
mod pair;
mod period;
#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use redquorum::node::{Op, Reply};

use pair::*;

#[tokio::test]
async fn the_model_answers_every_operation_as_redis_does() {
    let mut pair = Pair::new().await;
    let k = K::new();
    let (lock, fence, hash) = (k.get("lock"), k.get("fence"), k.get("hash"));
    let no_line: &[String] = &[];
    let ttl_ms = 10_000;

    // Plain: set, refused (with and without the holder's TTL), extended,
    // released by its holder only.
    let acquire = |token, holder_ttl| Op::Acquire {
        key: lock,
        token,
        label: "",
        ttl_ms,
        holder_ttl,
        line: no_line,
        waiter: None,
        period: None,
    };
    let release = |token| Op::Release {
        key: lock,
        token,
        line: no_line,
        waiter: None,
        period: None,
    };
    assert_eq!(pair.both(acquire("a", false)).await, Ok(Reply::Done));
    pair.both(acquire("b", false)).await.unwrap();
    pair.both(acquire("b", true)).await.unwrap();
    let extend = |token, ttl_ms| Op::Extend {
        key: lock,
        token,
        label: "",
        ttl_ms,
        restore: false,
    };
    pair.both(extend("a", 20_000)).await.unwrap();
    pair.both(extend("a", 1_000)).await.unwrap(); // never shorter
    pair.both(extend("b", ttl_ms)).await.unwrap();
    pair.same_keys(k.range("lock", "lock")).await;
    pair.both(release("b")).await.unwrap();
    pair.both(release("a")).await.unwrap();
    pair.both(release("a")).await.unwrap();
    // Without restore a vanished key stays gone; with it, an absent key is
    // set again (labelled), a held one is left to its holder.
    assert_eq!(pair.both(extend("a", ttl_ms)).await, Ok(Reply::NotHeld));
    let restore = |token, label| Op::Extend {
        key: lock,
        token,
        label,
        ttl_ms,
        restore: true,
    };
    assert_eq!(pair.both(restore("a", "host-a")).await, Ok(Reply::Restored));
    pair.same_keys(k.range("lock", "lock")).await;
    assert_eq!(pair.both(restore("a", "host-a")).await, Ok(Reply::Done));
    assert_eq!(pair.both(restore("b", "")).await, Ok(Reply::NotHeld));
    pair.both(release("a")).await.unwrap();

    // Fenced: a counter drawn (floored at the node's clock in
    // microseconds), refused while held, written back only by the holder,
    // never lowered. The write-backs go far past the clocks (10^4 s), so
    // that from there on both counters are one number.
    let fenced = |token| Op::AcquireFenced {
        key: lock,
        fence_key: fence,
        token,
        label: "",
        ttl_ms,
        line: no_line,
        waiter: None,
        period: None,
    };
    let write_back = |token, fence_value| Op::FenceWriteBack {
        key: lock,
        fence_key: fence,
        token,
        fence: fence_value,
    };
    let Ok(Reply::Fence(drawn)) = pair.both(fenced("f1")).await else {
        panic!("f1 not granted");
    };
    let ahead = drawn + 10_000_000_000;
    pair.both(fenced("f2")).await.unwrap();
    pair.both(write_back("f1", ahead)).await.unwrap();
    pair.both(write_back("f2", ahead + 2)).await.unwrap();
    pair.both(write_back("f1", 3)).await.unwrap();
    pair.same_keys(k.range("lock", "fence")).await;
    pair.both(release("f1")).await.unwrap();
    assert_eq!(pair.both(fenced("f3")).await, Ok(Reply::Fence(ahead + 1)));
    pair.both(release("f3")).await.unwrap();

    // Released after a time (hold at least): the key stays, its expiry
    // exactly that far, for its holder only; a fenced key keeps its fence.
    let after = |token, after_ms| Op::ReleaseAfter {
        key: lock,
        token,
        after_ms,
    };
    assert_eq!(pair.both(acquire("r1", false)).await, Ok(Reply::Done));
    assert_eq!(pair.both(after("other", 500)).await, Ok(Reply::NotHeld));
    assert_eq!(pair.both(after("r1", 500)).await, Ok(Reply::Done));
    pair.same_keys(k.range("lock", "lock")).await;
    assert_eq!(pair.both(after("r1", 60_000)).await, Ok(Reply::Done));
    pair.same_keys(k.range("lock", "lock")).await;
    pair.both(release("r1")).await.unwrap();
    pair.both(fenced("f4")).await.unwrap();
    pair.both(write_back("f4", 20)).await.unwrap();
    assert_eq!(pair.both(after("f4", 500)).await, Ok(Reply::Done));
    pair.same_keys(k.range("lock", "fence")).await;
    pair.both(release("f4")).await.unwrap();

    // Reentrant: one count per hold however often applied, another owner
    // refused, released hold by hold.
    let enter = |owner, hold| Op::AcquireReentrant {
        key: hash,
        owner,
        label: "",
        hold,
        ttl_ms,
    };
    let leave = |owner, hold| Op::ReleaseReentrant {
        key: hash,
        owner,
        hold,
    };
    pair.both(enter("o", "h1")).await.unwrap();
    pair.both(enter("o", "h1")).await.unwrap();
    pair.both(enter("o", "h2")).await.unwrap();
    pair.both(enter("p", "h3")).await.unwrap();
    let stay = |owner, ttl_ms| Op::ExtendReentrant {
        key: hash,
        owner,
        ttl_ms,
    };
    pair.both(stay("o", 30_000)).await.unwrap();
    pair.both(stay("p", ttl_ms)).await.unwrap();
    pair.same_keys(k.range("hash", "hash")).await;
    pair.both(leave("o", "h1")).await.unwrap();
    pair.both(leave("o", "h1")).await.unwrap();
    pair.same_keys(k.range("hash", "hash")).await;
    pair.both(leave("o", "h2")).await.unwrap();
    pair.same_keys(k.range("hash", "hash")).await;
    // A string is another holder to a reentrant owner, and a hash is not
    // a plain lock's token.
    pair.both(acquire("s", false)).await.unwrap();
    let enter_lock = Op::AcquireReentrant {
        key: lock,
        owner: "o",
        label: "",
        hold: "h4",
        ttl_ms,
    };
    pair.both(enter_lock).await.unwrap();
    pair.both(Op::ReleaseReentrant {
        key: lock,
        owner: "o",
        hold: "h4",
    })
    .await
    .unwrap();
    pair.both(enter("o", "h5")).await.unwrap();
    pair.both(Op::Extend {
        key: hash,
        token: "o",
        label: "",
        ttl_ms,
        restore: true,
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: hash,
        token: "o",
        line: no_line,
        waiter: None,
        period: None,
    })
    .await
    .unwrap();
    pair.both(release("s")).await.unwrap();

    // Many: all or nothing.
    let (ab, bc) = (k.range("a", "b"), k.range("b", "c"));
    let many = |keys, token| Op::AcquireMany {
        keys,
        token,
        label: "",
        ttl_ms,
    };
    pair.both(many(ab, "m1")).await.unwrap();
    pair.both(many(bc, "m2")).await.unwrap();
    pair.same_keys(k.range("a", "c")).await;
    let stay_many = |keys, token, ttl_ms| Op::ExtendMany {
        keys,
        token,
        ttl_ms,
    };
    pair.both(stay_many(ab, "m1", 20_000)).await.unwrap();
    pair.both(stay_many(bc, "m1", ttl_ms)).await.unwrap();
    for (keys, token) in [(bc, "m2"), (bc, "m1"), (ab, "m1")] {
        pair.both(Op::ReleaseMany { keys, token }).await.unwrap();
    }
    pair.same_keys(k.range("a", "c")).await;

    // Read/write: readers together, a writer refused by them marks its
    // intent, which turns new readers away; the writer once they are gone.
    let rw = k.range("writer", "rw:alive");
    let read = |token| Op::AcquireRead {
        keys: rw,
        token,
        ttl_ms,
        waiter: None,
    };
    // A writer's intent is marked with its wait's name, not its token
    // (`m…` here).
    let write = |token, intent| Op::AcquireWrite {
        keys: rw,
        token,
        label: "",
        intent,
        ttl_ms,
        waiter: None,
    };
    let unread = |token| Op::ReleaseRead {
        keys: rw,
        token,
        waiter: None,
    };
    let unwrite = |token, intent| Op::ReleaseWrite {
        keys: rw,
        token,
        intent,
        waiter: None,
    };
    pair.both(read("r1")).await.unwrap();
    pair.both(read("r2")).await.unwrap();
    pair.both(write("w1", "w1")).await.unwrap();
    pair.both(read("r3")).await.unwrap();
    pair.same_keys(rw).await;
    let stay_read = |token, ttl_ms| Op::ExtendRead {
        keys: rw,
        token,
        ttl_ms,
    };
    pair.both(stay_read("r1", 20_000)).await.unwrap();
    pair.both(stay_read("r9", ttl_ms)).await.unwrap();
    pair.same_keys(rw).await;
    for token in ["r1", "r1", "r2"] {
        pair.both(unread(token)).await.unwrap();
    }
    pair.both(write("w2", "m2")).await.unwrap();
    pair.both(read("r4")).await.unwrap();
    pair.both(write("w3", "m3")).await.unwrap();
    pair.same_keys(rw).await;
    for (token, intent) in [("w1", "w1"), ("w2", "m2"), ("w2", "m2")] {
        pair.both(unwrite(token, intent)).await.unwrap();
    }
    pair.same_keys(rw).await;
    // A later attempt of the same wait (another token) takes the mark back.
    pair.both(unwrite("w4", "m3")).await.unwrap();
    pair.same_keys(rw).await;

    // Keys of the wrong type: the readers key holding a string fails the
    // read/write scripts; a reader is no plain lock's token.
    let odd: Vec<String> = [k.get("writer"), lock, k.get("intent")]
        .into_iter()
        .map(String::from)
        .chain(rw[3..].iter().cloned())
        .collect();
    pair.both(acquire("x", false)).await.unwrap();
    let odd_read = Op::AcquireRead {
        keys: &odd,
        token: "r",
        ttl_ms,
        waiter: None,
    };
    assert!(pair.both(odd_read).await.is_err());
    let odd_write = Op::AcquireWrite {
        keys: &odd,
        token: "w",
        label: "",
        intent: "w",
        ttl_ms,
        waiter: None,
    };
    assert!(pair.both(odd_write).await.is_err());
    pair.both(Op::ReleaseRead {
        keys: &odd,
        token: "x",
        waiter: None,
    })
    .await
    .unwrap();
    pair.both(Op::ExtendRead {
        keys: &odd,
        token: "x",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(release("x")).await.unwrap();

    // Labels: stored after the token, shown by an inspection, never
    // compared: the bare token extends and releases a labelled key.
    let labelled = |token, label| Op::Acquire {
        key: lock,
        token,
        label,
        ttl_ms,
        holder_ttl: false,
        line: no_line,
        waiter: None,
        period: None,
    };
    pair.both(labelled("l1", "host-a pid 7")).await.unwrap();
    pair.both(labelled("l2", "host-b")).await.unwrap();
    pair.same_keys(k.range("lock", "lock")).await;
    pair.both(extend("l1", 20_000)).await.unwrap();
    pair.both(release("l1")).await.unwrap();
    pair.both(Op::AcquireReentrant {
        key: hash,
        owner: "o",
        label: "owner's host",
        hold: "h9",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.same_keys(k.range("hash", "hash")).await;
    pair.both(leave("o", "h9")).await.unwrap();
    pair.both(Op::AcquireFenced {
        key: lock,
        fence_key: fence,
        token: "l3",
        label: "fenced",
        ttl_ms,
        line: no_line,
        waiter: None,
        period: None,
    })
    .await
    .unwrap();
    pair.same_keys(k.range("lock", "fence")).await;
    pair.both(Op::FenceWriteBack {
        key: lock,
        fence_key: fence,
        token: "l3",
        fence: 20,
    })
    .await
    .unwrap();
    pair.both(release("l3")).await.unwrap();
    pair.both(write_label(rw, "wl", "writer host"))
        .await
        .unwrap();
    pair.same_keys(rw).await;
    pair.both(unwrite("wl", "wl")).await.unwrap();

    // Expiry: a short key gone on both after its TTL.
    pair.both(Op::Acquire {
        key: lock,
        token: "t",
        label: "",
        ttl_ms: 100,
        holder_ttl: false,
        line: no_line,
        waiter: None,
        period: None,
    })
    .await
    .unwrap();
    pair.both(read("short")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    pair.same_keys(&k.all).await;
    pair.both(release("t")).await.unwrap();
    pair.same_keys(&k.all).await;
    // Clean up what the fenced lock left (a counter has no TTL).
    let mut raw = support::raw(0).await;
    let _: () = redis::AsyncCommands::del(&mut raw, &k.all)
        .await
        .expect("del");
}
