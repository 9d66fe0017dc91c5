//! Building a client: the settings checked, the nodes connected.

use super::*;
use crate::proto::deployment::Mismatch;

/// How long `build` waits before it reads again a node that holds no
/// deployment record beside nodes that do (at most the connect timeout in
/// all).
const BLANK_AGAIN: Duration = Duration::from_millis(50);

/// A [`Builder`]'s settings, checked ([`Builder::check`]): every bound
/// met, every default chosen, the node URLs parsed and told apart.
pub(crate) struct Checked {
    drift_factor: DriftFactor,
    layout: KeyLayout,
    max_ttl: Duration,
    /// `max_ttl` was chosen, not the default.
    chosen: bool,
    checks: Checks,
    connect_timeout: Duration,
    label: Option<Arc<str>>,
    max_in_flight: usize,
    targets: Vec<Address>,
    tls: tls::Configs,
}

impl Builder {
    /// Checks the settings, then connects to every node concurrently, waiting
    /// at most the node timeout: a node that is down or frozen now is retried
    /// in the background and simply votes no until it is back. Credentials a
    /// node rejects are an error here, and so are two URLs that reach one
    /// server (compared by `run_id`; a node that is down now is checked when
    /// it connects, and refused a vote if it is a duplicate).
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConfigError`](crate::ConfigError) for a setting out of range, a node
    /// that refuses the credentials or the permissions, two URLs that reach one
    /// server, or a list that does not match the deployment recorded on the
    /// nodes (docs/agreement.md).
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the connections made so far: nothing is left
    /// on the nodes but the deployment record's reads and first writes
    /// (docs/agreement.md), each whole or not at all.
    pub async fn build(self) -> Result<Redlock, ConfigError> {
        self.connect().await.map(Redlock::from_driver)
    }

    /// Checks every setting, in pure code, before anything connects: the
    /// settings [`connect`](Builder::connect) uses, or the first that is
    /// out of range. (Only a node's own answers are left to check: its
    /// credentials, its server, the deployment record.)
    pub(crate) fn check(&self) -> Result<Checked, ConfigError> {
        let drift_factor = match self.drift_factor {
            None => DriftFactor::default(),
            Some(f) => DriftFactor::new(f).ok_or(InputError::InvalidDriftFactor(f))?,
        };
        let longest = Duration::from_millis(MAX_TTL_MS);
        let layout = KeyLayout::new(&self.key_prefix, self.interop_keys)?;
        if self
            .node_timeout
            .is_some_and(|t| t < Duration::from_millis(1) || t > longest)
        {
            return Err(ConfigError::InvalidNodeTimeout);
        }
        let chosen = self.max_ttl.is_some();
        let max_ttl = self.max_ttl.unwrap_or(DEFAULT_MAX_TTL);
        if max_ttl < Duration::from_millis(1) || max_ttl > longest {
            return Err(ConfigError::InvalidMaxTtl(max_ttl));
        }
        let max_ttl_ms = u64::try_from(max_ttl.as_millis()).unwrap_or(MAX_TTL_MS);
        // The quarantine is the longest TTL measured by the node's clock:
        // the client's may run slower by the drift factor.
        let checks = Checks {
            agreement: None,
            quarantine: (!self.no_quarantine).then(|| max_ttl + drift_factor.drift(max_ttl_ms)),
            trust_durable: self.trust_durable,
            strict: self.strict,
            mark: layout.dataset_mark().into(),
            probe_key: layout.lock_key("redquorum:probe").into(),
        };
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        if connect_timeout < Duration::from_millis(1) || connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(ConfigError::InvalidConnectTimeout(connect_timeout));
        }
        if self.retry.max_delay() > longest {
            return Err(ConfigError::InvalidRetry);
        }
        if self.retry.attempts() == 0 {
            return Err(ConfigError::InvalidRetry);
        }
        let label = self
            .label
            .as_deref()
            .map(crate::proto::input::check_label)
            .transpose()?;
        let max_in_flight = self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
        if max_in_flight == 0 {
            return Err(ConfigError::InvalidMaxInFlight);
        }
        let targets = self
            .urls
            .iter()
            .map(|url| Address::parse_with(url, &self.tls))
            .collect::<Result<Vec<_>, _>>()?;
        if targets.is_empty() && self.custom.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        // TLS only where a node needs it, with a provider of the client's
        // own (the process default is never touched).
        let tls = tls::Configs::new(&self.tls, targets.iter().map(|t| t.endpoint().tls))?;
        let mut names: Vec<&str> = targets
            .iter()
            .map(|t| &**t.name())
            .chain(self.custom.iter().map(|n| &**n.name()))
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::DuplicateNode(w[0].to_owned()));
        }
        Ok(Checked {
            drift_factor,
            layout,
            max_ttl,
            chosen,
            checks,
            connect_timeout,
            label,
            max_in_flight,
            targets,
            tls,
        })
    }

    /// Connects with the settings [`check`](Builder::check)ed (see
    /// [`build`](Builder::build)).
    pub(crate) async fn connect(self) -> Result<Driver, ConfigError> {
        let Checked {
            drift_factor,
            layout,
            max_ttl,
            chosen,
            checks,
            connect_timeout,
            label,
            max_in_flight,
            targets,
            tls,
        } = self.check()?;
        crate::telemetry::describe();
        for target in targets.iter().filter(|t| t.is_insecure()) {
            tracing::warn!(node = %target.name(), "certificate verification is off for this node (#insecure)");
        }

        // The deployment record, kept by clients of Redis masters only (a
        // cluster's members change under it; custom nodes are the caller's).
        let agreement =
            (!self.no_record && self.custom.is_empty() && targets.iter().all(|t| !t.is_cluster()))
                .then(|| {
                    Agreement::new(
                        targets.iter().map(|t| Arc::clone(t.name())).collect(),
                        layout.deployment(),
                        max_ttl,
                        chosen,
                        connect_timeout,
                    )
                });

        // Where each Redis node's listener connects (clusters and custom
        // nodes open their own).
        let addresses: Vec<Address> = targets.clone();
        // The bounds come from the node timeout alone.
        let node_timeout = self.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT);
        let limits = Limits::new(max_in_flight, node_timeout, connect_timeout);
        // `build` waits the node timeout for the first connections;
        // requiring a quorum waits for whole connection attempts.
        let wait = if self.require_quorum {
            connect_timeout
        } else {
            node_timeout
        };
        let servers = Servers::new(targets.iter().map(|t| Arc::clone(t.name())).collect());
        let connected = futures::future::join_all(targets.into_iter().enumerate().map(|(i, t)| {
            let servers = Arc::clone(&servers);
            let tls = tls.clone();
            let mut checks = checks.clone();
            checks.agreement = agreement.as_ref().map(|a| (Arc::clone(a), i));
            async move {
                let telemetry = Arc::new(NodeTelemetry::new(t.name()));
                let member = if t.is_cluster() {
                    let (node, first) =
                        ClusterNode::connect(t, i, servers, tls, limits, checks, wait).await?;
                    (Member::Cluster(Arc::new(node)), first)
                } else {
                    let identity = servers.identity(i, Arc::clone(t.name()));
                    let (node, first) =
                        RedisNode::connect(t, Some(identity), tls, limits, checks, wait).await?;
                    (Member::Redis(Arc::new(node)), first)
                };
                Ok::<_, ConfigError>((member, telemetry))
            }
        }))
        .await;
        let mut nodes = Vec::with_capacity(connected.len() + self.custom.len());
        let (mut tls_failures, mut other_failures, mut up) = (Vec::new(), 0, 0);
        for node in connected {
            let ((member, first), telemetry) = node?;
            match first {
                Some(NodeError::Tls(message)) => {
                    tls_failures.push(format!("{}: {message}", member.name()));
                }
                Some(_) => other_failures += 1,
                None => up += usize::from(member.ready().is_ok()),
            }
            nodes.push(Dispatcher::start(member, limits, telemetry));
        }
        // Every node that answered failing its handshake, and none up: a
        // configuration error, not an outage — say so now rather than vote
        // `NotConnected` forever. (Otherwise each node's vote carries it.)
        if !tls_failures.is_empty() && other_failures == 0 && up == 0 {
            return Err(ConfigError::Tls(tls_failures.join("; ")));
        }
        let custom = self.custom.len();
        nodes.extend(self.custom.into_iter().map(|node| {
            let telemetry = Arc::new(NodeTelemetry::new(node.name()));
            Dispatcher::start(Member::Custom(node), limits, telemetry)
        }));
        // One listener source per member, in the members' order: a Redis
        // node's pub/sub, a cluster's over the masters of each channel's
        // slot (sharded), a custom node's own.
        let hub = (!self.quiet).then(|| {
            let sources = nodes
                .iter()
                .enumerate()
                .map(|(i, node)| match node.member() {
                    Member::Redis(_) => {
                        let (address, tls) = (addresses[i].clone(), tls.clone());
                        Box::new(move || Some(pubsub::listen(address.clone(), tls.clone()))) as Open
                    }
                    Member::Cluster(cluster) => Box::new(cluster.listener_source()) as Open,
                    Member::Custom(custom) => {
                        let custom = Arc::clone(custom);
                        Box::new(move || custom.listen()) as Open
                    }
                })
                .collect();
            Hub::new(sources, quorum(nodes.len()), self.jitter_seed)
        });
        if self.require_quorum {
            let needed = quorum(nodes.len());
            let down: Vec<String> = nodes
                .iter()
                .filter_map(|node| {
                    let ready = node.member().ready();
                    ready.err().map(|e| format!("{}: {e}", node.name()))
                })
                .collect();
            let reachable = nodes.len() - down.len();
            debug_assert!(reachable >= custom);
            if reachable < needed {
                return Err(ConfigError::TooFewNodes {
                    reachable,
                    nodes: nodes.len(),
                    quorum: needed,
                    detail: down.join("; "),
                });
            }
        }
        let mut max_ttl = max_ttl;
        if let Some(agreement) = &agreement {
            let links = nodes.iter().filter_map(|node| match node.member() {
                Member::Redis(redis) => Some(Arc::downgrade(redis.link())),
                _ => None,
            });
            let links: Vec<_> = links.collect();
            if !agreement.decided() && agreement.answered() {
                // Every first attempt ends within the connect timeout: the
                // record is agreed (or refused) at connect wherever the
                // nodes that answer can say. (Once it is, a node slower
                // than the build's wait is judged when it connects; with
                // none answering yet, every node is.)
                futures::future::join_all(links.iter().filter_map(|link| {
                    let link = link.upgrade()?;
                    Some(async move { link.first_outcome(connect_timeout).await })
                }))
                .await;
            }
            agreement.bind(links);
            agreement.settle_now().await;
            // A node without the record beside nodes with it may be one
            // another client is writing it to (two clients at first use):
            // read it again a few times before calling it no member.
            let start = tokio::time::Instant::now();
            while let Some(Mismatch::NotAMember {
                node, blank: true, ..
            }) = agreement.refused()
                && start.elapsed() < connect_timeout
            {
                tokio::time::sleep(BLANK_AGAIN).await;
                agreement.reread(node).await;
                agreement.settle_now().await;
            }
            if let Some(mismatch) = agreement.refused() {
                return Err(ConfigError::Deployment(mismatch));
            }
            max_ttl = agreement.fix_max_ttl();
            agreement.warn_undecided();
        }
        Ok(Driver::new(
            nodes,
            Settings {
                node_timeout: self.node_timeout,
                drift_factor,
                retry: self.retry,
                connect_timeout,
                fair: !self.unfair,
                label,
                max_ttl,
            },
            layout,
            hub,
            self.jitter_seed,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting is checked in pure code, before anything connects: no
    /// runtime, no node, no network here.
    #[test]
    fn settings_are_checked_before_anything_connects() {
        let five = || Builder::default().nodes((1..=5).map(|i| format!("redis://127.0.0.1:{i}")));
        let checked = five().check().expect("valid settings");
        assert_eq!(checked.targets.len(), 5);
        assert_eq!(checked.max_ttl, DEFAULT_MAX_TTL);
        assert_eq!(checked.max_in_flight, DEFAULT_MAX_IN_FLIGHT);
        assert_eq!(checked.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        let refused = |b: Builder| b.check().err().expect("refused");
        assert_eq!(refused(Builder::default()), ConfigError::NoNodes);
        assert_eq!(
            refused(five().node_timeout(Duration::ZERO)),
            ConfigError::InvalidNodeTimeout
        );
        assert_eq!(
            refused(five().retry(Retry::new(0, Duration::ZERO))),
            ConfigError::InvalidRetry
        );
        assert_eq!(
            refused(five().max_in_flight(0)),
            ConfigError::InvalidMaxInFlight
        );
        assert!(matches!(
            refused(five().nodes(["redis://127.0.0.1:1"])),
            ConfigError::DuplicateNode(_)
        ));
        assert!(matches!(
            refused(five().label("a\0b")),
            ConfigError::Input(InputError::InvalidLabel(_))
        ));
    }
}
