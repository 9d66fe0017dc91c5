//! The hub's channels, interests and batches, over in-memory listeners.

use super::*;

/// A node that reports nothing: its subscriber never connects, so the
/// test alone drives the hub's state.
fn deaf() -> Open {
    Box::new(|| None)
}

fn hub() -> Arc<Hub> {
    Hub::new(vec![deaf()], 1, None)
}

#[tokio::test]
async fn channels_are_bounded_and_a_waiter_past_the_bound_polls() {
    let hub = hub();
    let held: Vec<Interest> = (0..MAX_CHANNELS)
        .map(|i| hub.register(&format!("{{r{i}}}:lock"), None))
        .collect();
    assert!(held.iter().all(|i| i.registered.is_some()));
    let past = hub.register("{one-more}:lock", None);
    assert!(past.registered.is_none(), "registered past the bound");
    assert!(!past.listening());
    // A waiter on a channel already tracked still registers.
    let again = hub.register("{r0}:lock", None);
    assert!(again.registered.is_some());
    assert_eq!(hub.lock().len(), MAX_CHANNELS);
    drop(held);
    drop(again);
    // Never subscribed anywhere: gone as soon as their waiters are.
    assert_eq!(hub.lock().len(), 0);
}

#[tokio::test]
async fn a_sync_names_at_most_a_batch_and_pairs_that_cancel_are_never_sent() {
    let hub = hub();
    // Registered and gone before any sync: nothing to send.
    drop(hub.register("{gone}:lock", None));
    assert_eq!(hub.next_batch(0), (vec![], vec![]));
    let held: Vec<Interest> = (0..MAX_BATCH + 10)
        .map(|i| hub.register(&format!("{{r{i}}}:lock"), None))
        .collect();
    let (subscribe, unsubscribe) = hub.next_batch(0);
    assert_eq!(subscribe.len(), MAX_BATCH);
    assert!(unsubscribe.is_empty());
    hub.confirm(0, &subscribe, &[]);
    let (rest, _) = hub.next_batch(0);
    assert_eq!(rest.len(), 10);
    hub.confirm(0, &rest, &[]);
    assert!(held.iter().all(Interest::listening));
    // Waiters gone: the next sync unsubscribes, in batches too.
    drop(held);
    let (subscribe, unsubscribe) = hub.next_batch(0);
    assert!(subscribe.is_empty());
    assert_eq!(unsubscribe.len(), MAX_BATCH);
    hub.confirm(0, &[], &unsubscribe);
    let (_, rest) = hub.next_batch(0);
    hub.confirm(0, &[], &rest);
    assert_eq!(hub.lock().len(), 0, "entries left after unsubscribing");
}

#[tokio::test]
async fn a_release_wakes_the_waiter_at_its_quorum() {
    let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
    let mut waiter = hub.register("{r}:lock", None);
    waiter.mark_seen();
    hub.released("{r}:lock", b"n1", 0);
    assert!(waiter.has_changed().is_none(), "woken before a quorum");
    hub.released("{r}:lock", b"n1", 1);
    hub.released("{r}:lock", b"n1", 2);
    assert!(waiter.has_changed().is_some());
    waiter.mark_seen();
    // A release reported before the last attempt counts no more.
    assert!(waiter.has_changed().is_none());
    hub.released("{r}:lock", b"n2", 0);
    hub.released("{r}:lock", b"n2", 2);
    assert!(
        waiter.has_changed().is_some(),
        "a second release woke nobody"
    );
}

/// An undo's reports wake nobody, each node's first one; a release
/// of another nonce does, and a second report of the muted nonce from
/// a node (another release of it) counts.
#[tokio::test]
async fn an_undo_wakes_nobody() {
    let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
    let mut waiter = hub.register("{r}:lock", None);
    let mut other = hub.register("{r}:lock", None);
    waiter.mark_seen();
    other.mark_seen();
    hub.mute(&["{r}:lock".into(), "{r}:fence".into()], "undone");
    for node in 0..3 {
        hub.released("{r}:lock", b"undone", node);
    }
    assert!(waiter.has_changed().is_none(), "woken by an undo");
    assert!(
        other.has_changed().is_none(),
        "another waiter woken by an undo"
    );
    // Heard from every node: forgotten.
    assert!(hub.lock()["{r}:lock"].muted.is_empty());
    hub.released("{r}:lock", b"held", 0);
    hub.released("{r}:lock", b"held", 1);
    assert!(waiter.has_changed().is_some(), "a release woke nobody");
    // Bounded per channel, whatever the undos.
    for i in 0..100 {
        hub.mute(&["{r}:lock".into()], &format!("u{i}"));
    }
    assert_eq!(hub.lock()["{r}:lock"].muted.len(), MIN_MUTED);
    // A channel nobody waits on mutes nothing.
    hub.mute(&["{s}:lock".into()], "u");
    assert!(!hub.lock().contains_key("{s}:lock"));
}

