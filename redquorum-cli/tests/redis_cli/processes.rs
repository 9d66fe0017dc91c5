//! The command's processes: a killed `redquorum` takes its command with it, and
//! processes left in the group are stopped before the release.

use super::*;

/// Whether `pid` is gone or a zombie (dead, not yet reaped).
fn dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_redquorum_takes_the_command_with_it() {
    let nodes = node_urls();
    let resource = unique("cli-pdeath");
    let dir = scratch("pdeath");
    let pidfile = dir.join("pid");
    let mut child = redquorum(
        &nodes,
        &[
            "exec",
            "--ttl",
            "5s",
            &resource,
            "--",
            "sh",
            "-c",
            "echo $$ > \"$PIDFILE.tmp\"; mv \"$PIDFILE.tmp\" \"$PIDFILE\"; exec sleep 20",
        ],
    )
    .env("PIDFILE", &pidfile)
    .spawn()
    .unwrap();
    wait_for_file(&pidfile, Duration::from_secs(5)).await;
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    assert!(!dead(&pid));
    // SIGKILL: redquorum gets no chance to stop the command itself.
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let start = Instant::now();
    while !dead(&pid) {
        if start.elapsed() > Duration::from_secs(2) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
            panic!("the command outlived a SIGKILLed redquorum");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_left_in_the_group_are_stopped_before_the_release() {
    let nodes = node_urls();
    let resource = unique("cli-leftover");
    let dir = scratch("leftover");
    let late = dir.join("late");
    let start = Instant::now();
    // The command exits at once, leaving a background job that would write
    // `late` after the lock is released.
    let out = run(
        &nodes,
        &[
            "exec",
            "--grace",
            "1s",
            &resource,
            "--",
            "sh",
            "-c",
            &format!("(sleep 3; touch '{}') & exit 0", late.display()),
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status(&nodes, &resource).await["verdict"], "FREE");
    tokio::time::sleep_until(start + Duration::from_secs(4)).await;
    assert!(!late.exists(), "a process of the command outlived the lock");
    let _ = std::fs::remove_dir_all(dir);
}
