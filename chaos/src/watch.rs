//! Watching a run's history as it is written: a negative control caught
//! so far, the grants reached, every fault begun — read from the lines
//! appended since the last look.

use std::path::Path;
use std::time::Duration;

use redquorum_chaos::check::check;
use redquorum_chaos::history::Line;

use crate::meant;

/// Resolves once a negative control's history so far shows the violation
/// it is meant to cause, so that a control ends when caught rather than at
/// its time limit; never for a run that is not a control. The history is
/// checked up to two seconds before its newest line: every event before that
/// has been written (each process writes a line as it happens), so a hold
/// released before a rival's grant is not mistaken for one still held. The
/// verdict is still the final check's, on the whole history.
pub(crate) async fn caught_so_far(history: &Path, control: Option<&str>) {
    const SETTLED: u64 = 2_000_000_000;
    let Some(control) = control else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(text) = std::fs::read_to_string(history) else {
            continue;
        };
        let lines: Vec<Line> = text.lines().filter_map(Line::parse).collect();
        let Some(newest) = lines.iter().map(|l| l.t).max() else {
            continue;
        };
        let horizon = newest.saturating_sub(SETTLED);
        let report = check(lines.into_iter().filter(|l| l.t < horizon));
        if report.violations.iter().any(|v| meant(control, v)) {
            println!("chaos: negative control {control} caught so far: ending the run");
            return;
        }
    }
}

/// Resolves once the history holds `want` grants; never without `want`.
pub(crate) async fn grants_reached(history: &Path, want: Option<u64>) {
    let Some(want) = want else {
        return std::future::pending().await;
    };
    let mut tail = Tail::new(history);
    let mut grants = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        grants += tail.next().await.matches(" grant ").count() as u64;
        if grants >= want {
            return;
        }
    }
}

/// Resolves once every fault of `faults` has begun at least once (its
/// `fault ... phase=begin` line is in the history), as the final check
/// counts them.
pub(crate) async fn faults_begun(history: &Path, faults: &[String]) {
    let mut waiting: std::collections::BTreeSet<&str> = faults.iter().map(String::as_str).collect();
    let mut tail = Tail::new(history);
    while !waiting.is_empty() {
        for line in tail.next().await.lines().filter_map(Line::parse) {
            if line.event == "fault"
                && line.get("phase") == Some("begin")
                && let Some(name) = line.get("name")
            {
                waiting.remove(name);
            }
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The whole lines appended to a history since the last look: only those
/// are read (the history of a long run is tens of MB). Lines are whole (one
/// write(2) each), but a read may end inside one: its start is read again
/// next time.
struct Tail<'a> {
    path: &'a Path,
    offset: u64,
}

impl<'a> Tail<'a> {
    fn new(path: &'a Path) -> Self {
        Tail { path, offset: 0 }
    }

    /// The whole lines appended since the last call (none if the file
    /// cannot be read yet).
    async fn next(&mut self) -> String {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let read = async {
            let mut file = tokio::fs::File::open(self.path).await?;
            file.seek(std::io::SeekFrom::Start(self.offset)).await?;
            let mut new = Vec::new();
            file.read_to_end(&mut new).await?;
            std::io::Result::Ok(new)
        };
        let Ok(new) = read.await else {
            return String::new();
        };
        let whole = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        String::from_utf8_lossy(&new[..whole]).into_owned()
    }
}
