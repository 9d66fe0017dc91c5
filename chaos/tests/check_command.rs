//! `redquorum-chaos check FILE`, the command `scripts/chaos check` runs: a
//! clean history exits 0, one with a second holder inside the first one's
//! validity exits 1 and names it, a file that cannot be read exits 2.
//!
//! (Building this test also builds the binary with the workspace's
//! features, so `scripts/test` hands it to `scripts/chaos` rather than
//! building it again: `REDQUORUM_CHAOS_BIN`.)

use std::path::PathBuf;
use std::process::{Command, Output};

fn check(name: &str, history: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("chaos-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, history).expect("the history written");
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum-chaos"))
        .arg("check")
        .arg(&path)
        .output()
        .expect("the checker runs");
    let _ = std::fs::remove_file(&path);
    // Empty once the last test's history is gone (another may still hold one).
    let _ = std::fs::remove_dir(&dir);
    out
}

#[test]
fn a_clean_history_exits_zero() {
    let out = check(
        "clean.log",
        "100 c1 grant id=a kind=plain res=x holder=a until=500\n\
         200 c1 end id=a\n\
         250 c2 grant id=b kind=plain res=x holder=b until=900\n",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("violations: 0"), "{report}");
}

#[test]
fn a_second_holder_exits_one_and_is_named() {
    let out = check(
        "overlap.log",
        "100 c1 grant id=a kind=plain res=x holder=a until=500\n\
         400 c2 grant id=b kind=plain res=x holder=b until=900\n",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("violations: 1"), "{report}");
}

#[test]
fn an_unreadable_history_exits_two() {
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum-chaos"))
        .args(["check", "/nonexistent/history.log"])
        .output()
        .expect("the checker runs");
    assert_eq!(out.status.code(), Some(2));
}
