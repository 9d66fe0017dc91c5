//! The deployment record on the five real nodes (docs/agreement.md): created
//! at first use, read at every connect; a client whose members or
//! `max_ttl` differ refused with a named error; a member that lost its
//! record adopted back; and the replacement the record exists for — one
//! client on a list where node 5 is a new, empty server — refused, with
//! its negative control: the same lists without the record grant one lock
//! twice.
//!
//! Each test uses a key prefix of its own: its own deployment.
//!
//! Needs real nodes: built only with the `redis-tests` feature, which
//! `scripts/test` turns on (it starts the nodes).
#![cfg(feature = "redis-tests")]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::deployment::Mismatch;
use redquorum::{ConfigError, InputError, LockError, Redlock};
use redquorum_test_support::checks::eventually_ok;
use support::*;

const TTL: Duration = Duration::from_secs(20);

/// A prefix of its own: a deployment no other test touches.
fn prefix(name: &str) -> String {
    format!("{}:", unique(name))
}

/// A patient client of `urls` under `prefix`.
fn client(urls: &[String], prefix: &str) -> redquorum::Builder {
    Redlock::builder()
        .nodes(urls)
        .key_prefix(prefix)
        .node_timeout(Duration::from_secs(1))
        .trust_durable_restarts(true)
}

/// The record's hash on each node.
async fn records(prefix: &str) -> Vec<HashMap<String, String>> {
    let mut out = Vec::new();
    for mut conn in raw_all().await {
        let hash: HashMap<String, String> = conn
            .hgetall(format!("{prefix}redquorum:deployment"))
            .await
            .unwrap();
        out.push(hash);
    }
    out
}

/// Node 5's server under another database: a new, empty server at an
/// address no member knows, as a replacement node on another port is.
fn replaced_list() -> Vec<String> {
    let mut urls = node_urls();
    urls[4] = format!("{}/1", urls[4]);
    urls
}

