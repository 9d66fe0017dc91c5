//! Claims and their keys, checked.

use super::*;

fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}
use crate::proto::keys::KeyLayout;

#[test]
fn resources_come_back_in_every_layout() {
    for layout in [
        KeyLayout::new("app:", false).unwrap(),
        KeyLayout::new("app:", true).unwrap(),
    ] {
        let plain = Keys::single(&layout, "orders:42", false).unwrap();
        assert_eq!(plain.resources().collect::<Vec<_>>(), ["orders:42"]);
        assert_eq!(plain.first(), layout.plain_key("orders:42"));
        let fenced = Keys::single(&layout, "orders:42", true).unwrap();
        assert_eq!(fenced.resources().collect::<Vec<_>>(), ["orders:42"]);
        assert_eq!(fenced.first(), "app:{orders:42}:lock");
        let many = Keys::many(&layout, &["a", "b"]).unwrap();
        assert_eq!(many.resources().collect::<Vec<_>>(), ["a", "b"]);
        for write in [false, true] {
            let rw = Keys::rw(&layout, "doc:7", write).unwrap();
            assert_eq!(rw.resources().collect::<Vec<_>>(), ["doc:7"]);
            assert!(rw.one_slot());
        }
    }
}

#[test]
fn multi_resource_keys_never_collide() {
    let a = Keys::many(&KeyLayout::default(), &["ab", "c"]).unwrap();
    let b = Keys::many(&KeyLayout::default(), &["a", "bc"]).unwrap();
    assert_ne!(a.lock_keys(), b.lock_keys());
    assert_eq!(a.resources().collect::<Vec<_>>(), ["ab", "c"]);
}

#[test]
fn which_locks_fit_in_one_cluster_slot() {
    assert!(
        Keys::single(&KeyLayout::default(), "orders", true)
            .unwrap()
            .one_slot()
    );
    assert!(
        Keys::reentrant(&KeyLayout::default(), "orders")
            .unwrap()
            .one_slot()
    );
    assert!(
        Keys::many(&KeyLayout::default(), &["{acct}:1", "{acct}:2"])
            .unwrap()
            .one_slot()
    );
    assert!(
        !Keys::many(&KeyLayout::default(), &["account:1", "account:2"])
            .unwrap()
            .one_slot()
    );
    // `{}x}:lock` has an empty hash tag: the whole key is hashed, and the
    // fence counter lands elsewhere.
    assert!(
        !Keys::single(&KeyLayout::default(), "}x", true)
            .unwrap()
            .one_slot()
    );
    assert!(
        Keys::single(&KeyLayout::default(), "}x", false)
            .unwrap()
            .one_slot()
    );
}

#[test]
fn bad_resource_lists_are_typed_errors() {
    assert_eq!(
        Keys::many(&KeyLayout::default(), &[]).unwrap_err(),
        InputError::NoResources
    );
    assert_eq!(
        Keys::many(&KeyLayout::default(), &["a", "b", "a"]).unwrap_err(),
        InputError::DuplicateResource("a".into())
    );
    assert_eq!(
        Keys::many(&KeyLayout::default(), &["a", ""]).unwrap_err(),
        InputError::EmptyResource
    );
    assert_eq!(
        Keys::single(&KeyLayout::default(), "", false).unwrap_err(),
        InputError::EmptyResource
    );
}

#[test]
fn an_explicit_token_is_released_as_given() {
    let keys = Keys::single(&KeyLayout::default(), "r", false).unwrap();
    let claim = Claim::with_token(keys.clone(), "owner-7").unwrap();
    let line = ["{r}:lock:line", "{r}:lock:alive"].map(String::from);
    assert_eq!(
        claim.op(Step::Release, 0, now),
        Op::Release {
            key: "{r}:lock",
            token: "owner-7",
            line: &line,
            waiter: None,
            period: None,
        }
    );
    assert_eq!(
        Claim::with_token(keys, "").unwrap_err(),
        InputError::EmptyToken
    );
}

