//! The deployment rules, case by case.

use super::*;

fn record(ids: &[&str]) -> Record {
    Record::new(ids.iter().map(|s| (*s).to_owned()), 1_000)
}

fn held(id: &str, r: &Record, seen: &[Option<&str>]) -> Option<Reading> {
    let seen = seen.iter().map(|s| s.map(str::to_owned)).collect();
    Some(Reading::holding(id, r.clone(), seen))
}

#[test]
fn creates_only_when_every_node_answered_blank() {
    let blank = |id: &str| Some(Reading::blank(id, 3));
    assert_eq!(
        decide(&[blank("a"), blank("b"), None], 1),
        Decision::Unknown
    );
    assert_eq!(
        decide(&[blank("a"), blank("b"), blank("c")], 7),
        Decision::Create(Record::new(["c".into(), "a".into(), "b".into()], 7))
    );
    assert_eq!(
        decide(&[blank("a"), blank("b"), blank("a")], 7),
        Decision::Refused(Mismatch::SameMember { nodes: (0, 2) })
    );
    assert_eq!(decide(&[], 7), Decision::Unknown);
}

#[test]
fn agrees_on_a_quorum_and_knows_the_others_by_address() {
    let r = record(&["a", "b", "c"]);
    let seen = [Some("a"), Some("b"), Some("c")];
    let d = decide(&[held("a", &r, &seen), held("b", &r, &seen), None], 1_000);
    let Decision::Agreed(agreed) = d else {
        panic!("{d:?}")
    };
    assert_eq!(agreed.ids[2].as_deref(), Some("c"));
    assert!(agreed.adopt.is_empty());
}

#[test]
fn adopts_a_member_that_lost_its_data_at_its_known_address() {
    let r = record(&["a", "b", "c"]);
    let seen = [Some("a"), Some("b"), Some("c")];
    // Two of three emptied: the one holder vouches for both.
    let d = decide(
        &[
            held("a", &r, &seen),
            Some(Reading::blank("x", 3)),
            Some(Reading::blank("y", 3)),
        ],
        1_000,
    );
    let Decision::Agreed(agreed) = d else {
        panic!("{d:?}")
    };
    assert_eq!(agreed.adopt, [1, 2]);
    assert_eq!(
        agreed.ids,
        [Some("a".into()), Some("b".into()), Some("c".into())]
    );
}

#[test]
fn refuses_a_new_server_at_an_unknown_address() {
    let r = record(&["a", "b", "c"]);
    // The holders know nodes 1 and 2, not what this client lists third.
    let seen = [Some("a"), Some("b"), None];
    let d = decide(
        &[
            held("a", &r, &seen),
            held("b", &r, &seen),
            Some(Reading::blank("z", 3)),
        ],
        1_000,
    );
    assert_eq!(
        d,
        Decision::Refused(Mismatch::NotAMember {
            node: 2,
            id: "z".into(),
            blank: true
        })
    );
}

#[test]
fn refuses_another_count_another_record_and_a_stranger() {
    let r = record(&["a", "b", "c"]);
    let none = [None, None, None];
    let d = decide(&[held("a", &r, &none[..2]), held("b", &r, &none[..2])], 1);
    assert_eq!(
        d,
        Decision::Refused(Mismatch::MemberCount {
            configured: 2,
            recorded: 3
        })
    );
    let other = record(&["a", "b", "d"]);
    let d = decide(&[held("a", &r, &none), held("b", &other, &none), None], 1);
    assert_eq!(d, Decision::Refused(Mismatch::Conflicting { records: 2 }));
    let d = decide(
        &[
            held("a", &r, &none),
            held("b", &r, &none),
            held("q", &r, &none),
        ],
        1,
    );
    assert!(matches!(
        d,
        Decision::Refused(Mismatch::NotAMember { node: 2, .. })
    ));
}

#[test]
fn never_guesses_from_less_than_a_quorum() {
    let r = record(&["a", "b", "c", "d", "e"]);
    let none = [None, None, None, None, None];
    // Three nodes have not answered: they may hold it.
    let d = decide(
        &[held("a", &r, &none), held("b", &r, &none), None, None, None],
        1,
    );
    assert_eq!(d, Decision::Unknown);
    // They answered, each as a member the holders do not know.
    let blank = |id: &str| Some(Reading::blank(id, 5));
    let d = decide(
        &[
            held("a", &r, &none),
            held("b", &r, &none),
            blank("x"),
            blank("y"),
            None,
        ],
        1,
    );
    assert!(matches!(
        d,
        Decision::Refused(Mismatch::NotAMember { node: 2, .. })
    ));
    // Three answered, all holders: agreed, the others known later.
    let d = decide(
        &[
            held("a", &r, &none),
            held("b", &r, &none),
            held("c", &r, &none),
            None,
            None,
        ],
        1,
    );
    assert!(matches!(d, Decision::Agreed(_)));
}

