//! The model against Redis for the waiting line: every operation of `line.lua`
//! (join, refresh, leave, snapshot) answered alike.

use super::*;

/// Fair waiting: a refused waiter stays in line, a release keeps the lock
/// for the first in line (and no one else takes it), the waiter takes it;
/// a writer's release gives the readers in line their turn; a permit is
/// kept likewise, and a semaphore refuses another permit count while its
/// holders live.
#[tokio::test]
async fn the_model_keeps_a_line_as_redis_does() {
    let mut pair = Pair::new().await;
    let k = K::new();
    let lock = k.get("lock");
    let line = k.range("lock:line", "lock:alive");
    let ttl_ms = 10_000;
    let acquire = |token, waiter| Op::Acquire {
        key: lock,
        token,
        label: "",
        ttl_ms,
        holder_ttl: true,
        line,
        waiter,
        period: None,
    };
    let release = |token| Op::Release {
        key: lock,
        token,
        line,
        waiter: None,
        period: None,
    };
    pair.both(acquire("a", None)).await.unwrap();
    // Two waiters refused: in line, the earlier ticket first.
    pair.both(acquire("b", waiter("wb", 20))).await.unwrap();
    pair.both(acquire("c", waiter("wc", 10))).await.unwrap();
    pair.same_keys(line).await;
    // The release keeps the lock for `wc`; a newcomer and `wb` are refused.
    assert_eq!(pair.both(release("a")).await, Ok(Reply::Done));
    pair.same_keys(k.range("lock", "lock")).await;
    pair.same_keys(line).await;
    assert!(matches!(
        pair.both(acquire("n", None)).await,
        Ok(Reply::Held { .. })
    ));
    assert!(matches!(
        pair.both(acquire("b", waiter("wb", 20))).await,
        Ok(Reply::Held { .. })
    ));
    assert_eq!(
        pair.both(acquire("c", waiter("wc", 10))).await,
        Ok(Reply::Done)
    );
    pair.same_keys(line).await;
    // A fenced acquire in line, and the release without a line deletes.
    let fenced = |token, waiter| Op::AcquireFenced {
        key: lock,
        fence_key: k.get("fence"),
        token,
        label: "",
        ttl_ms,
        line,
        waiter,
        period: None,
    };
    pair.both(fenced("d", waiter("wd", 5))).await.unwrap();
    pair.both(release("c")).await.unwrap();
    pair.both(fenced("d", waiter("wd", 5))).await.unwrap();
    pair.same_keys(k.range("lock", "fence")).await;
    pair.both(release("d")).await.unwrap();
    pair.both(release("d")).await.unwrap();
    // A waiter giving up leaves the line, and a key kept for it goes on to
    // the next in line (here, to no one: it is deleted); a holder that
    // waited leaves where it still stands.
    let give_up = |token, waiter| Op::Release {
        key: lock,
        token,
        line,
        waiter,
        period: None,
    };
    pair.same_keys(k.range("lock", "lock")).await; // kept for `wb`
    assert_eq!(
        pair.both(give_up("b", waiter("wb", 20))).await,
        Ok(Reply::NotHeld)
    );
    pair.same_keys(k.range("lock", "lock")).await;
    pair.same_keys(line).await;
    assert_eq!(pair.both(acquire("e", None)).await, Ok(Reply::Done));
    pair.both(acquire("f", waiter("wf", 1))).await.unwrap();
    pair.both(acquire("g", waiter("wg", 2))).await.unwrap();
    pair.both(release("e")).await.unwrap();
    pair.same_keys(k.range("lock", "lock")).await;
    assert_eq!(
        pair.both(give_up("f", waiter("wf", 1))).await,
        Ok(Reply::NotHeld)
    );
    pair.same_keys(k.range("lock", "lock")).await;
    pair.same_keys(line).await;
    assert_eq!(
        pair.both(acquire("g", waiter("wg", 2))).await,
        Ok(Reply::Done)
    );
    pair.both(acquire("h", waiter("wh", 3))).await.unwrap();
    assert_eq!(
        pair.both(give_up("g", waiter("wg", 2))).await,
        Ok(Reply::Done)
    );
    pair.same_keys(k.range("lock", "lock")).await;
    pair.both(give_up("h", waiter("wh", 3))).await.unwrap();
    pair.same_keys(k.range("lock", "lock")).await;
    pair.same_keys(line).await;

    // Read/write: readers refused by a writer wait in line; its release
    // gives them their turn, which a writer may not take; the last reader
    // in line ends it.
    let rw = k.range("writer", "rw:alive");
    let read = |token, waiter| Op::AcquireRead {
        keys: rw,
        token,
        ttl_ms,
        waiter,
    };
    let write = |token, waiter| Op::AcquireWrite {
        keys: rw,
        token,
        label: "",
        intent: token,
        ttl_ms,
        waiter,
    };
    pair.both(write("w1", None)).await.unwrap();
    pair.both(read("r1", waiter("r1", 1))).await.unwrap();
    pair.both(read("r2", waiter("r2", 2))).await.unwrap();
    pair.both(write("w2", waiter("w2", 3))).await.unwrap();
    pair.same_keys(rw).await;
    pair.both(Op::ReleaseWrite {
        keys: rw,
        token: "w1",
        intent: "w1",
        waiter: None,
    })
    .await
    .unwrap();
    pair.same_keys(rw).await;
    assert!(matches!(
        pair.both(write("w2", waiter("w2", 3))).await,
        Ok(Reply::Held { .. })
    ));
    pair.both(read("r1", waiter("r1", 1))).await.unwrap();
    pair.same_keys(rw).await;
    pair.both(read("r2", waiter("r2", 2))).await.unwrap();
    pair.same_keys(rw).await;
    // The readers' turn over, the writer marks its intent.
    pair.both(write("w2", waiter("w2", 3))).await.unwrap();
    pair.same_keys(rw).await;
    for token in ["r1", "r2"] {
        let op = Op::ReleaseRead {
            keys: rw,
            token,
            waiter: waiter(token, 1),
        };
        pair.both(op).await.unwrap();
    }
    pair.both(write("w2", waiter("w2", 3))).await.unwrap();
    pair.both(Op::ReleaseWrite {
        keys: rw,
        token: "w2",
        intent: "w2",
        waiter: None,
    })
    .await
    .unwrap();
    pair.same_keys(rw).await;

    // Permits: holders counted with the permit count; another count
    // refused while they live; a released slot kept for the first in line.
    let slot0: Vec<String> = k.range("permit:0", "permits:alive").to_vec();
    let mut slot1 = slot0.clone();
    slot1[0] = k.get("permit:1").to_owned();
    let take = |keys, token, permits, waiter| Op::AcquirePermit {
        keys,
        token,
        label: "",
        ttl_ms,
        permits,
        waiter,
    };
    pair.both(take(&slot0, "p1", 2, None)).await.unwrap();
    assert_eq!(
        pair.both(take(&slot1, "p2", 3, None)).await,
        Ok(Reply::PermitsDiffer { permits: 2 })
    );
    pair.both(take(&slot1, "p2", 2, None)).await.unwrap();
    pair.both(take(&slot0, "p3", 2, waiter("p3", 1)))
        .await
        .unwrap();
    pair.same_keys(&slot0[..]).await;
    pair.both(Op::ExtendPermit {
        keys: &slot0,
        token: "p1",
        ttl_ms: 20_000,
    })
    .await
    .unwrap();
    pair.both(Op::ReleasePermit {
        keys: &slot0,
        token: "p1",
        waiter: None,
    })
    .await
    .unwrap();
    pair.same_keys(&slot0[..]).await;
    assert!(matches!(
        pair.both(take(&slot0, "p4", 2, None)).await,
        Ok(Reply::Held { .. })
    ));
    // Slot 1 given back with no one else in line is free; the waiter slot
    // 0 is kept for is refused it (it takes the kept one, no other).
    let give_back = |keys, token| Op::ReleasePermit {
        keys,
        token,
        waiter: None,
    };
    pair.both(give_back(&slot1, "p2")).await.unwrap();
    pair.same_keys(&slot1[..1]).await;
    assert!(matches!(
        pair.both(take(&slot1, "p3", 2, waiter("p3", 1))).await,
        Ok(Reply::Held { .. })
    ));
    assert_eq!(
        pair.both(take(&slot0, "p3", 2, waiter("p3", 1))).await,
        Ok(Reply::Done)
    );
    pair.both(take(&slot1, "p2", 2, None)).await.unwrap();
    for (keys, token) in [(&slot0, "p3"), (&slot1, "p2"), (&slot1, "p2")] {
        let op = Op::ReleasePermit {
            keys,
            token,
            waiter: waiter(token, 1),
        };
        pair.both(op).await.unwrap();
    }
    pair.same_keys(&slot0[..]).await;
    // No holders left: another count is welcome.
    pair.both(take(&slot1, "p5", 3, None)).await.unwrap();
    pair.both(Op::ReleasePermit {
        keys: &slot1,
        token: "p5",
        waiter: None,
    })
    .await
    .unwrap();
    pair.same_keys(&k.all).await;
    let mut raw = support::raw(0).await;
    let _: () = redis::AsyncCommands::del(&mut raw, &k.all)
        .await
        .expect("del");
}