/// A muted undo heard only after [`MUTE_FOR`] counts.
#[tokio::test(start_paused = true)]
async fn a_mute_is_bounded_in_time() {
    let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
    let mut waiter = hub.register("{r}:lock", None);
    waiter.mark_seen();
    hub.mute(&["{r}:lock".into()], "late");
    tokio::time::sleep(MUTE_FOR).await;
    hub.released("{r}:lock", b"late", 0);
    hub.released("{r}:lock", b"late", 1);
    assert!(waiter.has_changed().is_some());
    assert!(hub.lock()["{r}:lock"].muted.is_empty());
}

/// Readers release together: their reports reach the nodes
/// interleaved, and a waiter wakes once a quorum of nodes has each
/// reported something since its last attempt (before that, no new round
/// can find a quorum of them free).
#[tokio::test]
async fn interleaved_releases_wake_once_a_quorum_of_nodes_reported() {
    let hub = Hub::new(vec![deaf(), deaf(), deaf(), deaf(), deaf()], 3, None);
    let mut waiter = hub.register("{r}:writer", None);
    waiter.mark_seen();
    for node in 0..2 {
        hub.released("{r}:writer", b"a", node);
        hub.released("{r}:writer", b"b", node);
    }
    assert!(waiter.has_changed().is_none(), "woken before a quorum");
    hub.released("{r}:writer", b"a", 2);
    assert!(
        waiter.has_changed().is_some(),
        "three nodes reported: no wake-up"
    );
    waiter.mark_seen();
    hub.released("{r}:writer", b"a", 3);
    hub.released("{r}:writer", b"b", 4);
    assert!(
        waiter.has_changed().is_none(),
        "two nodes since the attempt woke it"
    );
    hub.released("{r}:writer", b"b", 2);
    assert!(
        waiter.has_changed().is_some(),
        "three nodes since the attempt: no wake-up"
    );
}

/// However many releases come, and in whatever bursts, a waiter wakes
/// once a quorum of nodes has reported one: each node's reports
/// arrive in a run of their own (its subscriber reads them in turn).
#[tokio::test]
async fn a_burst_of_any_size_wakes_the_waiter_at_the_quorum() {
    for burst in [1_u32, 8, 9, 64, 1000] {
        let hub = Hub::new(vec![deaf(), deaf(), deaf(), deaf(), deaf()], 3, None);
        let mut waiter = hub.register("{r}:writer", None);
        waiter.mark_seen();
        for node in 0..3 {
            assert!(
                waiter.has_changed().is_none(),
                "{burst}: woken before node {node}"
            );
            for i in 0..burst {
                hub.released("{r}:writer", &i.to_be_bytes(), node);
            }
        }
        assert!(
            waiter.has_changed().is_some(),
            "a burst of {burst} woke nobody"
        );
    }
}

/// A release that keeps the lock for one waiter wakes that waiter only,
/// at a quorum of nodes naming it; one for the readers wakes every
/// reader; one that names no one wakes everyone.
#[tokio::test]
async fn a_release_wakes_the_one_waiter_it_kept_the_lock_for() {
    let hub = Hub::new(vec![deaf(), deaf(), deaf()], 2, None);
    let mut head = hub.register("{r}:lock", Some("w300:head"));
    let mut next = hub.register("{r}:lock", Some("w300:next"));
    let mut reader = hub.register("{r}:lock", Some("r300:reader"));
    for w in [&mut head, &mut next, &mut reader] {
        w.mark_seen();
    }
    hub.released("{r}:lock", b"t1\nw300:head", 0);
    assert_eq!(head.has_changed(), None, "woken before a quorum");
    hub.released("{r}:lock", b"t1\nw300:head", 1);
    assert_eq!(head.has_changed(), Some(true));
    assert_eq!(next.has_changed(), None, "a waiter woken for another");
    assert_eq!(reader.has_changed(), None);
    hub.released("{r}:lock", b"t2\nr", 0);
    hub.released("{r}:lock", b"t2\nr", 2);
    assert_eq!(reader.has_changed(), Some(true));
    assert_eq!(next.has_changed(), None, "a writer woken for the readers");
    // A node that named the head and one that named no one: a quorum
    // of releases for `head`, not all of them its own.
    head.mark_seen();
    hub.released("{r}:lock", b"t3\nw300:head", 0);
    hub.released("{r}:lock", b"t3", 1);
    assert_eq!(head.has_changed(), Some(false));
    assert_eq!(next.has_changed(), None, "one node woke `next`");
    hub.released("{r}:lock", b"t3", 2);
    assert_eq!(next.has_changed(), Some(false));
    // Gone with its waiter.
    drop(head);
    assert!(!hub.lock()["{r}:lock"].named.contains_key("w300:head"));
}
