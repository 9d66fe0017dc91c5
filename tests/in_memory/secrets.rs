//! No password in any output (docs/operations.md §5): for generated
//! passwords in every URL form the client accepts — user info (encoded or not, with the
//! reserved characters `#`, `/`, `?`, `@`, `:`), the `pass=` query of a Unix
//! socket URL, valid or broken — neither errors (`Display`, `Debug`), nor
//! `Builder`'s `Debug`, nor node names contain any part of it.

use proptest::prelude::*;
use redquorum::node::node_name;
use redquorum::{ConfigError, Redlock};

/// Passwords of 8 to 24 characters: rare upper-case letters (no three of
/// them in a row spell anything our output says, as "URL" or "TLS" would)
/// mixed with reserved characters.
fn password() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => prop::sample::select(vec!['J', 'K', 'Q', 'V', 'W', 'X', 'Y', 'Z']),
            1 => prop::sample::select(vec!['#', '/', '?', '@', ':', '%', '&', '=', '+', ' ']),
        ],
        8..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// `pw` percent-encoded as a URL's user info or query needs it.
fn encoded(pw: &str) -> String {
    let mut out = String::new();
    for c in pw.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push_str(&format!("%{:02X}", c as u32));
        }
    }
    out
}

/// Every URL shape for one password: what users write, right or wrong.
fn shapes(pw: &str) -> Vec<String> {
    let enc = encoded(pw);
    vec![
        format!("redis://:{enc}@127.0.0.1:7001"),
        format!("redis://user:{enc}@127.0.0.1:7001/2"),
        format!("redis://:{pw}@127.0.0.1:7001"),
        format!("redis://user:{pw}@127.0.0.1:7001/2"),
        format!("redis://{pw}@127.0.0.1:7001"),
        format!("rediss://:{enc}@host.example:6380/#insecure"),
        format!("valkey://:{enc}@127.0.0.1:7001"),
        format!("redis+unix:///run/redis.sock?pass={enc}&db=1"),
        format!("redis+unix:///run/redis.sock?user=u&pass={pw}"),
        format!("unix:///run/redis.sock?pass={enc}"),
        // Broken on purpose: no host, a bad port, a bad database, a bad
        // protocol, an unknown scheme.
        format!("redis://:{pw}@"),
        format!("redis://:{enc}@127.0.0.1:notaport"),
        format!("redis://:{enc}@127.0.0.1:7001/notadb"),
        format!("redis://:{enc}@127.0.0.1:7001/?protocol={enc}"),
        format!("http://:{enc}@127.0.0.1:7001"),
        format!("redis:/:{pw}@127.0.0.1:7001"),
        format!(":{pw}@127.0.0.1:7001"),
    ]
}

/// Panics if `output` shows three upper-case letters in a row of `pw`, in
/// the clear or percent-encoded.
fn assert_hidden(pw: &str, what: &str, output: &str) {
    let letters: Vec<char> = pw.chars().collect();
    for w in letters.windows(3) {
        if w.iter().all(|c| c.is_ascii_uppercase()) {
            let run: String = w.iter().collect();
            assert!(
                !output.contains(&run),
                "{what} shows {run:?} of the password {pw:?}: {output}"
            );
        }
    }
}

fn check(pw: &str, url: &str, error: &ConfigError) {
    assert_hidden(
        pw,
        &format!("Display of the error for {url:?}"),
        &error.to_string(),
    );
    assert_hidden(
        pw,
        &format!("Debug of the error for {url:?}"),
        &format!("{error:?}"),
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_password_in_any_output(pw in password()) {
        for url in shapes(&pw) {
            match node_name(&url) {
                Ok(name) => assert_hidden(&pw, &format!("node name of {url:?}"), &name),
                Err(e) => check(&pw, &url, &e),
            }
            let builder = Redlock::builder().nodes([url.as_str()]);
            assert_hidden(&pw, &format!("Builder Debug for {url:?}"), &format!("{builder:?}"));
        }
    }
}

/// `build` fails on a URL before connecting to anything: its error hides the
/// password too.
#[tokio::test]
async fn build_errors_hide_passwords() {
    let pw = "QWXZJK#ZXQ/VKJ?QZX";
    for url in shapes(pw) {
        if node_name(&url).is_ok() {
            continue; // would try to connect
        }
        let error = Redlock::builder()
            .nodes([url.as_str()])
            .build()
            .await
            .unwrap_err();
        check(pw, &url, &error);
    }
}

/// A client built on URLs with passwords (nodes down: built all the same)
/// shows none in its `Debug`, nor do the errors of its rounds.
#[tokio::test]
async fn a_client_and_its_errors_hide_passwords() {
    let pw = "QWXZJKZXQVKJ";
    let urls = [
        format!("redis://:{pw}@127.0.0.1:1"),
        format!("redis://user:{pw}@127.0.0.1:2/3"),
        format!("redis+unix:///nonexistent.sock?pass={pw}"),
    ];
    let redlock = Redlock::builder()
        .nodes(&urls)
        .retry(redquorum::Retry::none())
        .build()
        .await
        .expect("down nodes are no error");
    assert_hidden(pw, "Redlock Debug", &format!("{redlock:?}"));
    let names: Vec<&str> = redlock.nodes().iter().map(|node| node.name()).collect();
    assert_hidden(pw, "node names", &names.join(","));
    let error = redlock
        .try_lock("r", std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_hidden(pw, "a round's error", &format!("{error} {error:?}"));
}

/// The control: the checker sees a password that is shown.
#[test]
#[should_panic(expected = "shows")]
fn the_checker_catches_a_shown_password() {
    assert_hidden("QWERTY", "control", "redis://:QWERTY@h:1");
}
