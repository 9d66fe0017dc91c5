//! Fencing tokens and election terms across restarts that forget.

use super::*;

/// Waits (at most 20 s) until `redlock` counts every node: no quarantine.
async fn until_counted(redlock: &Redlock) {
    let counted = |health: &[redquorum::NodeHealth]| {
        health
            .iter()
            .all(|h| h.is_reachable() && h.quarantined_for.is_none())
    };
    until_health(
        redlock,
        Duration::from_secs(20),
        "every node counted",
        counted,
    )
    .await;
}

/// Fencing tokens and election terms across restarts that forget, with no
/// lock taken between them: every node restarted empty and bare one after
/// another, then all five at once. Each later token and term is larger
/// than every earlier one: a counter is floored at its node's clock in
/// microseconds, so a node that lost it starts again above every token its
/// clock has seen pass (docs/fencing.md, "Restarts"). An outside review saw
/// 2 of 7 tokens and 2 of 7 terms go back in a rolling restart, and term 1
/// after term 5 when all five restarted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_terms_never_go_back_across_empty_restarts() {
    let _turn = TURN.lock().await;
    let mut bare = Bare(Vec::new());
    let resource = unique("restarts-tokens");
    let max_ttl = Duration::from_secs(2);
    let client = || untrusting(max_ttl).build();
    let draw = |redlock: Redlock| {
        let resource = resource.clone();
        async move {
            until_counted(&redlock).await;
            let lock = redlock
                .lock_with(&resource, max_ttl, &redquorum::LockOptions::new().fenced())
                .await
                .unwrap();
            let token = lock.fence().unwrap();
            lock.release().await.unwrap();
            let election =
                redquorum::election::Election::new(&redlock, &format!("{resource}:election"))
                    .unwrap();
            let leadership = election.campaign(max_ttl).await.unwrap();
            let term = leadership.term();
            leadership.resign().await.unwrap();
            (token, term)
        }
    };
    let mut seen = vec![draw(client().await.unwrap()).await];
    // Quiet rolling: one node after another, nothing taken between.
    for node in 1..=5 {
        tokio::task::block_in_place(|| bare.restart(node));
    }
    seen.push(draw(client().await.unwrap()).await);
    // All five at once.
    tokio::task::block_in_place(|| {
        for node in 1..=5 {
            nodes_script(&["bare-restart", &node.to_string()]);
        }
    });
    seen.push(draw(client().await.unwrap()).await);
    eprintln!("(token, term) after each restart: {seen:?}");
    for pair in seen.windows(2) {
        assert!(pair[1].0 > pair[0].0, "a token went back: {seen:?}");
        assert!(pair[1].1 > pair[0].1, "a term went back: {seen:?}");
    }
}
