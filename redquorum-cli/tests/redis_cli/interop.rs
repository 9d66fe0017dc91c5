//! Interop keys: `redquorum` meets a foreign holder (another Redlock client)
//! of the same resource name.

use super::*;

/// Sets `key` to a foreign holder's value on every node (as an rslock,
/// node-redlock or redsync holder would), for `ttl_ms`.
async fn foreign_holder(key: &str, ttl_ms: u64) {
    for url in node_urls() {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let () = redis::cmd("SET")
            .arg(key)
            .arg("foreign-holder")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn interop_keys_meet_a_foreign_holder_of_the_resource_name() {
    let nodes = node_urls();
    let resource = unique("cli-interop");
    foreign_holder(&resource, 30_000).await;
    // Interop mode, by flag and by environment: the resource name is the
    // key, held elsewhere.
    let out = run(&nodes, &["--interop-keys", "exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("held elsewhere"), "{}", stderr(&out));
    let out = finish(
        redquorum(&nodes, &["exec", &resource, "--", "true"])
            .env("REDQUORUM_INTEROP_KEYS", "1")
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Without it (the negative control) the two never meet.
    let out = run(&nodes, &["exec", &resource, "--", "true"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A prefix names another key: free.
    let out = run(
        &nodes,
        &[
            "--interop-keys",
            "--key-prefix",
            "app:",
            "exec",
            &resource,
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(
        &nodes,
        &["--key-prefix", "{bad}", "exec", &resource, "--", "true"],
    )
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}