#[tokio::test]
async fn first_use_records_the_members_and_max_ttl_on_every_node() {
    let prefix = prefix("agree-first");
    let redlock = client(&node_urls(), &prefix).build().await.unwrap();
    let held = records(&prefix).await;
    let members = held[0]["members"].clone();
    let mut ids: Vec<&str> = held.iter().map(|h| h["id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "{held:?}");
    assert_eq!(members, ids.join(","), "{held:?}");
    for (i, hash) in held.iter().enumerate() {
        assert_eq!(hash["members"], members, "node {}", i + 1);
        assert_eq!(hash["max_ttl"], "60000", "node {}", i + 1);
        // Each holder knows every member's address as this client spells it.
        for (j, url) in node_urls().iter().enumerate() {
            let name = url.trim_start_matches("redis://");
            let seen = hash
                .iter()
                .find(|(k, _)| k.starts_with("seen:") && k.ends_with(name));
            assert_eq!(
                seen.map(|(_, id)| id.as_str()),
                Some(held[j]["id"].as_str()),
                "{hash:?}"
            );
        }
    }
    // The client locks as ever; a second client agrees and locks too.
    let lock = redlock.try_lock(&unique("agree-first"), TTL).await.unwrap();
    lock.release().await.unwrap();
    let again = client(&node_urls(), &prefix).build().await.unwrap();
    let lock = again.try_lock(&unique("agree-first"), TTL).await.unwrap();
    lock.release().await.unwrap();
    assert_eq!(records(&prefix).await[0]["members"], members);
}

#[tokio::test]
async fn a_client_listing_other_nodes_is_refused_naming_what_differs() {
    let prefix = prefix("agree-count");
    let _recorder = client(&node_urls(), &prefix).build().await.unwrap();
    let three = &node_urls()[..3];
    match client(three, &prefix).build().await {
        Err(ConfigError::Deployment(Mismatch::MemberCount {
            configured: 3,
            recorded: 5,
        })) => {}
        other => panic!("expected MemberCount, got {other:?}"),
    }
    // The message names the counts and the way out.
    let error = client(three, &prefix)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("lists 3 nodes") && error.contains("5 members"),
        "{error}"
    );
    assert!(error.contains("docs/agreement.md"), "{error}");
}

#[tokio::test]
async fn a_chosen_max_ttl_must_be_the_records_and_an_unchosen_one_takes_it() {
    let prefix = prefix("agree-ttl");
    let urls = node_urls();
    let _recorder = client(&urls, &prefix)
        .max_ttl(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    match client(&urls, &prefix)
        .max_ttl(Duration::from_secs(45))
        .build()
        .await
    {
        Err(ConfigError::Deployment(Mismatch::MaxTtl {
            configured,
            recorded,
        })) => {
            assert_eq!(configured, Duration::from_secs(45));
            assert_eq!(recorded, Duration::from_secs(30));
        }
        other => panic!("expected MaxTtl, got {other:?}"),
    }
    // A client that chose none takes the record's 30 s: a 40 s TTL is
    // above it, as it is for the client that recorded it.
    let unchosen = client(&urls, &prefix).build().await.unwrap();
    match unchosen
        .try_lock(&unique("agree-ttl"), Duration::from_secs(40))
        .await
    {
        Err(LockError::Input(InputError::TtlAboveMax { max_ttl, .. })) => {
            assert_eq!(max_ttl, Duration::from_secs(30));
        }
        other => panic!("expected TtlAboveMax, got {other:?}"),
    }
}

/// The operations review's scenario: node 5 replaced by a new, empty
/// server at another address, one client given the new list. That client
/// is refused at connect, naming the node; the client on the recorded list
/// goes on.
#[tokio::test]
async fn a_client_whose_fifth_node_is_a_new_server_is_refused() {
    let prefix = prefix("agree-replaced");
    let old = client(&node_urls(), &prefix).build().await.unwrap();
    match client(&replaced_list(), &prefix).build().await {
        Err(ConfigError::Deployment(Mismatch::NotAMember {
            node: 4,
            blank: true,
            ..
        })) => {}
        other => panic!("expected NotAMember of node 5, got {other:?}"),
    }
    let lock = old.try_lock(&unique("agree-replaced"), TTL).await.unwrap();
    lock.release().await.unwrap();
}

/// The negative control of the test above: the same two lists without the
/// record. The old list's holder keeps nodes 3, 4 and 5; nodes 1 and 2
/// forgot its key (as when they were frozen past its TTL); the new list
/// counts nodes 1, 2 and the new server — a majority of its five — and is
/// granted the same lock. The record is what stops it.
#[tokio::test]
async fn without_the_record_the_two_lists_grant_one_lock_twice() {
    let prefix = prefix("agree-control");
    let unguarded = |urls: &[String]| client(urls, &prefix).deployment_record(false).build();
    let old = unguarded(&node_urls()).await.unwrap();
    let new = unguarded(&replaced_list()).await.unwrap();
    let resource = unique("agree-control");
    let first = old.try_lock(&resource, TTL).await.unwrap();
    let key = redquorum::KeyLayout::new(&prefix, false)
        .unwrap()
        .lock_key(&resource);
    for i in 0..2 {
        let _: () = raw(i).await.del(&key).await.unwrap();
    }
    let second = new.try_lock(&resource, TTL).await;
    assert!(
        second.is_ok(),
        "the control must show two holders without the record: {second:?}"
    );
    assert!(first.is_valid(), "the first holder is still valid");
    // With the record, the new list never gets a client.
    let guarded = client(&node_urls(), &prefix).build().await.unwrap();
    drop(guarded);
    assert!(matches!(
        client(&replaced_list(), &prefix).build().await,
        Err(ConfigError::Deployment(Mismatch::NotAMember {
            node: 4,
            ..
        }))
    ));
}

/// A member that lost its record — its data wiped, as by an empty restart —
/// is known by its address and adopted back under its id, by a new client
/// at connect and by a running client when it reconnects.
#[tokio::test]
async fn a_member_that_lost_its_record_is_adopted_back_under_its_id() {
    let prefix = prefix("agree-adopt");
    let key = format!("{prefix}redquorum:deployment");
    let running = client(&node_urls(), &prefix).build().await.unwrap();
    let before = records(&prefix).await;
    // Node 3 forgets: a new client adopts it back at connect.
    let _: () = raw(2).await.del(&key).await.unwrap();
    let fresh = client(&node_urls(), &prefix).build().await.unwrap();
    let after = records(&prefix).await;
    assert_eq!(after[2]["id"], before[2]["id"]);
    assert_eq!(after[2]["members"], before[2]["members"]);
    let lock = fresh.try_lock(&unique("agree-adopt"), TTL).await.unwrap();
    lock.release().await.unwrap();
    // Node 4 forgets and drops its connections: the running client adopts
    // it back when it reconnects.
    let mut conn = raw(3).await;
    let _: () = conn.del(&key).await.unwrap();
    kill_clients(&mut conn).await;
    let hash = eventually_ok("node 4 adopted back", Duration::from_secs(10), async || {
        let hash: HashMap<String, String> = conn.hgetall(&key).await.unwrap();
        if hash.get("members") == before[3].get("members") {
            return Ok(hash);
        }
        // Any call makes the running client notice the closed connection.
        let _ = running.nodes().probe(Duration::from_secs(1)).await;
        Err(format!("{hash:?}"))
    })
    .await;
    assert_eq!(hash["id"], before[3]["id"]);
}

/// The membership moved under a running client: the nodes now record
/// another deployment (node 5 replaced, as an operator would after a
/// drain). The running client on the old list notices at its next read of
/// the record — every second on each connection — and counts the moved
/// nodes toward no grant, naming why; the new list's client locks.
#[tokio::test]
async fn a_running_client_stops_counting_nodes_whose_record_moved() {
    let prefix = prefix("agree-moved");
    let key = format!("{prefix}redquorum:deployment");
    let old = client(&node_urls(), &prefix).build().await.unwrap();
    let before = records(&prefix).await;
    // The new deployment: nodes 1-4 as they are, node 5 replaced by the
    // new server, written whole on each node of the new list at once.
    let mut ids: Vec<String> = before[..4].iter().map(|h| h["id"].clone()).collect();
    ids.push("0000000000000005".to_owned());
    let mut members = ids.clone();
    members.sort_unstable();
    let replace = redis::Script::new(
        "redis.call('DEL', KEYS[1]) \
         return redis.call('HSET', KEYS[1], 'id', ARGV[1], 'members', ARGV[2], 'max_ttl', ARGV[3])",
    );
    for (i, url) in replaced_list().iter().enumerate() {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: i64 = replace
            .key(&key)
            .arg(&ids[i])
            .arg(members.join(","))
            .arg(60_000)
            .invoke_async(&mut conn)
            .await
            .unwrap();
    }
    let new = client(&replaced_list(), &prefix).build().await.unwrap();
    assert_eq!(
        new.nodes().deployment().map(|d| d.members().to_vec()),
        Some(members.clone())
    );
    // Within the bound (1 s and a round trip; 10 s here for a loaded
    // machine), the old client names nodes 1-4 as moved.
    let moved = |h: &redquorum::NodeHealth| {
        h.excluded
            .as_deref()
            .is_some_and(|why| why.contains("membership moved"))
    };
    let health = eventually_ok(
        "the old client names nodes 1-4 as moved",
        Duration::from_secs(10),
        async || {
            let health = old.nodes().probe(Duration::from_secs(1)).await;
            if health[..4].iter().all(moved) {
                Ok(health)
            } else {
                Err(format!("{health:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        health[4].excluded, None,
        "node 5 still holds the old record"
    );
    let refused = old.try_lock(&unique("agree-moved"), TTL).await;
    assert!(refused.is_err(), "the old list must not lock: {refused:?}");
    // (Another resource: the refused round's keys are cleaned up after it.)
    let lock = new.try_lock(&unique("agree-moved"), TTL).await.unwrap();
    lock.release().await.unwrap();
}

/// Two clients at first use, one through proxies (other addresses for the
/// same nodes), built at once: both agree on one record. Before `build`
/// read a blank node again, the second often met a node the first had not
/// written yet and was refused (`NotAMember`, seen in CI's first runs).
#[tokio::test]
async fn two_clients_at_first_use_agree_whatever_their_spellings() {
    let proxies = node_proxies().await;
    let via: Vec<String> = proxies.iter().map(support::proxy::Proxy::url).collect();
    for round in 0..10 {
        let prefix = prefix("agree-race");
        let (direct, proxied) = tokio::join!(
            client(&node_urls(), &prefix).build(),
            client(&via, &prefix).build()
        );
        let direct = direct.unwrap_or_else(|e| panic!("round {round}, direct: {e}"));
        let proxied = proxied.unwrap_or_else(|e| panic!("round {round}, proxied: {e}"));
        assert_eq!(
            direct.nodes().deployment(),
            proxied.nodes().deployment(),
            "round {round}"
        );
    }
}

/// A client that cannot read the record says so and never guesses: two of
/// five nodes answering (three listed where nothing listens) is too few to
/// read a record or to create one; it builds (down nodes are no error), and
/// each node that answered names why it counts toward no grant.
#[tokio::test]
async fn a_client_that_cannot_read_the_record_says_so() {
    let prefix = prefix("agree-unread");
    let mut urls = node_urls()[..2].to_vec();
    urls.extend((1..=3).map(|port| format!("redis://127.0.0.1:{port}")));
    let redlock = client(&urls, &prefix).build().await.unwrap();
    assert_eq!(redlock.nodes().deployment(), None);
    let health = redlock.nodes().probe(Duration::from_secs(1)).await;
    for h in &health[..2] {
        let why = h.excluded.as_deref().unwrap_or_default();
        assert!(
            why.contains("no deployment record agreed yet: 2 of 5"),
            "{h:?}"
        );
    }
    let refused = redlock.try_lock(&unique("agree-unread"), TTL).await;
    assert!(refused.is_err(), "{refused:?}");
}

/// A node that is no member counts toward nothing — not even an extension.
/// (A quarantined member's extension sets its key again and counts: the
/// exclusion was first written as a quarantine, and a review found that
/// this let two non-members carry an extension.) Here the lock's holder
/// meets nodes 4 and 5 recording another deployment, and nodes 1 and 2
/// lose its key: one node holds it, and the extension must fail.
#[tokio::test]
async fn a_node_that_is_no_member_counts_toward_no_extension() {
    let prefix = prefix("agree-extend");
    let key = format!("{prefix}redquorum:deployment");
    let redlock = client(&node_urls(), &prefix).build().await.unwrap();
    let resource = unique("agree-extend");
    let mut lock = redlock.try_lock(&resource, TTL).await.unwrap();
    for i in 3..5 {
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg("members")
            .arg("another,deployment,of,five,ids")
            .query_async(&mut raw(i).await)
            .await
            .unwrap();
    }
    eventually_ok(
        "nodes 4 and 5 excluded",
        Duration::from_secs(10),
        async || {
            let health = redlock.nodes().probe(Duration::from_secs(1)).await;
            if health[3..].iter().all(|h| h.excluded.is_some()) {
                Ok(())
            } else {
                Err(format!("{health:?}"))
            }
        },
    )
    .await;
    let lock_key = redquorum::KeyLayout::new(&prefix, false)
        .unwrap()
        .lock_key(&resource);
    for i in 0..2 {
        let _: () = raw(i).await.del(&lock_key).await.unwrap();
    }
    let extended = lock.extend(TTL).await;
    assert!(
        extended.is_err(),
        "one member holds the key; the extension must fail: {extended:?}"
    );
}

/// First use with a node down: no record can be made (every node must
/// answer), so the client locks nothing; when the node comes back, the
/// client creates the record in the background and locks.
#[tokio::test]
async fn first_use_with_a_node_down_records_when_it_comes_back() {
    let prefix = prefix("agree-late");
    let proxies = node_proxies().await;
    proxies[4].set_down(true);
    let via: Vec<String> = proxies.iter().map(support::proxy::Proxy::url).collect();
    let redlock = client(&via, &prefix).build().await.unwrap();
    assert_eq!(redlock.nodes().deployment(), None);
    let refused = redlock.try_lock(&unique("agree-late"), TTL).await;
    assert!(refused.is_err(), "{refused:?}");
    proxies[4].set_down(false);
    let start = std::time::Instant::now();
    while redlock.nodes().deployment().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "no record made");
        // A probe tries the node again at once (not after its backoff).
        let _ = redlock.nodes().probe(Duration::from_secs(1)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(records(&prefix).await[4]["members"].split(',').count(), 5);
    let lock = redlock.try_lock(&unique("agree-late"), TTL).await.unwrap();
    lock.release().await.unwrap();
}

/// An address the nodes know as another member than the one a client
/// reaches there (a port given to another server since: the test proxies'
/// ports are reused from test to test) is corrected by the next client
/// that reaches it, and that client is not refused for it. Before, the
/// stale entry stood for good, and a client that decided before that node
/// answered refused it as no member (`NotAMember`, not blank), failing the
/// CLI's build through proxies in CI.
#[tokio::test]
async fn an_address_known_as_another_member_is_corrected() {
    let prefix = prefix("agree-stale");
    let key = format!("{prefix}redquorum:deployment");
    let first = client(&node_urls(), &prefix).build().await.unwrap();
    drop(first);
    let held = records(&prefix).await;
    // (The client spells each address as its URL, as given.)
    let field = |i: usize| format!("seen:{}", node_urls()[i]);
    // Every node knows node 1's address as node 2's member, and node 2's
    // as node 1's.
    for mut conn in raw_all().await {
        let _: () = conn
            .hset_multiple(
                &key,
                &[(field(0), &held[1]["id"]), (field(1), &held[0]["id"])],
            )
            .await
            .unwrap();
    }
    let redlock = client(&node_urls(), &prefix).build().await.unwrap();
    let lock = redlock.try_lock(&unique("agree-stale"), TTL).await.unwrap();
    lock.release().await.unwrap();
    let corrected = || async {
        records(&prefix).await.iter().all(|hash| {
            hash.get(&field(0)) == Some(&held[0]["id"])
                && hash.get(&field(1)) == Some(&held[1]["id"])
        })
    };
    redquorum_test_support::checks::eventually(
        "every node knows nodes 1 and 2 by their own ids",
        Duration::from_secs(10),
        corrected,
    )
    .await;
}
