//! The [`Builder`] of a client (one call's options are
//! [`crate::settings`]'s, the retry policy is [`crate::proto::retry`]'s;
//! building the client from the settings is [`connect`]'s).

mod change;
mod checks;
mod connect;

pub use change::{ChangeError, MemberChange};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::redlock::Redlock;
use crate::engine::dispatch::{Dispatcher, Member};
use crate::engine::driver::{Driver, Settings};
use crate::engine::wakeup::{Hub, Open};
use crate::proto::error::NodeError;
use crate::proto::input::InputError;
use crate::proto::keys::KeyLayout;
use crate::proto::quorum::{DriftFactor, MAX_TTL_MS, quorum};
use crate::proto::retry::Retry;
use crate::settings::config_error::ConfigError;
use crate::settings::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_TTL, DEFAULT_NODE_TIMEOUT,
    MAX_CONNECT_TIMEOUT,
};
use crate::telemetry::NodeTelemetry;
use crate::transport::address::{Address, TlsMaterial, redact};
use crate::transport::agreement::Agreement;
use crate::transport::cluster::ClusterNode;
use crate::transport::link::Limits;
use crate::transport::link::{Checks, tls};
use crate::transport::master::{RedisNode, Servers};
use crate::transport::node::Node;
use crate::transport::pubsub;

/// Builds a [`Redlock`](crate::Redlock): nodes, timeouts, drift and retries.
///
/// Every setting is checked by [`build`](Builder::build), which returns a
/// [`ConfigError`] instead of panicking on anything it is given.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redquorum::ConfigError> {
/// use std::time::Duration;
/// use redquorum::{Redlock, Retry};
///
/// let redlock = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .key_prefix("orders:")
///     .node_timeout(Duration::from_millis(50))
///     .drift_factor(0.01)
///     .retry(Retry::new(3, Duration::from_millis(200)))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Default)]
#[must_use = "a Builder connects nothing until `build` is awaited"]
pub struct Builder {
    urls: Vec<String>,
    custom: Vec<Arc<dyn Node>>,
    node_timeout: Option<Duration>,
    drift_factor: Option<f64>,
    retry: Retry,
    quiet: bool,
    max_in_flight: Option<usize>,
    tls: TlsMaterial,
    require_quorum: bool,
    jitter_seed: Option<u64>,
    key_prefix: String,
    interop_keys: bool,
    connect_timeout: Option<Duration>,
    /// Waiters wait without a line (`fair_waiting(false)`).
    unfair: bool,
    /// The label of every hold that names none.
    label: Option<String>,
    /// The deployment's longest TTL (`max_ttl`).
    max_ttl: Option<Duration>,
    /// The delayed restart is off (`restart_quarantine(false)`).
    no_quarantine: bool,
    /// Durable restarts that kept their data count at once
    /// (`trust_durable_restarts`).
    trust_durable: bool,
    /// Nodes that may evict lock keys are refused (`strict`).
    strict: bool,
    /// No deployment record is read or written (`deployment_record(false)`).
    no_record: bool,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("Builder")
            .field("urls", &urls)
            .field("custom", &self.custom)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("retry", &self.retry)
            .field("notify_waiters", &!self.quiet)
            .field("max_in_flight", &self.max_in_flight)
            .field("tls", &self.tls)
            .field("require_quorum", &self.require_quorum)
            .field("jitter_seed", &self.jitter_seed)
            .field("key_prefix", &self.key_prefix)
            .field("interop_keys", &self.interop_keys)
            .field("connect_timeout", &self.connect_timeout)
            .field("fair_waiting", &!self.unfair)
            .field("label", &self.label)
            .field("max_ttl", &self.max_ttl)
            .field("restart_quarantine", &!self.no_quarantine)
            .field("trust_durable_restarts", &self.trust_durable)
            .field("strict", &self.strict)
            .field("deployment_record", &!self.no_record)
            .finish()
    }
}

