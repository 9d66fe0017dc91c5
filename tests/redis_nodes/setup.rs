//! What a client is given and how it starts: bad input and a wrong password
//! are typed errors, one server under two names is refused, probes name every
//! node, `require_quorum` refuses a client without a quorum, and the
//! deprecated waiting option still waits.

use super::*;

/// Bad input is a typed error, never a panic, and nothing is sent.
#[tokio::test]
async fn bad_input_gives_typed_errors() {
    let urls = node_urls();
    let err = |r: Result<Redlock, ConfigError>| r.expect_err("expected an error");

    assert_eq!(
        err(Redlock::connect(Vec::<String>::new()).await),
        ConfigError::NoNodes
    );
    assert!(matches!(
        err(Redlock::connect(["redis://127.0.0.1:notaport"]).await),
        ConfigError::InvalidUrl { .. }
    ));
    assert!(matches!(
        err(Redlock::connect(["http://127.0.0.1:7001"]).await),
        ConfigError::InvalidUrl { .. }
    ));
    assert!(matches!(
        err(Redlock::connect([urls[0].as_str(), urls[0].as_str()]).await),
        ConfigError::DuplicateNode(_)
    ));
    let builder = || Redlock::builder().nodes(&urls);
    assert!(matches!(
        err(builder().drift_factor(f64::NAN).build().await),
        ConfigError::Input(InputError::InvalidDriftFactor(_))
    ));
    assert!(matches!(
        err(builder().drift_factor(1.0).build().await),
        ConfigError::Input(InputError::InvalidDriftFactor(_))
    ));
    assert_eq!(
        err(builder().node_timeout(Duration::ZERO).build().await),
        ConfigError::InvalidNodeTimeout
    );
    assert_eq!(
        err(builder().node_timeout(Duration::MAX).build().await),
        ConfigError::InvalidNodeTimeout
    );
    assert_eq!(
        err(builder().retry(Retry::new(3, Duration::MAX)).build().await),
        ConfigError::InvalidRetry
    );
    assert_eq!(
        err(builder().retry(Retry::new(0, Duration::ZERO)).build().await),
        ConfigError::InvalidRetry
    );

    let redlock = redlock().await;
    let config = |r: Result<redquorum::Lock, LockError>| match r {
        Err(LockError::Input(c)) => c,
        other => panic!("expected a config error, got {other:?}"),
    };
    assert_eq!(
        config(redlock.try_lock("", Duration::from_secs(1)).await),
        InputError::EmptyResource
    );
    assert!(matches!(
        config(redlock.try_lock("r", Duration::ZERO).await),
        InputError::InvalidTtl(_)
    ));
    assert!(matches!(
        config(redlock.try_lock("r", Duration::from_micros(999)).await),
        InputError::InvalidTtl(_)
    ));
    assert!(matches!(
        config(redlock.lock("r", Duration::MAX).await),
        InputError::InvalidTtl(_)
    ));
    assert!(matches!(
        config(
            redlock
                .lock_with(
                    "r",
                    Duration::from_millis(2),
                    &redquorum::LockOptions::new().wait(Duration::MAX)
                )
                .await
        ),
        InputError::TtlNotAboveDrift { .. }
    ));
    // Odd but valid names work. (Waiting, with a TTL well above the node
    // timeout: CI once found four links reconnecting at the first try, on
    // a starved host, and this test is not about timing.)
    let patiently = redquorum::LockOptions::new().wait(Duration::from_secs(20));
    for name in ["}", "{", "a b\0c", "ключ", "*"] {
        redlock
            .lock_with(name, Duration::from_secs(10), &patiently)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
}

/// Wrong credentials are a `ConfigError::Auth` at build time.
#[tokio::test]
async fn wrong_password_is_an_auth_error() {
    let user = support::acl::AclUser::create("rq", &["on", ">right-password", "~*", "+@all"]).await;
    let wrong = &user.urls("wrong-password")[0];
    let right = &user.urls("right-password")[0];
    let result = Redlock::connect([wrong.as_str()]).await;
    // One node of the five: a deployment of its own (docs/agreement.md).
    let ok = Redlock::builder()
        .nodes([right.as_str()])
        .key_prefix(&format!("{}:", unique("one-node")))
        .build()
        .await;
    drop(user);

    match result {
        Err(ConfigError::Auth { node, message }) => {
            assert!(!node.contains("wrong-password"), "password leaked: {node}");
            assert!(!message.is_empty());
        }
        other => panic!("expected Auth, got {other:?}"),
    }
    let rl = ok.expect("right password connects");
    assert_eq!(rl.nodes().quorum(), 1);
}

/// One server under two names would vote twice: refused at connect, naming
/// both (docs/design.md §11, "One server, one vote").
#[tokio::test]
async fn one_server_under_two_names_is_refused() {
    let urls = node_urls();
    // Another database of node 1: another name, the same server.
    let alias = format!("{}/1", urls[0]);
    let err = Redlock::builder()
        .nodes([&urls[0], &urls[1], &alias])
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    match err {
        ConfigError::SameServer { first, second } => {
            let mut names = [first, second];
            names.sort();
            assert_eq!(names, [urls[0].clone(), alias], "{names:?}");
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
    // Three distinct servers are fine (three of the five: a deployment of
    // their own, docs/agreement.md).
    let _distinct = Redlock::builder()
        .nodes(&urls[..3])
        .key_prefix(&format!("{}:", unique("three-nodes")))
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("distinct servers");
}

/// Readiness on demand: every node reachable, with its latency and server.
#[tokio::test]
async fn probe_reports_every_node_with_its_server() {
    let redlock = redlock().await;
    let health = redlock.nodes().probe(Duration::from_secs(2)).await;
    assert_eq!(health.len(), 5);
    for (h, url) in health.iter().zip(node_urls()) {
        assert_eq!(h.node, url);
        assert!(h.is_reachable(), "{h:?}");
        let server = h.server.as_deref().unwrap_or_default();
        assert!(
            server.starts_with("redis ") || server.starts_with("valkey "),
            "{h:?}"
        );
    }
}

/// `require_quorum`: a client without a quorum of reachable nodes is a
/// typed error at build, naming the nodes that did not answer; with one it
/// builds.
#[tokio::test]
async fn require_quorum_refuses_a_client_without_a_quorum() {
    let urls = node_urls();
    // Nothing listens on ports 1-3.
    let mixed = [
        urls[0].clone(),
        urls[1].clone(),
        "redis://127.0.0.1:1".to_owned(),
        "redis://127.0.0.1:2".to_owned(),
        "redis://127.0.0.1:3".to_owned(),
    ];
    let err = Redlock::builder()
        .nodes(&mixed)
        .require_quorum(true)
        .build()
        .await
        .unwrap_err();
    match err {
        ConfigError::TooFewNodes {
            reachable,
            nodes,
            quorum,
            detail,
        } => {
            assert_eq!((reachable, nodes, quorum), (2, 5, 3));
            assert!(detail.contains("127.0.0.1:1"), "{detail}");
        }
        other => panic!("expected TooFewNodes, got {other:?}"),
    }
    let redlock = Redlock::builder()
        .nodes(&urls)
        .require_quorum(true)
        .build()
        .await
        .expect("a quorum is reachable");
    assert!(
        redlock
            .nodes()
            .probe(Duration::from_secs(2))
            .await
            .iter()
            .all(|h| h.is_reachable())
    );
}
