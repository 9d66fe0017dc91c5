//! The three clients side by side: redquorum, rslock and the raw floor.

use super::*;

pub(crate) const TTL: Duration = Duration::from_secs(10);
/// Upper bound of the random pause between contended retries, for all three.
pub(crate) const RETRY_MAX: Duration = Duration::from_millis(10);
/// The raw floor's per-request timeout: redquorum's default node timeout.
pub(crate) const RAW_TIMEOUT: Duration = Duration::from_millis(50);
/// The library's release script, the exact text it sends by `EVAL` (with
/// the preludes it needs: `release.lua` alone does not run).
pub(crate) fn release_lua() -> &'static str {
    redquorum::node::release_script()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    Redquorum,
    Rslock,
    Raw,
}

pub(crate) const CLIENTS: [Which; 3] = [Which::Redquorum, Which::Rslock, Which::Raw];

impl Which {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Which::Redquorum => "redquorum",
            Which::Rslock => "rslock",
            Which::Raw => "raw floor",
        }
    }

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Which::Redquorum => "redquorum",
            Which::Rslock => "rslock",
            Which::Raw => "raw",
        }
    }
}

pub(crate) enum Client {
    Redquorum(Redlock),
    Rslock(rslock::LockManager),
    Raw(Raw),
}

/// The floor: what five concurrent round trips cost, waiting for all.
pub(crate) struct Raw {
    pub(crate) conns: Vec<MultiplexedConnection>,
    pub(crate) release_sha: String,
}

impl Raw {
    pub(crate) async fn connect(urls: &[String]) -> Raw {
        let timeout = profiling_timeout().unwrap_or(RAW_TIMEOUT);
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        let mut conns = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("node URL");
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap_or_else(|e| panic!("raw floor: cannot connect to {url}: {e}"));
            conns.push(conn);
        }
        let release_sha = redis::Script::new(release_lua()).get_hash().to_owned();
        for conn in &mut conns {
            let _: Value = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(release_lua())
                .query_async(conn)
                .await
                .expect("SCRIPT LOAD");
        }
        Raw { conns, release_sha }
    }

    /// One round: `SET NX PX` everywhere, then the release script everywhere
    /// unless `keep`; true if a majority set the key.
    pub(crate) async fn round(&self, key: &str, token: &str, keep: bool) -> bool {
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64);
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let set = &set;
            async move { c.send_packed_command(set).await }
        }))
        .await;
        let yes = replies
            .iter()
            .filter(|r| matches!(r, Ok(Value::Okay)))
            .count();
        let granted = yes > self.conns.len() / 2;
        if !granted || !keep {
            self.release(key, token).await;
        }
        granted
    }

    pub(crate) async fn release(&self, key: &str, token: &str) {
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.release_sha).arg(1).arg(key).arg(token);
        join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let del = &del;
            async move { c.send_packed_command(del).await }
        }))
        .await;
    }
}

/// `REDQUORUM_BENCH_NODE_TIMEOUT_MS`: a longer node timeout for redquorum and
/// the floor, only to profile them under valgrind (which runs ~50x slower).
pub(crate) fn profiling_timeout() -> Option<Duration> {
    std::env::var("REDQUORUM_BENCH_NODE_TIMEOUT_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

pub(crate) fn raw_key(resource: &str) -> String {
    format!("{{{resource}}}:lock")
}

pub(crate) fn raw_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Client {
    pub(crate) async fn connect(which: Which, urls: &[String]) -> Client {
        match which {
            Which::Redquorum => {
                let mut builder = Redlock::builder()
                    .restart_quarantine(false)
                    .nodes(urls)
                    .retry(Retry::new(3, RETRY_MAX));
                if let Some(timeout) = profiling_timeout() {
                    builder = builder.node_timeout(timeout);
                }
                Client::Redquorum(builder.build().await.expect("redquorum build"))
            }
            Which::Rslock => {
                let mut manager = rslock::LockManager::new(urls.to_vec());
                manager.set_retry(3, RETRY_MAX);
                Client::Rslock(manager)
            }
            Which::Raw => Client::Raw(Raw::connect(urls).await),
        }
    }

    /// One lock attempt (a single round, no retry) and its release.
    pub(crate) async fn cycle(&self, resource: &str) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.try_lock(resource, TTL).await.map_err(short)?;
                lock.release().await.map_err(short)
            }
            Client::Rslock(m) => {
                // Retry count 1: `lock` makes exactly one attempt.
                let lock = lock_once(m, resource).await?;
                m.unlock(&lock).await;
                Ok(())
            }
            Client::Raw(raw) => {
                let key = raw_key(resource);
                if raw.round(&key, &raw_token(), false).await {
                    Ok(())
                } else {
                    Err("no majority".into())
                }
            }
        }
    }

    /// Acquires `resource` with each client's own retry loop (pauses of up
    /// to 10 ms), runs `section`, releases. Stops trying at `until`.
    pub(crate) async fn contend(
        &self,
        resource: &str,
        until: Instant,
        section: impl FnOnce(),
    ) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let wait = until.saturating_duration_since(Instant::now());
                let lock = r
                    .lock_with(resource, TTL, &redquorum::LockOptions::new().wait(wait))
                    .await
                    .map_err(short)?;
                section();
                lock.release().await.map_err(short)
            }
            Client::Rslock(m) => {
                // `acquire` loops until it has the lock; the caller bounds it.
                let guard = m.acquire(resource, TTL).await.map_err(|e| e.to_string())?;
                section();
                guard.release().await;
                Ok(())
            }
            Client::Raw(raw) => {
                let key = raw_key(resource);
                let token = raw_token();
                loop {
                    if raw.round(&key, &token, true).await {
                        break;
                    }
                    if Instant::now() >= until {
                        return Err("timed out".into());
                    }
                    let pause = rand::random_range(0..=RETRY_MAX.as_micros() as u64);
                    tokio::time::sleep(Duration::from_micros(pause)).await;
                }
                section();
                raw.release(&key, &token).await;
                Ok(())
            }
        }
    }
}

pub(crate) async fn lock_once(
    m: &rslock::LockManager,
    resource: &str,
) -> Result<rslock::Lock, String> {
    let mut once = m.clone();
    once.set_retry(1, RETRY_MAX);
    once.lock(resource.as_bytes(), TTL)
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn short(e: LockError) -> String {
    match e {
        LockError::Taken { .. } => "taken".into(),
        LockError::Unavailable { .. } => "unavailable".into(),
        LockError::Expired { .. } => "expired".into(),
        LockError::Timeout { .. } => "timeout".into(),
        other => other.to_string(),
    }
}
