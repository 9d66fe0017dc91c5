//! The agreement's bookkeeping, without nodes.

use super::*;

/// The agreement of a client of three nodes, `max_ttl` 1 s.
fn three() -> Arc<Agreement> {
    let names: Vec<Arc<str>> = ["a:1", "b:1", "c:1"].map(Arc::from).to_vec();
    let second = Duration::from_secs(1);
    Agreement::new(names, "redquorum:deployment".into(), second, true, second)
}

/// A node counts only while its record was read within RECORD_FRESH
/// (from when the read was sent): one whose reads stopped answering
/// stops counting, and counts again at its next read.
#[tokio::test(start_paused = true)]
async fn a_node_counts_only_while_its_record_is_fresh() {
    let agreement = three();
    let record = Record::new(["a".into(), "b".into(), "c".into()], 1_000);
    let reading = |id: &str| Some(Reading::holding(id, record.clone(), vec![None; 3]));
    let sent = Instant::now();
    for (place, id) in ["a", "b", "c"].iter().enumerate() {
        agreement.met(place, false, reading(id), sent);
    }
    assert!((0..3).all(|p| agreement.admits(p)));
    tokio::time::advance(RECORD_FRESH).await;
    assert!(agreement.admits(0), "fresh up to the bound");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!((0..3).all(|p| !agreement.admits(p)), "stale past it");
    // A read sent before the last one does not make a node fresher.
    agreement.met(1, false, reading("b"), sent);
    assert!(!agreement.admits(1));
    agreement.met(1, false, reading("b"), Instant::now());
    assert!(agreement.admits(1) && !agreement.admits(0));
}

/// A running client follows a newer record its nodes hold: its rounds
/// count in both member sets while the membership changes.
#[tokio::test(start_paused = true)]
async fn a_running_client_follows_a_declared_change() {
    let agreement = three();
    let record = Record::new(["a".into(), "b".into(), "c".into()], 1_000);
    let joint = record.joint(["a".into(), "b".into(), "d".into()]);
    for (place, id) in ["a", "b", "c"].iter().enumerate() {
        let reading = Reading::holding(id, record.clone(), vec![None; 3]);
        agreement.met(place, false, Some(reading), Instant::now());
    }
    assert_eq!(agreement.sets(), Sets::new([(vec![true; 3], 3)]));
    let reading = Reading::holding("a", joint.clone(), vec![None; 3]);
    agreement.met(0, false, Some(reading), Instant::now());
    assert_eq!(agreement.standing().record, Some(joint));
    assert_eq!(
        agreement.sets(),
        Sets::new([(vec![true; 3], 3), (vec![true, true, false], 3)])
    );
    assert!(
        (0..3).all(|p| agreement.admits(p)),
        "node b is behind, c still an old member"
    );
}
