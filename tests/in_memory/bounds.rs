//! A dead node costs a fixed amount (docs/design.md §11, "What one faulty
//! node costs"): calls in flight per node
//! stay under `max_in_flight`, a call is given up after its grace, and no
//! task is left behind per operation — whatever the rate and the TTL. Runs
//! on memory nodes on virtual time; one of them never answers.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::MemoryNode;
use redquorum::node::Node;
use redquorum::{Answer, LockError, NodeError, Redlock, Retry};

const LIMIT: usize = 8;
const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Four node timeouts, but at least 1 s.
const GRACE: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(60);

async fn cluster(limit: usize) -> (Vec<Arc<MemoryNode>>, Redlock) {
    let nodes: Vec<Arc<MemoryNode>> = (0..5).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        .node_timeout(NODE_TIMEOUT)
        .max_in_flight(limit)
        .retry(Retry::none())
        .build()
        .await
        .unwrap();
    (nodes, redlock)
}

fn in_flight(redlock: &Redlock) -> Vec<usize> {
    redlock
        .nodes()
        .iter()
        .map(|n| (n.name(), n.in_flight()))
        .map(|(_, n)| n)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_frozen_node_costs_at_most_max_in_flight_calls() {
    let (nodes, redlock) = cluster(LIMIT).await;
    nodes[4].freeze(); // frozen: takes calls, never answers
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let mut overloaded = 0;
    for i in 0..200 {
        let lock = redlock
            .try_lock(&format!("r{i}"), TTL)
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        lock.release().await.unwrap();
        let now = in_flight(&redlock);
        assert!(now[4] <= LIMIT, "cycle {i}: {now:?} calls in flight");
        assert!(now[..4].iter().all(|n| *n <= LIMIT), "cycle {i}: {now:?}");
        if now[4] == LIMIT {
            overloaded += 1;
        }
    }
    assert!(overloaded > 0, "the bound was never reached");
    // Every cycle ran within the grace (virtual time stands still while
    // nothing sleeps), so the frozen node's calls are still pending…
    assert_eq!(in_flight(&redlock)[4], LIMIT);
    // …and no task was started per operation.
    let tasks_after = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert_eq!(tasks_after, tasks_before, "tasks left behind");
    // Past the grace the frozen node's calls are given up: it costs nothing.
    tokio::time::sleep(GRACE + Duration::from_millis(1)).await;
    assert_eq!(in_flight(&redlock), [0; 5]);
}

#[tokio::test(start_paused = true)]
async fn past_the_bound_a_call_is_refused_at_once_and_votes_overloaded() {
    // Each failed round takes the node timeout and leaves an acquire and a
    // release in flight per frozen node: a bound of 4 is reached well
    // within the grace.
    const LIMIT: usize = 4;
    let (nodes, redlock) = cluster(LIMIT).await;
    for n in &nodes[2..] {
        n.freeze(); // a frozen majority: every round fails
    }
    let mut saw_overloaded = false;
    for i in 0..(2 * LIMIT) {
        let start = tokio::time::Instant::now();
        match redlock.try_lock(&format!("r{i}"), TTL).await {
            Err(LockError::Unavailable { votes }) => {
                for (node, answer) in votes.iter().skip(2) {
                    match answer {
                        // Timed out, or not waited for once the refusals
                        // had decided the round.
                        Answer::Failed(NodeError::TimedOut) | Answer::Undecided => {}
                        Answer::Failed(NodeError::Overloaded(limit)) => {
                            assert_eq!(*limit, LIMIT);
                            saw_overloaded = true;
                        }
                        other => panic!("{node}: {other:?}"),
                    }
                }
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        // Refused or timed out, a round never waits past the node timeout.
        assert!(start.elapsed() <= NODE_TIMEOUT, "{:?}", start.elapsed());
        assert!(in_flight(&redlock).iter().all(|n| *n <= LIMIT));
    }
    assert!(saw_overloaded, "no call was refused at the bound");
    // A refused call was never sent: once the frozen nodes are back, each
    // of them applied at most LIMIT calls.
    for n in &nodes[2..] {
        n.thaw();
    }
    tokio::time::sleep(GRACE * 2).await;
    assert_eq!(in_flight(&redlock), [0; 5]);
}

#[tokio::test]
async fn a_zero_bound_is_a_config_error() {
    let node: Arc<dyn Node> = MemoryNode::new(0);
    let err = Redlock::builder()
        .custom_nodes([node])
        .max_in_flight(0)
        .build()
        .await
        .unwrap_err();
    assert_eq!(err, redquorum::ConfigError::InvalidMaxInFlight);
}

/// A caller looping on `try_lock` while no node is connected (every call
/// refused at once) still yields to the runtime: other tasks — reconnects,
/// timers — run. (A round that never waited on anything used to spin a
/// worker forever; a benchmark hung on it.)
#[tokio::test]
async fn a_loop_over_refused_rounds_lets_other_tasks_run() {
    let redlock = Redlock::builder()
        // Nothing listens on port 1: never connected, refused at once.
        .nodes([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
        .retry(Retry::none())
        .build()
        .await
        .unwrap();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let ran = ran.clone();
        tokio::spawn(async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) })
    };
    let mut rounds = 0u32;
    while !ran.load(std::sync::atomic::Ordering::SeqCst) && rounds < 100_000 {
        let refused = redlock.try_lock("r", TTL).await;
        assert!(
            matches!(refused, Err(LockError::Unavailable { .. })),
            "{refused:?}"
        );
        rounds += 1;
    }
    assert!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        "{rounds} refused rounds and the other task never ran"
    );
    other.await.unwrap();
}

/// A release pairs with an acquire that was made: it goes past the bound
/// (refused, it would leave that acquire's key for its TTL), but only up
/// to three times it; and a node whose acquire was refused before it was
/// sent is sent no release.
#[tokio::test(start_paused = true)]
async fn releases_go_past_the_bound_up_to_three_times_it() {
    let (nodes, redlock) = cluster(LIMIT).await;
    nodes[4].freeze();
    let mut locks = Vec::new();
    for i in 0..LIMIT + 2 {
        locks.push(redlock.try_lock(&format!("held{i}"), TTL).await.unwrap());
    }
    // The frozen node took LIMIT acquires and refused the last two.
    assert_eq!(in_flight(&redlock)[4], LIMIT);
    for lock in locks {
        match lock.release().await {
            Ok(()) => {}
            Err(e) => panic!("{e}"),
        }
    }
    // One release per acquire made: past the bound, within three times it.
    let now = in_flight(&redlock)[4];
    assert_eq!(now, 2 * LIMIT, "{now} calls in flight to the frozen node");
    // A new acquire is refused there, and so sends no release either.
    let lock = redlock.try_lock("after", TTL).await.unwrap();
    lock.release().await.unwrap();
    assert_eq!(in_flight(&redlock)[4], 2 * LIMIT);
    tokio::time::sleep(GRACE + Duration::from_millis(1)).await;
    assert_eq!(in_flight(&redlock), [0; 5]);
}
