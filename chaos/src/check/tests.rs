//! The checker on small hand-written histories: each rule finds what it
//! must, and nothing in a correct history.

use super::*;

fn history(text: &str) -> Report {
    check(text.lines().filter_map(Line::parse))
}

#[test]
fn holds_one_after_another_are_clean() {
    let r = history(
        "100 c1 grant id=a kind=plain res=x holder=a until=500\n\
         200 c1 end id=a\n\
         250 c2 grant id=b kind=plain res=x holder=b until=900\n\
         300 c2 until id=b until=1200\n",
    );
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.total_grants(), 2);
}

#[test]
fn a_second_holder_within_the_first_ones_validity_is_caught() {
    let r = history(
        "100 c1 grant id=a kind=plain res=x holder=a until=500\n\
         400 c2 grant id=b kind=plain res=x holder=b until=900\n",
    );
    assert!(
        matches!(&r.violations[..], [Violation::Overlap { for_ns: 100, .. }]),
        "{r}"
    );
}

#[test]
fn an_extension_lengthens_the_hold() {
    let r = history(
        "100 c1 grant id=a kind=lease res=x holder=a until=500\n\
         300 c1 until id=a until=800\n\
         600 c2 grant id=b kind=lease res=x holder=b until=900\n",
    );
    assert_eq!(r.violations.len(), 1, "{r}");
}

#[test]
fn one_owners_nested_holds_share_and_readers_share() {
    let r = history(
        "100 c1 grant id=a kind=reentrant res=x holder=w1 until=500\n\
         150 c1 grant id=b kind=reentrant res=x holder=w1 until=600\n\
         100 c1 grant id=r1 kind=read res=y holder=r1 until=500\n\
         150 c2 grant id=r2 kind=read res=y holder=r2 until=600\n",
    );
    assert!(r.violations.is_empty(), "{r}");
}

#[test]
fn a_writer_beside_a_reader_is_caught() {
    let r = history(
        "100 c1 grant id=r kind=read res=y holder=r until=500\n\
         150 c2 grant id=w kind=write res=y holder=w until=600\n",
    );
    assert_eq!(r.violations.len(), 1, "{r}");
}

#[test]
fn many_resources_conflict_on_any_of_them() {
    let r = history(
        "100 c1 grant id=a kind=many res=m0,m1 holder=a until=500\n\
         150 c2 grant id=b kind=many res=m1,m2 holder=b until=600\n",
    );
    assert!(
        matches!(&r.violations[..], [Violation::Overlap { resource, .. }] if resource == "m1"),
        "{r}"
    );
}

#[test]
fn permits_over_the_limit_are_caught() {
    let clean = history(
        "100 c1 grant id=a kind=permit res=s holder=a until=500 limit=2\n\
         150 c2 grant id=b kind=permit res=s holder=b until=600 limit=2\n\
         550 c3 grant id=c kind=permit res=s holder=c until=700 limit=2\n",
    );
    assert!(clean.violations.is_empty(), "{clean}");
    let over = history(
        "100 c1 grant id=a kind=permit res=s holder=a until=500 limit=2\n\
         150 c2 grant id=b kind=permit res=s holder=b until=600 limit=2\n\
         450 c3 grant id=c kind=permit res=s holder=c until=700 limit=2\n",
    );
    assert!(
        matches!(
            &over.violations[..],
            [Violation::TooManyPermits { held: 3, .. }]
        ),
        "{over}"
    );
}

#[test]
fn fences_and_terms_that_go_backwards_are_caught() {
    let r = history(
        "100 c1 grant id=a kind=fenced res=f holder=a until=200 fence=7\n\
         300 c2 grant id=b kind=fenced res=f holder=b until=400 fence=7\n\
         500 c1 grant id=c kind=leader res=e holder=c until=600 fence=3\n\
         700 c2 grant id=d kind=leader res=e holder=d until=800 fence=4\n",
    );
    assert!(
        matches!(&r.violations[..], [Violation::FenceBackwards { later, .. }] if later.0 == "b"),
        "{r}"
    );
}

#[test]
fn a_stale_write_accepted_is_caught_and_a_rejected_one_is_not() {
    let rejected = history(
        "100 c2 write id=b res=f fence=8 seq=1 accepted=1\n\
         200 c1 write id=a res=f fence=7 seq=2 accepted=0\n",
    );
    assert!(rejected.violations.is_empty(), "{rejected}");
    assert_eq!(rejected.writes, (1, 1));
    let accepted = history(
        "100 c2 write id=b res=f fence=8 seq=1 accepted=1\n\
         200 c1 write id=a res=f fence=7 seq=2 accepted=1\n",
    );
    assert!(
        matches!(
            &accepted.violations[..],
            [Violation::StaleWrite {
                fence: 7,
                highest: 8,
                ..
            }]
        ),
        "{accepted}"
    );
}

#[test]
fn keys_left_are_violations_and_faults_are_counted() {
    let r = history(
        "100 nemesis fault name=freeze target=2 phase=begin\n\
         200 nemesis fault name=freeze target=2 phase=end\n\
         300 run left node=3 key=chaos:x pttl=900\n",
    );
    assert_eq!(r.faults.get("freeze"), Some(&1));
    assert!(
        matches!(&r.violations[..], [Violation::KeyLeft { .. }]),
        "{r}"
    );
}

