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
    assert!(matches!(
        admit(&r, 2, &reading, Some("b"), &[]),
        Admission::Excluded(_)
    ));
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
