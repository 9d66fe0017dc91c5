//! Running the `redquorum` binary from a test: on the real nodes, output
//! captured, every run bounded.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

pub const BIN: &str = env!("CARGO_BIN_EXE_redquorum");
/// No single CLI run in these tests may take longer.
pub const BOUND: Duration = Duration::from_secs(30);

/// `redquorum ARGS…` on the real nodes (via `--nodes`), stdout and stderr
/// captured; killed if the test ends first. Unless ARGS set one, the node
/// timeout is a patient 1 s (capped by the TTL's validity as always): a
/// freshly started debug binary on a loaded machine may not hear any node
/// within the 50 ms default, and these tests are not about that.
pub fn redquorum(nodes: &[String], args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.arg("--nodes").arg(nodes.join(","));
    if !args.contains(&"--node-timeout") {
        command.args(["--node-timeout", "1s"]);
    }
    command
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

pub async fn finish(child: Child) -> Output {
    tokio::time::timeout(BOUND, child.wait_with_output())
        .await
        .expect("redquorum did not finish in time")
        .expect("wait for redquorum")
}

pub async fn run(nodes: &[String], args: &[&str]) -> Output {
    finish(redquorum(nodes, args).spawn().expect("spawn redquorum")).await
}

pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "redquorum died of a signal: {:?}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redquorum-cli-{name}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

pub async fn wait_for_file(path: &Path, bound: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < bound,
            "{} did not appear within {bound:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `redquorum status --json RESOURCE` parsed.
pub async fn status(nodes: &[String], resource: &str) -> serde_json::Value {
    let out = run(nodes, &["status", "--json", "--show-token", resource]).await;
    assert_eq!(code(&out), 0, "status failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}