#[test]
fn holders_that_disagree_on_an_address_vouch_for_nothing() {
    let r = record(&["a", "b", "c"]);
    let d = decide(
        &[
            held("a", &r, &[None, None, Some("c")]),
            held("b", &r, &[None, None, Some("a")]),
            Some(Reading::blank("z", 3)),
        ],
        1,
    );
    assert!(matches!(
        d,
        Decision::Refused(Mismatch::NotAMember { node: 2, .. })
    ));
}

#[test]
fn admits_members_and_adopts_only_the_expected() {
    let r = record(&["a", "b", "c"]);
    let reading = Reading::holding("c", r.clone(), vec![None; 3]);
    assert_eq!(admit(&r, 2, &reading, Some("c"), &["a"]), Admission::Member);
    // A node that holds the record answers for itself: the member its
    // address was known as (a hint from `seen:`) does not overrule it.
    assert_eq!(admit(&r, 2, &reading, Some("b"), &[]), Admission::Member);
    assert!(matches!(
        admit(&r, 2, &reading, None, &["c"]),
        Admission::Excluded(_)
    ));
    let moved = record(&["c", "d", "e"]);
    let other = Reading::holding("c", moved.clone(), vec![None; 3]);
    assert_eq!(
        admit(&r, 2, &other, Some("c"), &[]),
        Admission::Excluded(Mismatch::Moved { now: moved })
    );
    let blank = Reading::blank("n", 3);
    assert!(matches!(
        admit(&r, 2, &blank, Some("a"), &["a"]),
        Admission::Excluded(_)
    ));
}

/// An address once one member's and now another's (a port given to
/// another server: the test proxies' ports are reused from test to test)
/// leaves a stale `seen:` entry. A client that decided before that node
/// answered knows it by the stale entry; the node, answering with the
/// record and its own id, is that member all the same. Before, it was
/// refused as no member (`NotAMember`, not blank) and so the client's
/// build, intermittently, where nodes answered late.
#[test]
fn a_stale_address_does_not_outvote_a_members_own_answer() {
    let r = record(&["a", "b", "c", "d", "e"]);
    // Node 0 is `a`; the holders knew its address as `b`'s (stale), and
    // node 1's not at all. Nodes 0 and 1 answer after the decision.
    let seen = [Some("b"), None, Some("c"), Some("d"), Some("e")];
    let d = decide(
        &[
            None,
            None,
            held("c", &r, &seen),
            held("d", &r, &seen),
            held("e", &r, &seen),
        ],
        1_000,
    );
    let Decision::Agreed(agreed) = d else {
        panic!("{d:?}")
    };
    assert_eq!(agreed.ids[0].as_deref(), Some("b"), "the stale hint");
    let late = Reading::holding("a", r.clone(), vec![None; 5]);
    let taken = ["c", "d", "e"];
    assert_eq!(
        admit(&r, 0, &late, agreed.ids[0].as_deref(), &taken),
        Admission::Member
    );
    // The hint still never makes a member of a node another one is.
    let twin = Reading::holding("c", r.clone(), vec![None; 5]);
    assert!(matches!(
        admit(&r, 0, &twin, agreed.ids[0].as_deref(), &taken),
        Admission::Excluded(_)
    ));
}

fn ids(list: &str) -> Vec<String> {
    list.split(' ').map(str::to_owned).collect()
}

fn no_seen(n: usize) -> Vec<Option<&'static str>> {
    vec![None; n]
}

