//! What the nemesis does around restarts: nodes made durable before a
//! fault that switches their AOF off, their dataset marks read (and
//! forged), how long the clients quarantine a restart, and whether a
//! release cut on its way was sent again.

use super::*;

impl Nemesis {
    /// Nodes `nodes` persisting every write, before a fault that switches
    /// their AOF off: each left without persistence by `bare` or `rolling`
    /// is killed and started (`scripts/nodes start` brings it back with AOF
    /// on, `appendfsync always`; `note made_durable=N`), and the fault
    /// goes on once the clients' quarantine of those restarts ends.
    pub(super) async fn make_durable(&self, nodes: &[usize]) {
        let mut back = Vec::new();
        for &n in nodes {
            let info: Option<String> = self.query(n, redis::cmd("INFO").arg("persistence")).await;
            let aof = info
                .as_deref()
                .and_then(|i| redquorum::internals::restart::info_field(i, "aof_enabled"));
            if aof != Some("0") {
                continue;
            }
            self.rec.record("note", &[("made_durable", n.to_string())]);
            let ns = n.to_string();
            self.nodes(&["kill", &ns]).await;
            self.nodes(&["start", &ns]).await;
            back.push((n, Instant::now()));
        }
        let mut until = Instant::now();
        for (n, at) in back {
            until = until.max(self.quarantine_until("made-durable", n, at).await);
        }
        tokio::time::sleep_until(until).await;
    }

    /// The `since` of node `n`'s dataset mark (ms on its clock), if it has one.
    pub(super) async fn mark_since(&self, n: usize) -> Option<u64> {
        let since: Option<String> = self
            .query(n, redis::cmd("HGET").arg(MARK).arg("since"))
            .await?;
        since?.parse().ok()
    }

    /// Writes node `n`'s dataset mark as the first stamp of its new process
    /// writes it where the dataset was kept: this process, now, and the
    /// `since` of the dataset before the restart. Only the `trust-aof-off`
    /// control does this: the mark then hides that AOF was switched off
    /// while a lock was held (docs/guarantees.md, "Recorded chaos runs").
    pub(super) async fn forge_mark(&self, n: usize, since: u64) {
        let Some((run, now)) = self.process_and_clock(n).await else {
            eprintln!("nemesis: node {n}: no run_id or clock to write the mark with");
            return;
        };
        let set = redis::cmd("HSET")
            .arg(MARK)
            .arg("run")
            .arg(&run)
            .arg("at")
            .arg(now)
            .arg("since")
            .arg(since)
            .clone();
        let ok = self.command(n, set).await;
        self.rec.record(
            "note",
            &[
                ("forged_mark", n.to_string()),
                ("since_ms_ago", now.saturating_sub(since).to_string()),
                ("ok", u8::from(ok).to_string()),
            ],
        );
    }

