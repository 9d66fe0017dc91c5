//! The model against Redis for once per period (`period.lua`): a grant
//! sets the mark, an acquire with a period is refused while it stands (a
//! waiter staying in line), a plain acquire does not read it, a release
//! leaves it and only its holder's undo takes it back.

use super::*;
use redquorum::node::Period;

#[tokio::test]
async fn the_model_keeps_a_period_as_redis_does() {
    let mut pair = Pair::new().await;
    let k = K::new();
    let (lock, fence, mark) = (k.get("lock"), k.get("fence"), k.get("period"));
    let line = k.range("lock:line", "lock:alive");
    let no_line: &[String] = &[];
    let ttl_ms = 10_000;
    let period = Some(Period {
        key: mark,
        ms: 60_000,
    });
    let acquire = |token, period| Op::Acquire {
        key: lock,
        token,
        label: "",
        ttl_ms,
        holder_ttl: false,
        line: no_line,
        waiter: None,
        period,
    };
    let release = |token, period| Op::Release {
        key: lock,
        token,
        line: no_line,
        waiter: None,
        period,
    };
    let both_keys = [lock.to_owned(), mark.to_owned()];

    // Granted: the key and the mark. Refused while the key is held, then
    // while the mark alone stands (with the mark's time left).
    assert_eq!(pair.both(acquire("a", period)).await, Ok(Reply::Done));
    pair.same_keys(&both_keys).await;
    pair.both(acquire("b", period)).await.unwrap();
    assert_eq!(pair.both(release("a", None)).await, Ok(Reply::Done));
    pair.same_keys(&both_keys).await;
    let refused = pair.both(acquire("b", period)).await;
    assert!(
        matches!(refused, Ok(Reply::Held { pttl_ms: Some(left), .. }) if left > ttl_ms),
        "the mark's time left: {refused:?}"
    );
    // A plain acquire (`SET NX`) does not read the mark.
    assert_eq!(pair.both(acquire("c", None)).await, Ok(Reply::Done));
    pair.both(release("c", None)).await.unwrap();

    // A waiter with a period is refused while the mark stands, and stays
    // in line.
    let waiting = Op::Acquire {
        key: lock,
        token: "w",
        label: "",
        ttl_ms,
        holder_ttl: true,
        line,
        waiter: waiter("ww", 10),
        period,
    };
    pair.both(waiting).await.unwrap();
    pair.same_keys(line).await;

    // A fenced acquire with a period: refused by the mark alone too.
    let fenced = |token| Op::AcquireFenced {
        key: lock,
        fence_key: fence,
        token,
        label: "",
        ttl_ms,
        line: no_line,
        waiter: None,
        period,
    };
    pair.both(fenced("f1")).await.unwrap();
    pair.same_keys(&both_keys).await;

    // An undo by another token leaves the mark; the holder's takes it back
    // (with or without its key), after which the period is free again.
    pair.both(release("other", Some(mark))).await.unwrap();
    pair.same_keys(&both_keys).await;
    pair.both(release("a", Some(mark))).await.unwrap();
    pair.same_keys(&both_keys).await;
    let Ok(Reply::Fence(_)) = pair.both(fenced("f2")).await else {
        panic!("f2 not granted once the mark was taken back");
    };
    pair.same_keys(&both_keys).await;
    pair.both(release("f2", Some(mark))).await.unwrap();
    pair.same_keys(&both_keys).await;
}