/// The line at its bound: 1024 waiters (`MAX_LINE`) each told how many are
/// ahead (counted up to 64), the next one refused with no place (as many
/// ahead as can be told, and it is never served first: its earlier ticket
/// does not count), and the release keeps the lock for the head of the line
/// and names it to the waiters.
#[tokio::test]
async fn the_line_holds_max_line_waiters_and_no_more() {
    let mut pair = Pair::new().await;
    let k = K::new();
    let lock = k.get("lock");
    let line = k.range("lock:line", "lock:alive");
    let acquire = |token, waiter| Op::Acquire {
        key: lock,
        token,
        label: "",
        ttl_ms: 10_000,
        holder_ttl: true,
        line,
        waiter,
        period: None,
    };
    pair.both(acquire("a", None)).await.unwrap();
    let ids: Vec<String> = (0..=redquorum::node::MAX_LINE)
        .map(|i| format!("w{i}"))
        .collect();
    for (i, id) in ids.iter().enumerate().take(redquorum::node::MAX_LINE) {
        let reply = pair.both(acquire("x", waiter(id, 1_000 + i as u64))).await;
        let ahead = u32::try_from(i.min(64)).unwrap();
        assert!(
            matches!(reply, Ok(Reply::Held { ahead: Some(a), .. }) if a == ahead),
            "waiter {i}: {reply:?}"
        );
    }
    // Past the bound: no place, whatever its ticket.
    let last = &ids[redquorum::node::MAX_LINE];
    let reply = pair.both(acquire("y", waiter(last, 1))).await;
    assert!(
        matches!(
            reply,
            Ok(Reply::Held {
                ahead: Some(64),
                ..
            })
        ),
        "{reply:?}"
    );
    pair.same_keys(line).await;
    pair.store.take_published();
    let release = Op::Release {
        key: lock,
        token: "a",
        line,
        waiter: None,
        period: None,
    };
    assert_eq!(pair.both(release).await, Ok(Reply::Done));
    let published = pair.store.take_published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].nonce, b"a\nw5000:w0");
    assert!(matches!(
        pair.both(acquire("y", waiter(last, 1))).await,
        Ok(Reply::Held { .. })
    ));
    assert_eq!(
        pair.both(acquire("z", waiter(&ids[0], 1_000))).await,
        Ok(Reply::Done)
    );
}
