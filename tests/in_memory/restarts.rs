//! Nodes that restart and forget, on in-memory nodes: the delayed restart
//! kept by the client (a quarantined node's yes counts toward no new grant
//! of any kind), and a lease kept through every node restarting empty, its
//! lost keys restored whatever order the replies come in. The same on real
//! nodes: tests/redis_restarts/.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{MemoryNode, Until, client_over, five};
use redquorum::LeaseOptions;
use redquorum::ReentrantLock;
use redquorum::RwLock;
use redquorum::node::Node;
use redquorum::{Answer, LockError, Redlock, Semaphore, election::Election};

const BOUND: Duration = Duration::from_secs(5);
const TTL: Duration = Duration::from_secs(10);
const KEY: &str = "{job}:lock";

fn quarantined(error: &LockError) -> usize {
    error
        .votes()
        .map_or(0, |v| v.count(|a| *a == Answer::Quarantined))
}

/// A majority quarantined: no new grant of any kind, each refusal naming
/// the quarantined nodes, and nothing left on any node.
#[tokio::test]
async fn a_quarantined_majority_grants_nothing_of_any_kind() {
    let (nodes, redlock) = five().await;
    for n in &nodes[..3] {
        n.quarantine(true);
    }
    let mut refusals = Vec::new();
    refusals.push(redlock.try_lock("job", TTL).await.map(drop));
    refusals.push(
        redlock
            .lock_with("job", TTL, &redquorum::LockOptions::new().fenced())
            .await
            .map(drop),
    );
    refusals.push(
        ReentrantLock::new(&redlock, "job", "me")
            .unwrap()
            .lock(TTL)
            .await
            .map(drop),
    );
    refusals.push(redlock.lock_many(&["a", "b"], TTL).await.map(drop));
    refusals.push(
        RwLock::new(&redlock, "doc")
            .unwrap()
            .try_read(TTL)
            .await
            .map(drop),
    );
    refusals.push(
        RwLock::new(&redlock, "doc")
            .unwrap()
            .try_write(TTL)
            .await
            .map(drop),
    );
    let semaphore = Semaphore::new(&redlock, "api", 2).unwrap();
    refusals.push(semaphore.try_acquire(TTL).await.map(drop));
    let election = Election::new(&redlock, "leader").unwrap();
    let options = redquorum::AcquireOptions::new();
    // A campaign stands until elected: it must not be within its first
    // rounds (a bounded wait; the nodes are in memory, rounds take µs).
    let lease = LeaseOptions::new();
    let campaign = election.campaign_with(TTL, &options, &lease);
    let elected = tokio::time::timeout(Duration::from_millis(500), campaign).await;
    assert!(
        !matches!(elected, Ok(Ok(_))),
        "elected by quarantined nodes"
    );
    for (i, refusal) in refusals.into_iter().enumerate() {
        let error = refusal.expect_err(&format!("kind {i} was granted by quarantined nodes"));
        if !matches!(error, LockError::Timeout { .. }) {
            assert!(quarantined(&error) >= 3, "kind {i}: {error}");
        }
        if let LockError::Unavailable { .. } = &error {
            assert!(
                error
                    .to_string()
                    .contains("quarantined (restarted, or first seen")
            );
        }
    }
    redlock.shutdown().await;
    for n in &nodes {
        assert_eq!(n.holder(KEY), None, "{:?}", n.name());
    }
    // Once the quarantine ends, they count again.
    for n in &nodes[..3] {
        n.quarantine(false);
    }
    let (_, redlock) = (nodes.clone(), client_over(&nodes).await);
    redlock
        .try_lock("job", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Every node restarts empty, one after another, while A holds a lease and
/// B tries all the time: A keeps it (each extension restores its key where
/// it was lost) and B never gets it. With the quarantine off (the negative
/// control), B takes the lock while A's is valid once three nodes forgot.
async fn rolling_restart(quarantine: bool) -> (bool, bool) {
    let (nodes, holder) = five().await;
    let contender = client_over(&nodes).await;
    let mut lock = holder.lock("job", TTL).await.unwrap();
    let (mut kept, mut second) = (true, false);
    // One restart a second, an extension every third of the TTL: three
    // nodes forget between two extensions.
    for (i, n) in nodes.iter().enumerate() {
        n.wipe();
        n.quarantine(quarantine);
        if let Ok(other) = contender.try_lock("job", TTL).await {
            second |= lock.is_valid();
            other.release().await.unwrap();
        }
        if i % 3 == 2 || i == nodes.len() - 1 {
            kept &= lock.extend(TTL).await.is_ok();
        }
    }
    if kept {
        for n in &nodes {
            assert_eq!(n.holder(KEY).as_deref(), Some(lock.token()));
        }
    }
    (kept, second)
}

#[tokio::test]
async fn a_lease_survives_every_node_restarting_empty_and_no_one_else_gets_it() {
    let (kept, second) = rolling_restart(true).await;
    assert!(kept, "the lease was lost");
    assert!(!second, "a second holder while the first was valid");
}

#[tokio::test]
async fn control_without_the_quarantine_a_second_holder_gets_in() {
    let (_, second) = rolling_restart(false).await;
    assert!(second, "the checker did not see the second holder");
}

/// Nodes 0 and 1 lost the key; the extension's replies come in every order
/// of the five nodes (each node answers when thawed): whether a lost node's
/// "not held" comes before the quorum decides or after, its key is set
/// again. Before late replies were restored, orders where a lost node
/// answered last left it without the key.
#[tokio::test]
async fn late_not_held_replies_are_restored_in_every_order() {
    let mut orders = Vec::new();
    permutations(&mut vec![0, 1, 2, 3, 4], 0, &mut orders);
    assert_eq!(orders.len(), 120);
    for order in orders {
        let (nodes, redlock) = five().await;
        let mut lock = redlock.lock("job", TTL).await.unwrap();
        nodes[0].wipe();
        nodes[1].wipe();
        for n in &nodes {
            n.freeze();
        }
        let extended = async {
            for &i in &order {
                let before = nodes[i].applied();
                nodes[i].thaw();
                nodes[i]
                    .until(BOUND, "its reply", |n| n.applied() > before)
                    .await;
            }
        };
        let (result, ()) = tokio::join!(lock.extend(TTL), extended);
        result.unwrap_or_else(|e| panic!("order {order:?}: {e}"));
        for n in &nodes[..2] {
            n.until(BOUND, "the key restored", |n| {
                n.holder(KEY).as_deref() == Some(lock.token())
            })
            .await;
        }
        lock.release().await.unwrap();
        // A restore never comes after the release.
        redlock.shutdown().await;
        for n in &nodes {
            assert_eq!(n.holder(KEY), None, "order {order:?}");
        }
    }
}

fn permutations(items: &mut Vec<usize>, k: usize, out: &mut Vec<Vec<usize>>) {
    if k == items.len() {
        out.push(items.clone());
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permutations(items, k + 1, out);
        items.swap(k, i);
    }
}

/// A TTL above the longest one is refused before anything is sent.
#[tokio::test]
async fn a_ttl_above_the_longest_is_refused() {
    let nodes: Vec<Arc<MemoryNode>> = (0..3).map(MemoryNode::new).collect();
    let redlock = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        .max_ttl(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let error = redlock
        .try_lock("job", Duration::from_secs(31))
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        LockError::Input(redquorum::InputError::TtlAboveMax { .. })
    ));
    assert_eq!(nodes[0].applied(), 0);
    let mut lock = redlock
        .try_lock("job", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(lock.extend(Duration::from_secs(31)).await.is_err());
    lock.release().await.unwrap();
    let bad = Redlock::builder()
        .custom_nodes(nodes.iter().map(|n| n.clone() as Arc<dyn Node>))
        .max_ttl(Duration::ZERO)
        .build()
        .await;
    assert!(matches!(bad, Err(redquorum::ConfigError::InvalidMaxTtl(_))));
}
