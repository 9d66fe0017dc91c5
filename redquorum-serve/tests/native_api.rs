//! redquorum's own API (`redquorum.v1.Locks`, and `/v1/locks/` over
//! HTTP/JSON), on in-memory nodes: waiting acquires, fencing tokens,
//! extensions, kept-alive leases, releases, inspections, typed failures.

mod support;

use std::time::Duration;

use redquorum_serve::Limits;
use redquorum_serve::grpc::v1;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_and_inspect_over_grpc() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;

    let first = v1::AcquireRequest {
        fenced: true,
        label: "worker-1".into(),
        ..acquire("ledger")
    };
    let grant = locks.acquire(first.clone()).await.unwrap().into_inner();
    assert!(
        grant.valid_for_ms > 9_000 && grant.valid_for_ms <= 10_000,
        "{grant:?}"
    );
    let fence = grant.fence.expect("a fenced grant has a fence");

    let seen = locks
        .inspect(v1::InspectRequest {
            resource: "ledger".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((seen.verdict.as_str(), seen.quorum), ("held", 3));
    assert_eq!(seen.label.as_deref(), Some("worker-1"));
    assert_eq!(seen.fence, Some(fence));
    assert!(seen.nodes.iter().all(|n| grant.token.starts_with(&n.holder)
        && n.holder.len() == 8
        && n.time_left_ms.is_some()));

    // Taken: a typed failure with every node's answer.
    let e = locks.acquire(acquire("ledger")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Aborted);
    let why = failure(&e);
    assert_eq!(
        (why.kind.as_str(), why.nodes.len()),
        ("taken", 5),
        "{why:?}"
    );

    let extended = locks
        .extend(v1::ExtendRequest {
            resource: "ledger".into(),
            token: grant.token.clone(),
            ttl_ms: 30_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(extended.valid_for_ms > 20_000, "{extended:?}");
    assert_eq!(extended.fence, Some(fence));

    let released = locks
        .release(v1::ReleaseRequest {
            resource: "ledger".into(),
            token: grant.token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((released.released_on, released.nodes), (5, 5));
    let again = locks.acquire(first).await.unwrap().into_inner();
    assert!(
        again.fence.unwrap() > fence,
        "fences grow: {fence} then {:?}",
        again.fence
    );

    // An extension of a released lock: not here any more.
    let e = locks
        .extend(v1::ExtendRequest {
            resource: "ledger".into(),
            token: grant.token,
            ttl_ms: 1000,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), failure(&e).kind.as_str()),
        (tonic::Code::NotFound, "not_found")
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_waits_for_a_release_or_times_out() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let held = locks.acquire(acquire("queue")).await.unwrap().into_inner();

    let e = locks
        .acquire(v1::AcquireRequest {
            wait_ms: 200,
            ..acquire("queue")
        })
        .await
        .unwrap_err();
    let why = failure(&e);
    assert_eq!(
        (e.code(), why.kind.as_str()),
        (tonic::Code::DeadlineExceeded, "timeout"),
        "{why:?}"
    );

    let mut waiter = locks.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(v1::AcquireRequest {
                wait_ms: 30_000,
                ..acquire("queue")
            })
            .await
    });
    // Released once the waiter stands in line (fair waiting wakes it).
    nodes[0]
        .wait_until(|n| n.waiting("{queue}:lock:line") > 0)
        .await;
    locks
        .release(v1::ReleaseRequest {
            resource: "queue".into(),
            token: held.token,
            ..Default::default()
        })
        .await
        .unwrap();
    let grant = waiting
        .await
        .unwrap()
        .expect("granted after the release")
        .into_inner();
    assert_eq!(grant.resource, "queue");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lives_as_long_as_its_stream() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let request = v1::AcquireRequest {
        ttl_ms: 300,
        ..acquire("leader")
    };
    let mut events = locks.keep_alive(request).await.unwrap().into_inner();
    let first = events.message().await.unwrap().expect("a first event");
    let Some(v1::lease_event::Event::Granted(grant)) = first.event else {
        panic!("{first:?}")
    };
    // Kept well past its TTL of 300 ms.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        nodes
            .iter()
            .all(|n| n.holder("{leader}:lock").as_deref() == Some(grant.token.as_str()))
    );
    // The caller closes the stream: released.
    drop(events);
    for node in &nodes {
        node.wait_until(|n| n.holder("{leader}:lock").is_none())
            .await;
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_leases_and_leaves_acquired_locks() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let kept = locks.acquire(acquire("kept")).await.unwrap().into_inner();
    let mut events = locks
        .keep_alive(acquire("leased"))
        .await
        .unwrap()
        .into_inner();
    events.message().await.unwrap().expect("granted");
    let stopping = tokio::spawn(running.shutdown());
    let last = events.message().await.unwrap().expect("why it ended");
    assert!(
        matches!(&last.event, Some(v1::lease_event::Event::Lost(why)) if why.contains("shutting down")),
        "{last:?}"
    );
    drop(events);
    stopping.await.unwrap();
    assert!(
        nodes
            .iter()
            .all(|n| n.holder("{kept}:lock").as_deref() == Some(kept.token.as_str()))
    );
    assert!(nodes.iter().all(|n| n.holder("{leased}:lock").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_calls_over_http_json() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let addr = running.http_addr();
    let (status, body) = http(
        addr,
        "POST",
        "/v1/locks/acquire",
        r#"{"resource":"r","ttlMs":5000,"fenced":true}"#,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let grant: serde_json::Value = serde_json::from_str(&body).unwrap();
    let token = grant["token"].as_str().unwrap().to_owned();
    assert!(grant["fence"].as_u64().is_some(), "{body}");

    let (status, body) = http(
        addr,
        "POST",
        "/v1/locks/acquire",
        r#"{"resource":"r","ttlMs":5000}"#,
        &[],
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["kind"], "taken", "{body}");
    assert_eq!(
        error["error"]["nodes"].as_array().unwrap().len(),
        5,
        "{body}"
    );

    for bad in [
        r#"{"resource":"","ttlMs":5000}"#,
        r#"{"resource":"r","ttlMs":0}"#,
        r#"{"resource":"r","ttlMs":600000}"#,
        r#"{"resource":"r","ttlMs":5000,"waitMs":3600000}"#,
        r#"{"resource":"r","ttlMs":5000,"colour":"red"}"#,
        r#"{"resource":"r","ttlMs":"5000"}"#,
    ] {
        let (status, body) = http(addr, "POST", "/v1/locks/acquire", bad, &[]).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.contains(r#""kind":"invalid_argument""#),
            "{bad}: {body}"
        );
    }

    let body = format!(r#"{{"resource":"r","token":"{token}","ttlMs":20000}}"#);
    let (status, answer) = http(addr, "POST", "/v1/locks/extend", &body, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = http(
        addr,
        "POST",
        "/v1/locks/inspect",
        r#"{"resource":"r"}"#,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""verdict":"held""#), "{answer}");
    let body = format!(r#"{{"resource":"r","token":"{token}"}}"#);
    let (status, answer) = http(addr, "POST", "/v1/locks/release", &body, &[]).await;
    assert_eq!(
        (status, answer.as_str()),
        (200, r#"{"releasedOn":5,"nodes":5}"#)
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_and_read_write_sides() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;

    let permit = |label: &str| v1::AcquireRequest {
        permits: 2,
        label: label.into(),
        ..acquire("api")
    };
    let a = locks.acquire(permit("a")).await.unwrap().into_inner();
    locks.acquire(permit("b")).await.unwrap();
    let e = locks.acquire(permit("c")).await.unwrap_err();
    assert_eq!(failure(&e).kind, "taken", "two permits of two held");
    let released = locks
        .release(v1::ReleaseRequest {
            resource: "api".into(),
            token: a.token,
            permits: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(released.released_on, 5);
    locks.acquire(permit("c")).await.unwrap();

    let side = |mode: v1::Mode| v1::AcquireRequest {
        mode: mode as i32,
        ..acquire("catalog")
    };
    let r1 = locks
        .acquire(side(v1::Mode::Read))
        .await
        .unwrap()
        .into_inner();
    let r2 = locks
        .acquire(side(v1::Mode::Read))
        .await
        .unwrap()
        .into_inner();
    let e = locks.acquire(side(v1::Mode::Write)).await.unwrap_err();
    assert_eq!(failure(&e).kind, "taken", "a writer while two read");
    for token in [r1.token, r2.token] {
        let release = v1::ReleaseRequest {
            resource: "catalog".into(),
            token,
            mode: v1::Mode::Read as i32,
            ..Default::default()
        };
        locks.release(release).await.unwrap();
    }
    let w = locks
        .acquire(side(v1::Mode::Write))
        .await
        .unwrap()
        .into_inner();
    let e = locks.acquire(side(v1::Mode::Read)).await.unwrap_err();
    assert_eq!(failure(&e).kind, "taken", "a reader while one writes");
    // An extension through the instance works for either kind.
    let extend = v1::ExtendRequest {
        resource: "catalog".into(),
        token: w.token,
        ttl_ms: 20_000,
    };
    assert!(
        locks
            .extend(extend)
            .await
            .unwrap()
            .into_inner()
            .valid_for_ms
            > 15_000
    );

    for bad in [
        v1::AcquireRequest {
            permits: 2,
            fenced: true,
            ..acquire("x")
        },
        v1::AcquireRequest {
            permits: 2,
            mode: v1::Mode::Read as i32,
            ..acquire("x")
        },
        v1::AcquireRequest {
            mode: 7,
            ..acquire("x")
        },
    ] {
        let e = locks.acquire(bad.clone()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}");
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_leads_while_its_stream_is_open_and_observers_see_each_term() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let mut observed = locks
        .observe(v1::ObserveRequest {
            election: "scheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(observed.message().await.unwrap().unwrap().state, "vacant");

    let campaign = |label: &str, wait_ms: u64| v1::CampaignRequest {
        election: "scheduler".into(),
        ttl_ms: 2_000,
        wait_ms,
        label: label.into(),
    };
    let mut first = locks
        .campaign(campaign("one", 0))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::lease_event::Event::Granted(one)) = first.message().await.unwrap().unwrap().event
    else {
        panic!("no leadership")
    };
    let seen = observed.message().await.unwrap().unwrap();
    assert_eq!(
        (seen.state.as_str(), seen.term, seen.label.as_deref()),
        ("leading", one.fence, Some("one"))
    );
    let e = locks.campaign(campaign("two", 0)).await.unwrap_err();
    assert_eq!(failure(&e).kind, "taken");

    // A second candidate waits; the first stream's end resigns.
    let mut candidate = locks.clone();
    let second = tokio::spawn(async move { candidate.campaign(campaign("two", 30_000)).await });
    nodes[0]
        .wait_until(|n| n.waiting("{scheduler}:lock:line") > 0)
        .await;
    drop(first);
    let mut second = second.await.unwrap().unwrap().into_inner();
    let Some(v1::lease_event::Event::Granted(two)) = second.message().await.unwrap().unwrap().event
    else {
        panic!("no leadership")
    };
    assert!(
        two.fence > one.fence,
        "terms grow: {:?} then {:?}",
        one.fence,
        two.fence
    );
    // The observer sees the new term (perhaps after a vacancy).
    loop {
        let seen = observed.message().await.unwrap().unwrap();
        if seen.state == "leading" {
            assert_eq!((seen.term, seen.label.as_deref()), (two.fence, Some("two")));
            break;
        }
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_as_bad_input_leaves_the_lock_to_extend() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let grant = locks.acquire(acquire("a")).await.unwrap().into_inner();
    let extend = v1::ExtendRequest {
        resource: "a".into(),
        token: grant.token.clone(),
        ttl_ms: 20_000,
    };
    // Bad input: refused, nothing released, and the lock still this
    // instance's to extend.
    let e = locks
        .release(v1::ReleaseRequest {
            resource: "a".into(),
            token: grant.token.clone(),
            mode: 7,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(nodes.iter().all(|n| n.holder("{a}:lock").is_some()));
    locks
        .extend(extend.clone())
        .await
        .expect("still extendable");
    let release = v1::ReleaseRequest {
        resource: "a".into(),
        token: grant.token.clone(),
        ..Default::default()
    };
    // A release of another kind (a semaphore's) releases nothing: the
    // lock stays this instance's to extend.
    let other_kind = locks
        .release(v1::ReleaseRequest {
            permits: 3,
            ..release.clone()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(other_kind.released_on, 0);
    locks
        .extend(extend.clone())
        .await
        .expect("still extendable");
    let released = locks.release(release).await.unwrap().into_inner();
    assert_eq!((released.released_on, released.nodes), (5, 5));
    let e = locks.extend(extend).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "forgotten once released");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_in_dapr_owners_namespace_is_refused() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    let e = locks
        .acquire(v1::AcquireRequest {
            label: "dapr:alice".into(),
            ..acquire("a")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(failure(&e).message.contains("dapr:"), "{e:?}");
    assert!(nodes.iter().all(|n| n.holder("{a}:lock").is_none()));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_acquires_that_wait() {
    let nodes = nodes();
    let running = serve(&nodes, Limits::default(), None).await;
    let mut locks = client(&running).await;
    locks.acquire(acquire("a")).await.expect("the holder");
    let patient = v1::AcquireRequest {
        wait_ms: 600_000,
        ..acquire("a")
    };
    let waiting = tokio::spawn(async move { locks.acquire(patient).await });
    // Bounded only so that a regression fails instead of hanging.
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        // Under way once it stands in the resource's line on the nodes.
        while nodes[0].waiting("{a}:lock:line") == 0 {
            tokio::task::yield_now().await;
        }
        running.shutdown().await;
        waiting.await.expect("joined")
    })
    .await
    .expect("the shutdown does not wait out the acquire (up to 15 min)");
    let e = ended.unwrap_err();
    assert_eq!(failure(&e).kind, "shutting_down", "{e:?}");
    assert!(
        nodes.iter().all(|n| n.holder("{a}:lock").is_some()),
        "the holder's lock stays its own"
    );
}