/// A writer's release takes its intent with it; undoing a refused round
/// keeps the intent for the retries (only the writer key goes).
#[test]
fn a_writer_undoes_a_round_without_its_intent_and_releases_with_it() {
    let keys = Keys::rw(&KeyLayout::default(), "r", true).unwrap();
    let claim = Claim::with_token(keys, "w").unwrap();
    let rw = [
        "{r}:writer",
        "{r}:readers",
        "{r}:intent",
        "{r}:rw:line",
        "{r}:rw:alive",
    ]
    .map(String::from);
    assert_eq!(
        claim.op(Step::Release, 0, now),
        Op::ReleaseWrite {
            keys: &rw,
            token: "w",
            intent: "w",
            waiter: None,
        }
    );
    assert_eq!(
        claim.op(Step::Undo, 0, now),
        Op::Release {
            key: "{r}:writer",
            token: "w",
            line: &rw[3..],
            waiter: None,
            period: None,
        }
    );
    assert!(claim.keys().marks_refusals());
    // An attempt of a wait marks (and takes back) the wait's intent, not
    // its own token.
    let mark = crate::engine::token::Token::from_draws(1, 2);
    let attempt = Claim::with_token(claim.keys().clone(), "w")
        .unwrap()
        .marking_intent(Some(mark));
    let Op::AcquireWrite { token, intent, .. } =
        attempt.op(Step::Acquire { holder_ttl: false }, 5, now)
    else {
        panic!("a writer's acquire")
    };
    assert_eq!((token, intent), ("w", mark.as_str()));
    let Op::ReleaseWrite { token, intent, .. } = attempt.op(Step::Release, 0, now) else {
        panic!("a writer's release")
    };
    assert_eq!((token, intent), ("w", mark.as_str()));
    let reader = Keys::rw(&KeyLayout::default(), "r", false).unwrap();
    assert!(!reader.marks_refusals());
}

/// A wait's attempts carry its place in line where the lock has a line;
/// a permit's its semaphore's count.
#[test]
fn a_waiters_attempts_carry_its_place_in_line() {
    let wait = InLine::new(
        1_700_000_000_000,
        (1, 2),
        std::time::Duration::from_millis(300),
    );
    let plain = Keys::single(&KeyLayout::default(), "r", false).unwrap();
    let claim = Claim::new(plain).in_line(Some(wait));
    let Op::Acquire {
        waiter: Some(waiter),
        holder_ttl: true,
        line,
        ..
    } = claim.op(Step::Acquire { holder_ttl: false }, 1000, now)
    else {
        panic!("a waiter's acquire")
    };
    assert_eq!((waiter.patience_ms, line.len()), (300, 2));
    assert!(waiter.ticket > 1_600_000_000_000, "ms since the epoch");
    // Interop keys with braces have no line: such a lock waits without.
    let layout = KeyLayout::new("", true).unwrap();
    let odd = Keys::single(&layout, "a{b}", false).unwrap();
    let claim = Claim::new(odd).in_line(Some(wait));
    assert!(matches!(
        claim.op(Step::Acquire { holder_ttl: true }, 1000, now),
        Op::Acquire {
            waiter: None,
            line: [],
            ..
        }
    ));
    let permit = Keys::permit(&KeyLayout::default(), "api", 3, 4).unwrap();
    assert_eq!(permit.resources().collect::<Vec<_>>(), ["api"]);
    assert!(permit.one_slot());
    let claim = Claim::new(permit);
    assert!(matches!(
        claim.op(Step::Acquire { holder_ttl: false }, 1000, now),
        Op::AcquirePermit {
            permits: 4,
            waiter: None,
            ..
        }
    ));
}

#[test]
fn resources_round_trip_through_keys() {
    for r in ["x", "}", "{", "a}:lock{b", "ключ"] {
        let keys = Keys::single(&KeyLayout::default(), r, true).unwrap();
        assert_eq!(keys.resources().next(), Some(r));
    }
}

/// Whether an extension restores is decided where it is written, by the
/// quarantine of the connection it goes out on: a plain or fenced lock's
/// extension to a quarantined node sets the key again where absent; on any
/// other node, and for kinds that do not restore, it is the round's step.
#[test]
fn an_extension_written_to_a_quarantined_node_restores() {
    let restores = |claim: &Claim, quarantined| {
        matches!(
            claim.op_on(Step::Extend { restore: false }, 1000, quarantined, now),
            Op::Extend { restore: true, .. }
        )
    };
    let plain = Claim::new(Keys::single(&KeyLayout::default(), "r", false).unwrap());
    assert!(restores(&plain, true));
    assert!(!restores(&plain, false));
    let many = Claim::new(Keys::many(&KeyLayout::default(), &["a", "b"]).unwrap());
    assert!(matches!(
        many.op_on(Step::Extend { restore: false }, 1000, true, now),
        Op::ExtendMany { .. }
    ));
    // Any other step is written as the round made it.
    assert_eq!(
        plain.op_on(Step::Release, 0, true, now),
        plain.op(Step::Release, 0, now)
    );
}