/// Node c replaced by d: during the change both lists agree (each counts
/// a majority of both sets); a list mixing them is refused; after it, the
/// old list is refused as moved.
#[test]
fn a_change_admits_either_list_and_then_only_the_new() {
    let before = record(&["a", "b", "c"]);
    let joint = before.joint(ids("a b d"));
    let answer = |id: &str, r: &Record| held(id, r, &no_seen(3));
    let old = [
        answer("a", &joint),
        answer("b", &joint),
        answer("c", &joint),
    ];
    let new = [
        answer("a", &joint),
        answer("b", &joint),
        answer("d", &joint),
    ];
    for list in [&old, &new] {
        assert!(
            matches!(decide(list, 1_000), Decision::Agreed(_)),
            "{list:?}"
        );
    }
    let Decision::Agreed(agreed) = decide(&old, 1_000) else {
        unreachable!()
    };
    // The old list's sets: {a, b, c} of 3 and {a, b} of 3 (d unreached).
    let mut round = crate::proto::joint::Joint::new(&sets(&agreed.record, &agreed.ids));
    round.record(0, crate::proto::quorum::Vote::Yes);
    assert_eq!(
        round.record(2, crate::proto::quorum::Vote::Yes),
        crate::proto::quorum::Decision::Pending,
        "a and c are a majority of the old set only"
    );
    let after = joint.finished();
    let stale = [
        answer("a", &after),
        answer("b", &after),
        answer("c", &after),
    ];
    assert_eq!(
        decide(&stale, 1_000),
        Decision::Refused(Mismatch::Moved { now: after.clone() })
    );
    let grown = before.joint(ids("a b c d e")).finished();
    let small = [
        answer("a", &grown),
        answer("b", &grown),
        answer("c", &grown),
    ];
    assert_eq!(
        decide(&small, 1_000),
        Decision::Refused(Mismatch::Moved { now: grown })
    );
}

/// A node that missed a step (down while the change was declared) holds
/// an older epoch: the newest record decides, and the node is a member.
#[test]
fn the_newest_epoch_decides_and_older_ones_are_behind() {
    let before = record(&["a", "b", "c"]);
    let joint = before.joint(ids("a b c d e"));
    let readings = [
        held("a", &joint, &no_seen(3)),
        held("b", &before, &no_seen(3)),
        held("c", &joint, &no_seen(3)),
    ];
    let Decision::Agreed(agreed) = decide(&readings, 1_000) else {
        panic!()
    };
    assert_eq!(agreed.record, joint);
    assert_eq!(
        admit(&joint, 1, readings[1].as_ref().unwrap(), Some("b"), &[]),
        Admission::Member
    );
    // Two records at one epoch are a conflict, whatever else is behind.
    let other = before.joint(ids("a b c d f"));
    let readings = [
        held("a", &joint, &no_seen(3)),
        held("b", &other, &no_seen(3)),
        held("c", &before, &no_seen(3)),
    ];
    assert_eq!(
        decide(&readings, 1_000),
        Decision::Refused(Mismatch::Conflicting { records: 2 })
    );
    assert_eq!(follow(&before, &readings), None, "no single newer record");
}

/// A running client follows the newer record; a node it knows that is no
/// longer a member is excluded as moved, and its sets shrink to the
/// members it has.
#[test]
fn a_running_client_follows_and_counts_only_members() {
    let before = record(&["a", "b", "c"]);
    let after = before.joint(ids("a b d")).finished();
    let readings = [held("a", &after, &no_seen(3)), None, None];
    assert_eq!(follow(&before, &readings), Some(after.clone()));
    assert_eq!(follow(&after, &readings), None, "not newer");
    assert_eq!(
        admit(
            &after,
            2,
            &Reading::holding("c", after.clone(), vec![]),
            Some("c"),
            &[]
        ),
        Admission::Excluded(Mismatch::Moved { now: after.clone() })
    );
    let known = [
        Some("a".to_owned()),
        Some("b".to_owned()),
        Some("c".to_owned()),
    ];
    let mut round = crate::proto::joint::Joint::new(&sets(&after, &known));
    use crate::proto::quorum::{Decision as D, Vote::Yes};
    assert_eq!(round.record(2, Yes), D::Pending, "c counts nowhere");
    assert_eq!(round.record(0, Yes), D::Pending);
    assert_eq!(
        round.record(1, Yes),
        D::Granted,
        "a and b: 2 of {{a, b, d}}"
    );
}

#[test]
fn a_record_names_its_change() {
    let joint = record(&["a", "b", "c"]).joint(ids("a b d"));
    let text = joint.to_string();
    assert!(text.contains("changing to 3 members (set"), "{text}");
    assert!(text.contains("epoch 1"), "{text}");
    assert!(record(&["a"]).to_string().ends_with("max_ttl 1s"));
}
