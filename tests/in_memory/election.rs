//! Leader election on in-memory nodes: hand-over on resignation, terms that
//! grow with every leader, what `leader()` and `observe()` report, a
//! leadership lost when a majority stops answering, and candidates that
//! never lead at once (checked on every change, with a negative control
//! that shows the checker sees an overlap).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::election::{Election, LeaderState, Leadership};
use redquorum::testing::{self, MemoryNode};
use redquorum::{InputError, LockError};

const TTL: Duration = Duration::from_secs(2);
/// Every wait in these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(10);

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} within {BOUND:?}"))
}

#[tokio::test]
async fn an_empty_name_is_refused() {
    let redlock = testing::redlock(3).await;
    assert_eq!(
        Election::new(&redlock, "").map(|_| ()).unwrap_err(),
        InputError::EmptyResource
    );
}

#[tokio::test]
async fn a_resignation_hands_over_to_the_next_candidate_with_a_larger_term() {
    let redlock = testing::redlock(5).await;
    let election = Election::new(&redlock, "scheduler").unwrap();
    assert_eq!(election.leader().await.unwrap(), LeaderState::Vacant);

    let a = election
        .campaign_with(TTL, &AcquireOptions::new().label("a"), &LeaseOptions::new())
        .await
        .unwrap();
    let LeaderState::Leading(leader) = election.leader().await.unwrap() else {
        panic!("a leads")
    };
    assert_eq!(leader.term, a.term());
    assert_eq!(leader.label.as_deref(), Some("a"));
    assert!(a.is_valid());

    // b waits for as long as a leads.
    let b = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .campaign_with(TTL, &AcquireOptions::new().label("b"), &LeaseOptions::new())
                .await
        }
    });
    // A candidate with a wait is refused while a leads.
    let refused = election
        .campaign_with(
            TTL,
            &AcquireOptions::new().wait(Duration::from_millis(50)),
            &LeaseOptions::new(),
        )
        .await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    assert!(!b.is_finished());

    let a_term = a.term();
    a.resign().await.unwrap();
    let b = bounded("b elected", b).await.unwrap().unwrap();
    assert!(b.term() > a_term, "{} after {a_term}", b.term());
    let LeaderState::Leading(leader) = election.leader().await.unwrap() else {
        panic!("b leads")
    };
    assert_eq!(
        (leader.term, leader.label.as_deref()),
        (b.term(), Some("b"))
    );
    b.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), LeaderState::Vacant);
}

#[tokio::test]
async fn without_a_majority_the_leader_is_unknown_and_the_leadership_lost() {
    let nodes: Vec<_> = (0..5).map(MemoryNode::new).collect();
    let redlock = testing::redlock_over(&nodes).await;
    let election = Election::new(&redlock, "cron").unwrap();
    let leadership = election.campaign(Duration::from_millis(600)).await.unwrap();
    for node in &nodes[..3] {
        node.freeze();
    }
    // Too few answers to tell who leads…
    assert_eq!(election.leader().await.unwrap(), LeaderState::Unknown);
    // …and the leadership cannot be kept: lost before its validity ends.
    bounded("the loss", leadership.lost()).await;
    assert!(!leadership.is_valid());
    for node in &nodes[..3] {
        node.thaw();
    }
}

#[tokio::test]
async fn lead_runs_the_work_with_the_term_and_resigns() {
    let redlock = testing::redlock(5).await;
    let election = Election::new(&redlock, "report").unwrap();
    let term = election
        .lead(TTL, |lease| async move {
            assert!(lease.is_valid());
            lease.fence().unwrap()
        })
        .await
        .unwrap();
    assert!(term >= 1);
    // Resigned at the end: vacant, and the next leader's term is larger.
    assert_eq!(election.leader().await.unwrap(), LeaderState::Vacant);
    let next = election
        .lead(TTL, |lease| async move { lease.fence().unwrap() })
        .await;
    assert!(next.unwrap() > term);
}

#[tokio::test]
async fn lead_stops_the_work_when_the_leadership_is_lost() {
    let nodes: Vec<_> = (0..3).map(MemoryNode::new).collect();
    let redlock = testing::redlock_over(&nodes).await;
    let election = Election::new(&redlock, "payments").unwrap();
    let frozen = nodes.clone();
    let out = election
        .lead(Duration::from_millis(600), |_lease| async move {
            frozen[0].freeze();
            frozen[1].freeze();
            // Work that would outlive the leadership.
            std::future::pending::<()>().await
        })
        .await;
    assert!(matches!(out, Err(LockError::Lost { .. })), "{out:?}");
    for node in &nodes {
        node.thaw();
    }
}

