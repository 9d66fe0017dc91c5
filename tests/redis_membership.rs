//! Changing members on the five real nodes (docs/agreement.md, "Changing
//! members"): node 5 replaced by a new server, and a deployment of three
//! grown to five, each by a declared change while a lock and a leadership
//! are held. While the change lasts, every grant needs a majority of the old
//! members and one of the new — the case the issue met, a lock lost on two
//! nodes, is refused to the new list, and granted twice without the joint
//! rule (the negative control); at its end the leader is kept, no lock that
//! was valid is lost, and a client started on the old list is refused as
//! moved.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::deployment::Mismatch;
use redquorum::election::Election;
use redquorum::{ChangeError, ConfigError, MemberChange, Redlock};
use support::*;

/// Short, so that a change ends within seconds (its wait is `max_ttl`, 2%
/// of it and 6 s).
const MAX_TTL: Duration = Duration::from_secs(4);

/// A client of `urls` under `prefix`, with the short `max_ttl`.
fn client(urls: &[String], prefix: &str) -> redquorum::Builder {
    Redlock::builder()
        .nodes(urls)
        .key_prefix(prefix)
        .max_ttl(MAX_TTL)
        .node_timeout(Duration::from_secs(1))
        .trust_durable_restarts(true)
}

/// Node 5's server under another database: a new, empty server at an
/// address no member knows, as a replacement node on another port is.
fn replaced_list() -> Vec<String> {
    let mut urls = node_urls();
    urls[4] = format!("{}/1", urls[4]);
    urls
}

/// Deletes `resource`'s lock key under `prefix` on the nodes `which`
/// (0-based): the lock lost there, as on nodes frozen past its TTL or
/// restarted empty.
async fn lose(prefix: &str, resource: &str, which: &[usize]) {
    let key = redquorum::KeyLayout::new(prefix, false)
        .unwrap()
        .lock_key(resource);
    for i in which {
        let _: () = raw(*i).await.del(&key).await.unwrap();
    }
}

/// `redlock`'s campaign for a leadership of its own, held until resigned.
async fn lead(redlock: &Redlock) -> redquorum::election::Leadership {
    Election::new(redlock, &unique("members-leader"))
        .unwrap()
        .campaign(MAX_TTL)
        .await
        .unwrap()
}

