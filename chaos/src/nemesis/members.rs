//! The `members` fault: node 5 replaced by a new server (node 5's second
//! database, a keyspace no member knows) while the clients run, and the
//! clients switching to the new list at different times
//! (docs/agreement.md §5).
//!
//! Declared (the honest run), the change goes through joint quorums and the
//! clients switch once it is declared, some during it and some after. Not
//! declared (the `members-unguarded` control), half the clients switch at
//! once, each counting its own list's majority: with nodes frozen, a
//! holder on the old list and one on the new overlap, and the checker must
//! say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redquorum::{MemberChange, Redlock};

use super::Nemesis;

/// The fault's name.
pub const MEMBERS: &str = "members";

/// The file the clients watch: the new list, once they may switch.
pub fn switch_file(dir: &Path) -> PathBuf {
    dir.join("switch")
}

/// The list with node 5 replaced: its second database.
pub fn replaced(urls: &[String]) -> Vec<String> {
    let mut urls = urls.to_vec();
    if let Some(last) = urls.last_mut() {
        *last = format!("{last}/1");
    }
    urls
}

/// How many times a declaration is tried (a node of the new list frozen
/// refuses it), and the pause between.
const TRIES: u32 = 20;
const PAUSE: Duration = Duration::from_millis(500);

impl Nemesis {
    /// The change: declared and finished where `declare`, else only the
    /// switch file written.
    pub(super) async fn members(&self, declare: bool) {
        self.log(MEMBERS, "5", "begin");
        let switch = |note: &str| {
            let via: Vec<String> = self.proxies.iter().map(|p| p.url()).collect();
            let written = std::fs::write(&self.switch, replaced(&via).join(","));
            if let Err(e) = written {
                eprintln!("chaos: writing {}: {e}", self.switch.display());
            }
            self.rec.record("note", &[("text", note.into())]);
        };
        if !declare {
            switch("members-switch-undeclared");
            self.log(MEMBERS, "5", "end");
            return;
        }
        let builder = |urls: &[String]| Redlock::builder().nodes(urls).key_prefix("chaos:");
        let mut declared = None;
        for _ in 0..TRIES {
            match MemberChange::declare(builder(&self.urls), builder(&replaced(&self.urls))).await {
                Ok(change) => {
                    declared = Some(change);
                    break;
                }
                Err(e) => {
                    eprintln!("chaos: declaring the change of members: {e}; again");
                    tokio::time::sleep(PAUSE).await;
                }
            }
        }
        let Some(change) = declared else {
            self.rec
                .record("note", &[("text", "members-not-declared".into())]);
            self.log(MEMBERS, "5", "end");
            return;
        };
        let record = change.record();
        self.rec.record(
            "note",
            &[
                ("text", "members-declared".into()),
                ("epoch", record.epoch().to_string()),
                ("wait_ms", change.ends_in().as_millis().to_string()),
            ],
        );
        switch("members-switch");
        match change.finish().await {
            Ok(done) => self.rec.record(
                "note",
                &[
                    ("text", "members-done".into()),
                    ("set", done.fingerprint()),
                    ("epoch", done.epoch().to_string()),
                ],
            ),
            Err(e) => eprintln!("chaos: finishing the change of members: {e}"),
        }
        self.log(MEMBERS, "5", "end");
    }
}
