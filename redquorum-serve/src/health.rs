//! Readiness as the quorum sees it: ready when a quorum of nodes answer a
//! ping and count toward grants (not quarantined after a restart, not
//! excluded by the deployment record). Nodes of your own (custom nodes)
//! count as answering: the library cannot ping them. One probe per
//! [`Health::FRESH_FOR`] at most, whatever the rate of health requests;
//! a probe waits at most [`Health::PROBE_TIMEOUT`].

use std::time::{Duration, Instant};

use redquorum::Redlock;
use tokio::sync::Mutex;

/// The last probe's verdict, and when it was made.
#[derive(Debug)]
pub(crate) struct Health {
    redlock: Redlock,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Health {
    /// How long a probe's verdict is reused.
    pub(crate) const FRESH_FOR: Duration = Duration::from_secs(1);
    /// How long a probe waits for the nodes.
    pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

    pub(crate) fn new(redlock: Redlock) -> Self {
        Health {
            redlock,
            last: Mutex::new(None),
        }
    }

    /// `Ok` when ready; otherwise why not (node names masked, no secret).
    pub(crate) async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, verdict)) = last.as_ref()
            && at.elapsed() < Self::FRESH_FOR
        {
            return verdict.clone();
        }
        let verdict = self.probe().await;
        *last = Some((Instant::now(), verdict.clone()));
        verdict
    }

    async fn probe(&self) -> Result<(), String> {
        let nodes = self.redlock.nodes();
        let health = nodes.probe(Self::PROBE_TIMEOUT).await;
        let counting = health
            .iter()
            .filter(|n| n.is_reachable() && n.quarantined_for.is_none() && n.excluded.is_none())
            .count();
        if counting >= nodes.quorum() {
            return Ok(());
        }
        let why: Vec<String> = health
            .iter()
            .filter_map(|n| match (&n.reachable, n.quarantined_for, &n.excluded) {
                (Err(e), _, _) => Some(format!("{}: {e}", n.node)),
                (_, Some(left), _) => Some(format!("{}: quarantined for {left:?}", n.node)),
                (_, _, Some(why)) => Some(format!("{}: {why}", n.node)),
                _ => None,
            })
            .collect();
        Err(format!(
            "{counting} of {} nodes count toward a grant, {} needed: {}\n",
            health.len(),
            nodes.quorum(),
            why.join("; ")
        ))
    }
}