impl Builder {
    /// Adds Redis masters by URL: `redis://[[user]:password@]host[:port][/db]`,
    /// `rediss://…` for TLS (feature `tls`, on by default: the system roots,
    /// or [`tls_ca`](Builder::tls_ca) and
    /// [`tls_client_cert`](Builder::tls_client_cert); `#insecure` is
    /// refused unless you opt in), or a Unix socket:
    /// `redis+unix:///path?db=N&user=U&pass=P`.
    /// Each must be an independent master — no replicas, and no server twice
    /// under two names ([`ConfigError::SameServer`]) — or a whole Redis
    /// Cluster named by one of its nodes: `redis+cluster://host:port`
    /// (`rediss+cluster://` with TLS), one member however many shards it
    /// has; a lock's resources must then share a hash slot
    /// ([`InputError::CrossSlot`]). Passwords never appear in errors,
    /// `Debug` or logs.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls
            .extend(urls.into_iter().map(|u| u.as_ref().to_owned()));
        self
    }

    /// Adds nodes of your own (a simulation, another transport). They vote
    /// exactly like Redis masters.
    pub fn custom_nodes<I>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = Arc<dyn Node>>,
    {
        self.custom.extend(nodes);
        self
    }

    /// The longest one node may take to answer in a round (1 ms to 2^40 ms).
    /// Default: `min(50 ms, ttl / 20)` for each lock's TTL. Always capped by
    /// the lock's validity. `connect`/`build` wait at most this long (50 ms by
    /// default) for the first connections.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The fraction of the TTL allowed for clock drift between client and
    /// nodes, in `[0, 1)`. Default 0.01. The drift allowance is
    /// `ceil(ttl × factor) + 2 ms`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = Some(factor);
        self
    }

    /// The retry policy of [`Redlock::lock`](crate::Redlock::lock) (and the pause ceiling of a
    /// waiting [`Redlock::lock_with`](crate::Redlock::lock_with)). Default: [`Retry::default`].
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// A prefix in front of every key this client uses (default: none), so
    /// that several applications can share nodes without sharing locks:
    /// with `"billing:"`, resource `orders:42` is locked under
    /// `billing:{orders:42}:lock`. It may not hold `{` or `}` and is at most
    /// [`MAX_KEY_PREFIX`](crate::proto::keys::MAX_KEY_PREFIX) bytes; otherwise
    /// [`build`](Self::build) fails with [`InputError::InvalidKeyPrefix`].
    /// Every client of a resource must use the same prefix.
    ///
    /// ```
    /// # async fn demo() -> Result<(), redquorum::ConfigError> {
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    ///     .key_prefix("billing:")
    ///     .build()
    ///     .await?;
    /// assert_eq!(redlock.key_layout().lock_key("orders:42"), "billing:{orders:42}:lock");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.key_prefix);
        self
    }

    /// Interop keys (default: off): a plain lock (`try_lock`, `lock`,
    /// `lock_with` without fencing, a lease without fencing) is keyed by the resource name
    /// itself (after any [`key_prefix`](Self::key_prefix)), set with
    /// `SET key token NX PX ttl` and released by compare-and-delete, as
    /// rslock, node-redlock and redsync do. A redquorum holder and one of
    /// theirs on the same nodes then exclude each other, so a fleet can move
    /// one service at a time (see `docs/migrating.md`).
    ///
    /// Fenced, reentrant and multi-resource locks keep their own layout
    /// (`{R}:lock`): the other clients have no such locks to exclude.
    /// Keys of the two modes never collide except when a resource name is
    /// itself of the form `{R}:lock`.
    ///
    /// ```
    /// # async fn demo() -> Result<(), redquorum::ConfigError> {
    /// // In-memory nodes here; `.nodes(urls)` for Redis masters.
    /// let nodes = (0..3).map(|i| redquorum::testing::MemoryNode::new(i) as _);
    /// let redlock = redquorum::Redlock::builder()
    ///     .custom_nodes(nodes)
    ///     .interop_keys(true)
    ///     .build()
    ///     .await?;
    /// assert_eq!(redlock.key_layout().plain_key("orders:42"), "orders:42");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn interop_keys(mut self, on: bool) -> Self {
        self.interop_keys = on;
        self
    }

    /// How long one connection attempt to a node may take — TCP, TLS and
    /// the handshake (`AUTH`, `SELECT`, `PING`, `INFO`, loading the
    /// scripts), pipelined into one round trip — default 1 s, at most 1 h.
    /// It is also the first round's connect budget: a round made while
    /// nodes are still connecting for the first time waits for them (not
    /// counted in its validity) until each has connected or failed, or a
    /// quorum has connected and one node timeout more has passed, at most
    /// this long. So distant nodes work from the first call, and a node
    /// frozen at start costs the first round at most this, once.
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder()
    ///     .connect_timeout(std::time::Duration::from_secs(3)); // nodes far away
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Whether waiters (a [`Redlock::lock_with`](crate::Redlock::lock_with) or [`Redlock::run_with`](crate::Redlock::run_with)
    /// with [`LockOptions::wait`](crate::LockOptions::wait)) are woken as soon as
    /// the holder releases (default: yes). Releases are published on each
    /// node; one subscriber connection per node, shared by all waiters,
    /// listens. Off, waiters poll with jittered pauses up to the retry delay.
    /// Either way no waiter sleeps past the holder's expiry.
    pub fn notify_waiters(mut self, on: bool) -> Self {
        self.quiet = !on;
        self
    }

    /// The label of every hold this client takes that names none
    /// ([`LockOptions::label`](crate::LockOptions::label) says what a label is): the host and process,
    /// say. Checked by [`build`](Builder::build)
    /// ([`InputError::InvalidLabel`](crate::proto::input::InputError::InvalidLabel)).
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().label("worker-3 pid 4121");
    /// ```
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.to_owned());
        self
    }

    /// Whether waiters are served in turn (default: yes). A waiter
    /// ([`LockOptions::wait`](crate::LockOptions::wait)) that was refused waits in its lock's line on
    /// each node, and a lock released while others wait is kept for the
    /// first of them for a moment, so that neither the releaser coming
    /// straight back nor a newcomer takes it: waiters are served before
    /// newcomers and in the order they came, for locks, read/write locks and
    /// semaphores (not reentrant or multi-resource locks, which wait
    /// without a line). Off, whoever asks first after a release gets the
    /// lock — a little more throughput under contention, and no bound on a
    /// waiter's wait. See docs/design.md, "Fair waiting".
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().fair_waiting(false);
    /// ```
    pub fn fair_waiting(mut self, on: bool) -> Self {
        self.unfair = !on;
        self
    }

    /// The most calls one node may have queued or awaiting an answer
    /// (default 1024). Past it a call to that node fails at once with
    /// [`NodeError::Overloaded`](crate::NodeError::Overloaded) — a vote
    /// against — instead of queueing: a frozen node costs a bounded amount of
    /// memory whatever the lock rate. Releases go past it (up to three times
    /// it): each pairs with an acquire that was made, and refusing it would
    /// leave that acquire's key until its TTL. A call waits at most four node
    /// timeouts (at least 1 s) for its answer; a node that takes longer
    /// has its connection dropped and re-established in the background.
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = Some(calls);
        self
    }

    /// Trusts the CA certificates in `pem` (PEM, one or more) for
    /// `rediss://` nodes, instead of the system roots (feature `tls`).
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder()
    ///     .nodes(["rediss://redis-1.internal:6380"])
    ///     .tls_ca(std::fs::read("/etc/redquorum/ca.pem").unwrap_or_default());
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// Presents this client certificate and key (PEM) to `rediss://` nodes
    /// that require one (`tls-auth-clients yes`): mutual TLS (feature `tls`).
    /// The key never appears in `Debug` or errors.
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder()
    ///     .nodes(["rediss://redis-1.internal:6380"])
    ///     .tls_client_cert(
    ///         std::fs::read("/etc/redquorum/client.pem").unwrap_or_default(),
    ///         std::fs::read("/etc/redquorum/client.key").unwrap_or_default(),
    ///     );
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Draws the random pauses between rounds (retries, waiting, the spread
    /// of woken waiters) from a generator seeded with `seed` instead of the
    /// operating system's: the same calls then pause the same way, for
    /// simulations and tests that must replay. Tokens stay random either
    /// way. A seeded client's waiters draw their place in line too (not the
    /// wall clock), so they are served in a random order. Not for
    /// production: clients with one seed retry in lockstep.
    ///
    /// ```
    /// let builder = redquorum::Redlock::builder().jitter_seed(42);
    /// ```
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// **Dangerous.** Accepts `rediss://…/#insecure` URLs, which turn
    /// certificate verification off for those nodes: anyone on the path can
    /// then impersonate a node, read the lock traffic and its credentials,
    /// and grant or steal locks. Without this call such URLs are refused
    /// ([`ConfigError::Insecure`]). Meant for a throw-away test server with a
    /// self-signed certificate; give a real deployment's CA with
    /// [`tls_ca`](Builder::tls_ca) instead. Each node connected this way is
    /// logged at `warn` level when the client is built.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let url = "rediss://127.0.0.1:1/#insecure";
    /// let refused = redquorum::Redlock::builder().nodes([url]).build().await;
    /// assert!(matches!(refused, Err(redquorum::ConfigError::Insecure { .. })));
    /// let built = redquorum::Redlock::builder()
    ///     .nodes([url])
    ///     .danger_accept_invalid_certificates()
    ///     .build()
    ///     .await;
    /// assert!(built.is_ok());
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    pub fn danger_accept_invalid_certificates(mut self) -> Self {
        self.tls.accept_invalid = true;
        self
    }

    /// Makes [`build`](Builder::build) fail with
    /// [`ConfigError::TooFewNodes`] unless a quorum of nodes is connected
    /// once each node's first connection attempt has ended (default: off —
    /// nodes that are down at start join when they come back, and rounds
    /// fail with `Unavailable` until then). `build` then waits for those
    /// attempts, each at most the connect timeout
    /// ([`connect_timeout`](Builder::connect_timeout), 1 s by default): a
    /// node that refuses connections ends its attempt at once, a frozen one
    /// takes the whole timeout. For services that should not start without
    /// their lock nodes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let built = redquorum::Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    ///     .require_quorum(true)
    ///     .build()
    ///     .await;
    /// assert!(matches!(built, Err(redquorum::ConfigError::TooFewNodes { .. })));
    /// # }
    /// ```
    pub fn require_quorum(mut self, on: bool) -> Self {
        self.require_quorum = on;
        self
    }
}

/// How a client is made: [`Redlock::builder`] for every setting,
/// [`Redlock::connect`] for the defaults.
impl Redlock {
    /// A builder for every setting; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Connects to the Redis masters at `urls` with default settings.
    ///
    /// Waits at most the default node timeout (50 ms) for the first
    /// connections; see [`Builder::build`].
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
    pub async fn connect<I, S>(urls: I) -> Result<Redlock, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Redlock::builder().nodes(urls).build().await
    }
}