#[tokio::test]
async fn observe_reports_each_change_of_leader() {
    let redlock = testing::redlock(5).await;
    let election = Election::new(&redlock, "observed").unwrap();
    let mut changes = Box::pin(election.observe_every(Duration::from_millis(10)));
    assert_eq!(
        bounded("the first state", changes.next()).await,
        Some(LeaderState::Vacant)
    );
    let a = election.campaign(TTL).await.unwrap();
    let Some(LeaderState::Leading(seen)) = bounded("a's term", changes.next()).await else {
        panic!("a leader")
    };
    assert_eq!(seen.term, a.term());
    a.resign().await.unwrap();
    assert_eq!(
        bounded("the vacancy", changes.next()).await,
        Some(LeaderState::Vacant)
    );
    let b = election.campaign(TTL).await.unwrap();
    let Some(LeaderState::Leading(seen)) = bounded("b's term", changes.next()).await else {
        panic!("a leader")
    };
    assert_eq!(seen.term, b.term());
    b.resign().await.unwrap();
}

/// One leadership as its holder saw it: the term, and from when to when it
/// acted as leader (while valid).
#[derive(Debug, Clone, Copy)]
struct Tenure {
    term: u64,
    from: Instant,
    to: Instant,
}

/// The first pair of tenures that overlap, or whose terms do not grow with
/// their start, if any.
fn violation(tenures: &[Tenure]) -> Option<(Tenure, Tenure)> {
    let mut sorted = tenures.to_vec();
    sorted.sort_by_key(|t| t.from);
    sorted
        .windows(2)
        .find(|w| w[1].from < w[0].to || w[1].term <= w[0].term)
        .map(|w| (w[0], w[1]))
}

/// Four candidates, each leading for a few ms then resigning, 40 terms in
/// all.
async fn contest(
    record: impl Fn(&Leadership) -> (Instant, Instant) + Send + Sync + 'static,
) -> Vec<Tenure> {
    let redlock = testing::redlock(5).await;
    let election = Election::new(&redlock, "contest").unwrap();
    let tenures = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::new(record);
    let candidates: Vec<_> = (0..4)
        .map(|_| {
            let (election, tenures, record) = (election.clone(), tenures.clone(), record.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let leadership = election.campaign(TTL).await.unwrap();
                    let (from, to) = record(&leadership);
                    tenures.lock().unwrap().push(Tenure {
                        term: leadership.term(),
                        from,
                        to,
                    });
                    // On a starved runtime (a loaded CI machine) the release
                    // may be answered after its node timeout: Unavailable,
                    // its calls delivered all the same, the next campaign
                    // waiting for them. Anything else is a failure.
                    if let Err(e) = leadership.resign().await {
                        assert!(matches!(e, LockError::Unavailable { .. }), "{e}");
                    }
                }
            })
        })
        .collect();
    for c in candidates {
        bounded("every candidate's ten terms", c).await.unwrap();
    }
    tenures.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_never_lead_at_once_and_terms_grow() {
    let tenures = contest(|leadership| {
        let from = Instant::now();
        assert!(leadership.is_valid());
        std::thread::sleep(Duration::from_millis(2));
        // Acted as leader up to here, and was still valid then.
        let to = Instant::now();
        assert!(leadership.is_valid());
        (from, to)
    })
    .await;
    assert_eq!(tenures.len(), 40);
    assert_eq!(violation(&tenures).map(|(a, b)| (a.term, b.term)), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_sees_an_overlap() {
    // Negative control: a holder that claims to lead a second longer than
    // it does (past its resignation) overlaps the next leader.
    let tenures = contest(|_| {
        let from = Instant::now();
        (from, from + Duration::from_secs(1))
    })
    .await;
    assert!(violation(&tenures).is_some());
}

/// Options that cannot keep a leadership (an extension interval past the
/// validity) are refused before standing: no term is spent, nothing is
/// set. Before, the campaign won first, then failed (the term had grown).
#[tokio::test]
async fn a_campaign_with_options_that_cannot_keep_it_is_refused_before_standing() {
    let nodes: Vec<_> = (0..3).map(MemoryNode::new).collect();
    let redlock = testing::redlock_over(&nodes).await;
    let election = Election::new(&redlock, "cron").unwrap();
    let bad = LeaseOptions::new().extend_every(Duration::from_secs(10));
    let applied: Vec<u64> = nodes.iter().map(|n| n.applied()).collect();
    let refused = election
        .campaign_with(Duration::from_secs(3), &AcquireOptions::new(), &bad)
        .await;
    assert!(
        matches!(
            refused,
            Err(LockError::Input(InputError::InvalidExtendInterval { .. }))
        ),
        "{refused:?}"
    );
    // Nothing sent, so no term spent (a term is floored at the node's
    // clock, so its value cannot say it).
    let after: Vec<u64> = nodes.iter().map(|n| n.applied()).collect();
    assert_eq!(applied, after, "calls made before refusing");
    for n in &nodes {
        assert_eq!(n.live_keys(), 0, "set before refusing");
    }
    let leadership = election.campaign(Duration::from_secs(3)).await.unwrap();
    leadership.resign().await.unwrap();
}
