//! What `release()` returns says what is left: `Ok` while the release is
//! confirmed by a quorum or still on its way (a frozen majority gets it
//! when it wakes), an error only where so many nodes failed it for good
//! that its key stays on a quorum — and then the key is there. Before, a
//! release slower than the node timeout was an error while its keys were
//! gone a moment later. In-memory nodes.

use std::sync::Arc;
use std::time::Duration;

use crate::support::memory::{FailingLink, MemoryNode, Until, five, five_failing};
use redquorum::node::Op;
use redquorum::{LockError, NodeError, Redlock};

const TTL: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_release_on_its_way_to_a_frozen_majority_is_no_error() {
    let (nodes, redlock) = five().await;
    let lock = redlock.lock("job", TTL).await.unwrap();
    for n in &nodes[..3] {
        n.freeze();
    }
    // Nothing answers from three of five within the node timeout.
    lock.release()
        .await
        .expect("a release on its way is no error");
    for n in &nodes[..3] {
        assert!(n.holder("{job}:lock").is_some(), "frozen: not yet applied");
        n.thaw();
    }
    for n in &nodes {
        n.until(BOUND, "the release delivered", |n| {
            n.holder("{job}:lock").is_none()
        })
        .await;
    }
    redlock
        .try_lock("job", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_release_refused_by_a_majority_is_an_error_and_its_key_stays() {
    let (nodes, links, redlock) = refusing_releases().await;
    let lock = redlock.lock("job", TTL).await.unwrap();
    for link in &links[..3] {
        link.fail(true);
    }
    let refused = lock.release().await;
    assert!(
        matches!(refused, Err(LockError::Unavailable { .. })),
        "{refused:?}"
    );
    crate::support::settled(&redlock).await;
    let left = nodes
        .iter()
        .filter(|n| n.holder("{job}:lock").is_some())
        .count();
    assert_eq!(left, 3, "the error says the key stays where it was refused");
    // Two refusals leave no quorum holding it: no error.
    let (_, links, redlock) = refusing_releases().await;
    let lock = redlock.lock("job", TTL).await.unwrap();
    for link in &links[..2] {
        link.fail(true);
    }
    lock.release().await.expect("a quorum released it");
}

/// Five nodes whose links refuse releases for good (`NOPERM`, as for a user
/// not allowed the release script) once told to.
async fn refusing_releases() -> (Vec<Arc<MemoryNode>>, Vec<Arc<FailingLink>>, Redlock) {
    five_failing(
        |op| matches!(op, Op::Release { .. }),
        || NodeError::NoPermission("NOPERM (test)".into()),
    )
    .await
}