    /// Until when the clients keep node `n` quarantined after `fault`
    /// restarted it (its script returned at `back`, when the new process
    /// had started), recorded in the history (`note restart=N
    /// quarantine_ms=…`, the quarantine counted from `back`): the nemesis
    /// counts the node faulted until then.
    ///
    /// Clients that do not trust durable restarts quarantine every restart
    /// for [`quarantine`](Self::quarantine) from its start. Clients that do
    /// decide from the dataset mark, whose first stamp in the new process
    /// (by the first client to reconnect) fixes `since` for all of them:
    /// this waits for that stamp and reads the mark as they do — the
    /// dataset has been continuous for `TIME − since`, and the node is
    /// quarantined until that reaches the quarantine (with its slack of a
    /// second, [`redquorum::internals::restart::SECOND_CUT`]). A stamp period more
    /// in every case: a client that stamped first and was told of a
    /// dataset vouched for later (`stamp.lua`) learns it at its next
    /// stamp. No stamp within the quarantine (no client connected): the
    /// whole quarantine.
    pub(super) async fn quarantine_until(&self, fault: &str, n: usize, back: Instant) -> Instant {
        let full = back + self.quarantine;
        let note = |by: &str, left: Duration| {
            self.rec.record(
                "note",
                &[
                    ("restart", n.to_string()),
                    ("fault", fault.into()),
                    ("quarantine_ms", left.as_millis().to_string()),
                    ("by", by.into()),
                ],
            );
        };
        if self.quarantine_off {
            // The clients quarantine nothing (the quarantine-off control):
            // the node is held as long as it would have been, as before.
            note("off", Duration::ZERO);
            return full;
        }
        if !self.trust_durable {
            note("untrusted", self.quarantine);
            return full;
        }
        let Some((run, _)) = self.process_and_clock(n).await else {
            note("unread", self.quarantine);
            return full;
        };
        let mut ask = redis::pipe();
        ask.cmd("HMGET")
            .arg(MARK)
            .arg("run")
            .arg("since")
            .cmd("TIME");
        let connect = async {
            let client = redis::Client::open(self.urls[n - 1].as_str())?;
            client.get_multiplexed_async_connection().await
        };
        let mut conn = match tokio::time::timeout(Duration::from_secs(1), connect).await {
            Ok(Ok(conn)) => conn,
            _ => {
                note("unread", self.quarantine);
                return full;
            }
        };
        // Read once at least: a rolling restart asks after its three
        // restarts, when the first one's may be over.
        loop {
            type Mark = ((Option<String>, Option<String>), (u64, u64));
            let read =
                tokio::time::timeout(Duration::from_secs(1), ask.query_async::<Mark>(&mut conn))
                    .await;
            if let Ok(Ok(((Some(by), Some(since)), (secs, micros)))) = read
                && by == run
                && let Ok(since) = since.parse::<u64>()
            {
                let now = secs * 1000 + micros / 1000;
                let continuous = Duration::from_millis(now.saturating_sub(since));
                let left = self.quarantine.saturating_sub(continuous);
                // The quarantine as it was at the restart.
                let at_restart = self
                    .quarantine
                    .saturating_sub(continuous.saturating_sub(back.elapsed()));
                note("mark", at_restart);
                return Instant::now() + left.max(STAMP_PERIOD);
            }
            if Instant::now() >= full {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        note("unstamped", self.quarantine);
        full
    }

    /// A plain release cut on its way to node `n` must be sent again: the
    /// node stops holding `token` under `key` well before the key would
    /// expire. Records `kept` when it still holds it after
    /// [`RESENT_WITHIN`] with time to live left (a key that expired first
    /// proves nothing either way), unless a client process was stopped
    /// meanwhile.
    pub(super) async fn check_resent(&self, n: usize, key: &str, token: &str) {
        let until = Instant::now() + RESENT_WITHIN;
        // A client process stopped meanwhile (`stop-client`, a paused
        // holder) sends nothing until resumed: no verdict then.
        let mut stopped = false;
        // One connection for the whole check, direct to the node.
        let connect = async {
            let client = redis::Client::open(self.urls[n - 1].as_str())?;
            client.get_multiplexed_async_connection().await
        };
        let mut conn = match tokio::time::timeout(Duration::from_secs(1), connect).await {
            Ok(Ok(conn)) => conn,
            other => {
                eprintln!("nemesis: node {n}: checking a cut release: {other:?}");
                return;
            }
        };
        loop {
            stopped |= self.clients.iter().any(|&pid| process_stopped(pid));
            // The value and its time to live, in one round trip.
            let mut ask = redis::pipe();
            ask.cmd("GET").arg(key).cmd("PTTL").arg(key);
            let held = async {
                let (value, ttl): (Option<Vec<u8>>, i64) = ask.query_async(&mut conn).await?;
                redis::RedisResult::Ok(value.is_some_and(|v| holds_token(&v, token)) && ttl > 0)
            };
            match tokio::time::timeout(Duration::from_secs(1), held).await {
                Ok(Ok(false)) => return,
                Ok(Ok(true)) if Instant::now() >= until => {
                    if stopped {
                        self.rec
                            .record("note", &[("kept_while_stopped", key.into())]);
                    } else {
                        let fields = [("node", n.to_string()), ("key", key.into())];
                        self.rec.record("kept", &fields);
                    }
                    return;
                }
                Ok(Ok(true)) => {}
                other => {
                    eprintln!("nemesis: node {n}: checking a cut release: {other:?}");
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
