//! A program run as a process of its own (an example, the CLI), its
//! standard output read line by line and signals sent to it: what a test of
//! a paused or terminated process needs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::node_urls;

/// A running program (killed when dropped).
#[derive(Debug)]
pub struct Process {
    /// The process.
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Process {
    /// Starts `program` with the suite's nodes in `REDQUORUM_NODES`, and
    /// `env`.
    pub fn start(program: impl AsRef<Path>, env: &[(&str, &str)]) -> Process {
        let mut child = tokio::process::Command::new(program.as_ref())
            .env("REDQUORUM_NODES", node_urls().join(","))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.as_ref().display()));
        let stdout = child.stdout.take().expect("a piped stdout");
        Process {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line holding `part` (at most 10 s; a line is read as soon
    /// as the program writes it).
    pub async fn until(&mut self, part: &str) -> String {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let line = self.lines.next_line().await.unwrap().expect("output ended");
                if line.contains(part) {
                    return line;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no line with {part:?} within 10 s"))
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`…) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("a running process").to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }
}