#[tokio::test]
async fn replacing_a_node_keeps_one_holder_the_leader_and_refuses_the_old_list() {
    let prefix = format!("{}:", unique("members-replace"));
    let old = client(&node_urls(), &prefix).build().await.unwrap();
    let leader = lead(&old).await;
    let kept = unique("members-kept");
    let held = old
        .try_lock(&kept, MAX_TTL)
        .await
        .unwrap()
        .keep_alive()
        .unwrap();

    let change = MemberChange::declare(
        client(&node_urls(), &prefix),
        client(&replaced_list(), &prefix),
    )
    .await
    .unwrap();
    assert!(change.record().changing(), "{}", change.record());
    // The new list's client is admitted while the change lasts.
    let new = client(&replaced_list(), &prefix).build().await.unwrap();
    // A lock lost on nodes 1 and 2: the old holder keeps 3, 4 and 5, a
    // majority of the old members, two of the new. Nodes 1, 2 and the new
    // node 5 are a majority of the new members only: refused.
    let resource = unique("members-lock");
    let _lock = old.try_lock(&resource, MAX_TTL).await.unwrap();
    lose(&prefix, &resource, &[0, 1]).await;
    let second = new.try_lock(&resource, MAX_TTL).await;
    assert!(
        second.is_err(),
        "joint quorums must refuse a second holder: {second:?}"
    );
    // The negative control: the same list counting its own majority only.
    let unguarded = client(&replaced_list(), &prefix)
        .deployment_record(false)
        .build()
        .await
        .unwrap();
    lose(&prefix, &resource, &[0, 1]).await;
    let control = unguarded.try_lock(&resource, MAX_TTL).await;
    assert!(
        control.is_ok(),
        "without the joint rule the new list grants a second holder: {control:?}"
    );
    control.unwrap().release().await.unwrap();

    let done = change.finish().await.unwrap();
    assert!(!done.changing());
    // The running clients follow within a read of the record (every
    // second; 10 s here for a loaded machine).
    let start = std::time::Instant::now();
    while new.nodes().deployment().as_ref() != Some(&done)
        || old.nodes().deployment().as_ref() != Some(&done)
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            new.nodes().deployment()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The running old client asks for no new lock, and says why.
    let refused = old.try_lock(&unique("members-after"), MAX_TTL).await;
    let moved = |e: &redquorum::LockError| {
        e.votes().is_some_and(|v| {
            v.iter()
                .all(|(_, a)| format!("{a:?}").contains("the membership moved"))
        })
    };
    assert!(
        refused.as_ref().is_err_and(moved),
        "a stale list must be refused, naming the move: {refused:?}"
    );
    // The old list is refused from now on, naming the new deployment.
    match client(&node_urls(), &prefix).build().await {
        Err(ConfigError::Deployment(Mismatch::Moved { now })) => assert_eq!(now, done),
        other => panic!("the old list must be refused as moved: {other:?}"),
    }
    // The running old client keeps its leader and its lock: nodes 1-4
    // stay members, a majority of the new set.
    tokio::time::sleep(MAX_TTL * 2).await;
    assert!(leader.is_valid(), "the leader must be kept");
    assert!(held.lease().is_valid(), "the valid lock must not be lost");
    let taken = new.try_lock(&kept, MAX_TTL).await;
    assert!(taken.is_err(), "still held: {taken:?}");
    held.release().await.unwrap();
    leader.resign().await.unwrap();
    new.try_lock(&kept, MAX_TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn growing_three_to_five_keeps_the_leader_and_needs_both_majorities() {
    let prefix = format!("{}:", unique("members-grow"));
    let three = node_urls()[..3].to_vec();
    let old = client(&three, &prefix).build().await.unwrap();
    let leader = lead(&old).await;
    let change = MemberChange::declare(client(&three, &prefix), client(&node_urls(), &prefix))
        .await
        .unwrap();
    let five = client(&node_urls(), &prefix).build().await.unwrap();
    // A lock the old list holds on nodes 1 and 2 (lost on 3): a majority
    // of three. Nodes 3, 4 and 5 are a majority of five, not of the old
    // three: refused.
    let resource = unique("members-grow");
    let lock = old.try_lock(&resource, MAX_TTL).await.unwrap();
    lose(&prefix, &resource, &[2]).await;
    let second = five.try_lock(&resource, MAX_TTL).await;
    assert!(second.is_err(), "{second:?}");
    lock.release().await.unwrap();
    let done = change.finish().await.unwrap();
    assert_eq!(done.members().len(), 5);
    assert!(leader.is_valid(), "the leader must be kept");
    match client(&three, &prefix).build().await {
        Err(ConfigError::Deployment(Mismatch::Moved { .. })) => {}
        other => panic!("the old list must be refused as moved: {other:?}"),
    }
    leader.resign().await.unwrap();
}

#[tokio::test]
async fn a_change_of_too_many_members_at_once_is_refused() {
    let prefix = format!("{}:", unique("members-many"));
    let three = node_urls()[..3].to_vec();
    let _first = client(&three, &prefix).build().await.unwrap();
    // Three to 1, 4, 5: one shared node, a majority of each needs two.
    let other = vec![
        node_urls()[0].clone(),
        node_urls()[3].clone(),
        node_urls()[4].clone(),
    ];
    let refused = MemberChange::declare(client(&three, &prefix), client(&other, &prefix)).await;
    assert!(
        matches!(
            refused,
            Err(ChangeError::TooMany {
                shared: 1,
                needed: 2
            })
        ),
        "{refused:?}"
    );
    // Nothing was written: the three agree as before.
    let _agreed = client(&three, &prefix).build().await.unwrap();
}

#[tokio::test]
async fn shrinking_five_to_three_keeps_the_lease_and_retires_two_nodes() {
    let prefix = format!("{}:", unique("members-shrink"));
    let three = node_urls()[..3].to_vec();
    let five = client(&node_urls(), &prefix).build().await.unwrap();
    let kept = unique("members-shrink");
    let held = five
        .try_lock(&kept, MAX_TTL)
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let change = MemberChange::declare(client(&node_urls(), &prefix), client(&three, &prefix))
        .await
        .unwrap();
    // While it lasts, the three-node list needs 2 of its 3 and 3 of the
    // five: the lock the five-node client holds is refused to it.
    let small = client(&three, &prefix).build().await.unwrap();
    let refused = small.try_lock(&kept, MAX_TTL).await;
    assert!(refused.is_err(), "{refused:?}");
    let done = change.finish().await.unwrap();
    assert_eq!(done.members().len(), 3);
    tokio::time::sleep(MAX_TTL).await;
    assert!(held.lease().is_valid(), "the valid lock must not be lost");
    let refused = small.try_lock(&kept, MAX_TTL).await;
    assert!(refused.is_err(), "still held: {refused:?}");
    held.release().await.unwrap();
    small
        .try_lock(&kept, MAX_TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    match client(&node_urls(), &prefix).build().await {
        Err(ConfigError::Deployment(Mismatch::Moved { now })) => assert_eq!(now, done),
        other => panic!("the old list must be refused as moved: {other:?}"),
    }
}

/// A `redis-server` of this test's own on a free loopback port, without
/// persistence (killed when dropped): the sixth and seventh members.
struct Spare {
    _child: tokio::process::Child,
    url: String,
}

async fn spare() -> Spare {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server (scripts/nodes installs it)");
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(url.as_str()).unwrap();
    let start = std::time::Instant::now();
    while client.get_multiplexed_async_connection().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{url} never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Spare { _child: child, url }
}

/// Growing five to seven (two servers of the test's own), as the runbook
/// says, with a lock and a leadership held through it. The new servers are
/// counted at once here (quarantine off: they were never anyone's members
/// and hold nothing), so that the joint rule alone refuses the new list.
#[tokio::test]
async fn growing_five_to_seven_keeps_the_leader_and_needs_both_majorities() {
    let prefix = format!("{}:", unique("members-seven"));
    let (six, seven) = (spare().await, spare().await);
    let mut grown = node_urls();
    grown.extend([six.url.clone(), seven.url.clone()]);
    let builder = |urls: &[String]| client(urls, &prefix).restart_quarantine(false);
    let old = builder(&node_urls()).build().await.unwrap();
    let leader = lead(&old).await;
    let change = MemberChange::declare(builder(&node_urls()), builder(&grown))
        .await
        .unwrap();
    let new = builder(&grown).build().await.unwrap();
    // Lost on nodes 1 and 2: the old holder keeps 3, 4, 5 (a majority of
    // five, three of seven). Nodes 1, 2, 6, 7 are a majority of seven, two
    // of the old five: refused.
    let resource = unique("members-seven");
    let _lock = old.try_lock(&resource, MAX_TTL).await.unwrap();
    lose(&prefix, &resource, &[0, 1]).await;
    let second = new.try_lock(&resource, MAX_TTL).await;
    assert!(second.is_err(), "{second:?}");
    // The negative control: the seven counting their own majority alone.
    let unguarded = builder(&grown)
        .deployment_record(false)
        .build()
        .await
        .unwrap();
    let control = unguarded.try_lock(&resource, MAX_TTL).await;
    assert!(control.is_ok(), "{control:?}");
    control.unwrap().release().await.unwrap();
    let done = change.finish().await.unwrap();
    assert_eq!(done.members().len(), 7);
    tokio::time::sleep(MAX_TTL).await;
    assert!(leader.is_valid(), "the leader must be kept");
    match builder(&node_urls()).build().await {
        Err(ConfigError::Deployment(Mismatch::Moved { now })) => assert_eq!(now, done),
        other => panic!("the old list must be refused as moved: {other:?}"),
    }
    leader.resign().await.unwrap();
    new.try_lock(&unique("members-seven"), MAX_TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
