//! Leader election on the five real nodes: candidates under random minority
//! faults (through test proxies) never lead at once, and every new leader's
//! term is larger than the last; a resignation hands over within a few
//! round trips.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::AcquireOptions;
use redquorum::LeaseOptions;
use redquorum::election::{Election, LeaderState};
use support::*;

/// One leadership as its holder saw it while valid.
#[derive(Debug, Clone, Copy)]
struct Tenure {
    term: u64,
    from: Instant,
    to: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_under_random_minority_faults_never_lead_at_once() {
    let (proxies, redlock) = proxied(Duration::from_millis(100)).await;
    let election = Election::new(&redlock, &unique("elect-chaos")).unwrap();
    let tenures = Arc::new(Mutex::new(Vec::<Tenure>::new()));
    let end = Instant::now() + Duration::from_secs(3);
    let contest = async {
        let candidates: Vec<_> = (0..4)
            .map(|_| {
                let (election, tenures) = (election.clone(), tenures.clone());
                tokio::spawn(async move {
                    // Short: a leadership whose resignation met a cut link
                    // lives on that node until its TTL.
                    let ttl = Duration::from_secs(1);
                    let wait = AcquireOptions::new().wait(Duration::from_secs(2));
                    while Instant::now() < end {
                        let led = election
                            .lead_with(ttl, &wait, &LeaseOptions::new(), |lease| async move {
                                let from = Instant::now();
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                let to = Instant::now();
                                // Counted only while valid: the promise is
                                // about valid leaderships.
                                lease.is_valid().then(|| Tenure {
                                    term: lease.fence().unwrap(),
                                    from,
                                    to,
                                })
                            })
                            .await;
                        // A wait that ran out or a leadership lost under
                        // faults: not what is checked here.
                        if let Ok(Some(tenure)) = led {
                            tenures.lock().unwrap().push(tenure);
                        }
                    }
                })
            })
            .collect();
        for c in candidates {
            c.await.expect("candidate");
        }
    };
    let ((), faults) = under_chaos(&proxies, contest).await;
    let mut tenures = tenures.lock().unwrap().clone();
    tenures.sort_by_key(|t| t.from);
    println!("random minority faults ({faults}): {} terms", tenures.len());
    assert!(faults > 0);
    assert!(tenures.len() >= 4, "{} terms in 3 s", tenures.len());
    for w in tenures.windows(2) {
        assert!(w[1].from >= w[0].to, "two leaders at once: {w:?}");
        assert!(w[1].term > w[0].term, "a term that did not grow: {w:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_hands_over_and_leader_reads_the_quorum() {
    let redlock = redlock().await;
    let election = Election::new(&redlock, &unique("elect-handover")).unwrap();
    let a = election
        .campaign_with(
            Duration::from_secs(10),
            &AcquireOptions::new().label("a"),
            &LeaseOptions::new(),
        )
        .await
        .unwrap();
    let b = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .campaign_with(
                    Duration::from_secs(10),
                    &AcquireOptions::new().label("b"),
                    &LeaseOptions::new(),
                )
                .await
        }
    });
    let LeaderState::Leading(leader) = election.leader().await.unwrap() else {
        panic!("a leads")
    };
    assert_eq!(
        (leader.term, leader.label.as_deref()),
        (a.term(), Some("a"))
    );
    let a_term = a.term();
    let resigned = Instant::now();
    a.resign().await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .expect("b elected within 10 s")
        .unwrap()
        .unwrap();
    println!("hand-over after resignation: {:?}", resigned.elapsed());
    assert!(b.term() > a_term);
    let LeaderState::Leading(leader) = election.leader().await.unwrap() else {
        panic!("b leads")
    };
    assert_eq!(leader.label.as_deref(), Some("b"));
    b.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), LeaderState::Vacant);
}

/// The lifecycle of examples/service.rs: a replica leads in a task; on
/// "SIGTERM" its leading future is dropped and `shutdown` releases the
/// leadership, so the next candidate — waiting in line, woken by the
/// release — leads within a round trip, not a TTL. Before, a leadership
/// held by a running task stayed on every node until its TTL (10 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_shuts_down_hands_over_at_once() {
    let name = unique("election-lifecycle");
    let ttl = Duration::from_secs(10);
    let leader = redlock().await;
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let leading = {
        let (leader, name) = (leader.clone(), name.clone());
        tokio::spawn(async move {
            let election = Election::new(&leader, &name).unwrap();
            election
                .lead_with(
                    ttl,
                    &AcquireOptions::new().label("first"),
                    &LeaseOptions::new(),
                    |_lease| async move {
                        let _ = started_tx.send(());
                        std::future::pending::<()>().await
                    },
                )
                .await
        })
    };
    started.await.unwrap();
    let next = redlock().await;
    let candidate = {
        let name = name.clone();
        tokio::spawn(async move {
            let election = Election::new(&next, &name).unwrap();
            let leadership = election
                .campaign_with(
                    ttl,
                    &AcquireOptions::new().label("next"),
                    &LeaseOptions::new(),
                )
                .await
                .unwrap();
            let at = Instant::now();
            leadership.resign().await.unwrap();
            at
        })
    };
    // The candidate is in line before the leader stops.
    until_in_line(&name).await;
    let stopped = Instant::now();
    leading.abort();
    leader.shutdown().await;
    let elected = tokio::time::timeout(Duration::from_secs(5), candidate)
        .await
        .expect("the next candidate leads long before the TTL")
        .unwrap();
    let handover = elected.saturating_duration_since(stopped);
    eprintln!("leadership handed over {handover:?} after the leader stopped (TTL {ttl:?})");
    assert!(handover < ttl / 4, "{handover:?}");
}