/// A key left on a node is shown with that node's last connection
/// events, and only that node's: what a reader needs to trace it.
#[test]
fn a_key_left_shows_its_nodes_last_connection_events() {
    let mut text = String::from("100 c1 link what=connection_lost node=3 error=reset\n");
    for i in 0..10 {
        text.push_str(&format!(
            "{} c2 link what=connection_attempt_failed node=4 n={i}\n",
            200 + i
        ));
    }
    text.push_str("900 run left node=4 key=chaos:x pttl=900\n");
    let r = history(&text);
    assert_eq!(r.links.get("connection_attempt_failed"), Some(&10));
    assert_eq!(r.links.get("connection_lost"), Some(&1));
    assert_eq!(r.trails.len(), TRAIL, "{r}");
    assert!(r.trails.iter().all(|t| t.starts_with("node 4 ")), "{r}");
    assert!(r.trails.last().unwrap().ends_with("n=9"), "{r}");
    // No key left: no trail.
    assert!(
        history("100 c1 link what=connection_lost node=3\n")
            .trails
            .is_empty()
    );
}

/// A release cut on its way (`cut`) whose key still held the token well
/// after (the nemesis's `kept`) is a violation: it was not sent again.
#[test]
fn a_cut_release_not_sent_again_is_a_violation() {
    let r = history(
        "100 nemesis note cut=redquorum_release node=2 reset=1\n\
         200 nemesis kept node=2 key={x}:lock\n",
    );
    assert!(
        matches!(&r.violations[..], [Violation::ReleaseNotResent { node, .. }] if node == "2"),
        "{r}"
    );
}

/// Operations begun, acquires refused and of unknown outcome, releases
/// that returned an error: counted apart, none a violation (the caller of
/// an unknown acquire never acts on it; keys it left are found after the
/// run).
#[test]
fn unknown_outcomes_are_counted_apart() {
    let r = history(
        "100 c1 invoke task=0 kind=plain\n\
         110 c1 unknown task=0 kind=plain res=x err=Unavailable\n\
         120 c1 invoke task=0 kind=plain\n\
         130 c1 fail task=0 kind=plain res=x err=Taken\n\
         140 c1 invoke task=0 kind=plain\n\
         150 c1 grant id=a task=0 kind=plain res=x holder=a until=500\n\
         160 c1 end id=a\n\
         170 c1 released id=a ok=0:Unavailable\n",
    );
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.invoked, 3);
    assert_eq!(r.fails.get("plain:Taken"), Some(&1));
    assert_eq!(r.unknown.get("plain:Unavailable"), Some(&1));
    assert_eq!(r.releases_unknown, 1);
    let shown = r.to_string();
    assert!(
        shown.contains("acquires of unknown outcome: plain:Unavailable 1"),
        "{shown}"
    );
}

/// An overlap across a single clock jump (the earlier grant before it, the
/// later after it, within a TTL) is explained, not a violation; the same
/// overlap with no jump between, across a jump that did not happen (no
/// `stepped`), a TTL or more after the jump, or across a majority's jump
/// (`clock3`), is one.
#[test]
fn an_overlap_across_a_clock_jump_is_explained() {
    let grants = "100 c1 grant id=a kind=plain res=x holder=a until=900\n\
                  400 c2 grant id=b kind=plain res=x holder=b until=1200\n";
    let jump = |at: u64| {
        format!(
            "{at} nemesis fault name=clock target=2 phase=begin\n\
             {} nemesis fault name=clock target=2 phase=stepped\n",
            at + 1
        )
    };
    let r = history(&format!("{}{grants}", jump(300)));
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.explained.len(), 1, "{r}");
    assert!(r.to_string().contains("explained by a clock jump"), "{r}");
    let r = history(&format!("{}{grants}", jump(450)));
    assert_eq!(r.violations.len(), 1, "a jump after both grants: {r}");
    let r = history(&format!(
        "300 nemesis fault name=clock target=2 phase=begin\n{grants}"
    ));
    assert_eq!(r.violations.len(), 1, "a step that failed: {r}");
    // With a TTL of 0 the later grant comes past a TTL after the jump: every
    // key set before the jump would be gone by then anyway.
    let r = history(&format!("1 run note ttl_ms=0\n{}{grants}", jump(300)));
    assert_eq!(r.violations.len(), 1, "a later grant past a TTL: {r}");
    let r = history(&format!(
        "300 nemesis fault name=clock3 target=1,2,3 phase=begin\n{grants}"
    ));
    assert_eq!(r.violations.len(), 1, "a majority's jump: {r}");
    // Granted just after the jump took effect, but begun before it: its
    // keys may have been set before the jump (the round was under way).
    let r = history(
        "90 c1 invoke task=0 kind=plain\n\
         95 nemesis fault name=clock target=2 phase=begin\n\
         98 nemesis fault name=clock target=2 phase=stepped\n\
         100 c1 grant id=a task=0 kind=plain res=x holder=a until=900\n\
         400 c2 grant id=b task=0 kind=plain res=x holder=b until=1200\n",
    );
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.explained.len(), 1, "{r}");
}

#[test]
fn restarts_are_counted_by_fault_with_those_quarantined() {
    let r = history(
        "100 run note restart=2 fault=kill quarantine_ms=0 by=mark\n\
         200 run note restart=3 fault=aof-off quarantine_ms=2990 by=mark\n\
         300 run note restart=3 fault=kill quarantine_ms=1200 by=mark\n",
    );
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.restarts["kill"], (2, 1));
    assert_eq!(r.restarts["aof-off"], (1, 1));
    assert!(
        r.to_string()
            .contains("restarts quarantined, by fault: aof-off 1 of 1, kill 1 of 2"),
        "{r}"
    );
}
