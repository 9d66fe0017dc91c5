//! The driver: runs the protocol's rounds over the nodes. It makes the calls
//! (through each node's [`Dispatcher`], which delivers every call whether
//! or not a round still listens), reads the clock, arms the round's one
//! timer and feeds what the nodes answer to a [`Round`](crate::proto::round::Round); what a round
//! decides from that is [`proto::round`](crate::proto::round)'s.
//!
//! Its own duties are the ones pure code cannot do: reading the clock
//! before the first request leaves, bounding a round by one timer, and
//! cleaning up after a failure on *every* node — including those that have
//! not answered yet, and when the caller drops the operation midway. A node
//! applies one client's calls in the order made, so a release made after an
//! acquire still in flight removes whatever that acquire sets.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::ballot::Ballot;
use crate::engine::claim::{Claim, Keys};
use crate::engine::dispatch::{Dispatcher, Member, RoundCalls};
use crate::engine::wakeup::Hub;
use crate::proto::error::Subject;
use crate::proto::error::{Answer, LockError, NodeError, Votes};
use crate::proto::input::InputError;
use crate::proto::keys::KeyLayout;
use crate::proto::op::Snapshot;
use crate::proto::per_node::PerNode;
use crate::proto::quorum::{self, DriftFactor, MAX_TTL_MS};
use crate::proto::retry::{Budget, Counts, Retry, quorum_counts};
use crate::proto::round::{Mask, Wait};
use crate::proto::round::{Step, Tally};
use crate::telemetry::ClientTelemetry;

mod acquire;
mod extend;
mod release;
mod room;
mod shutdown;

pub(crate) use room::Places;

/// The validated settings every operation reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) drift_factor: DriftFactor,
    pub(crate) retry: Retry,
    /// One connection attempt's bound, and the first round's connect
    /// budget.
    pub(crate) connect_timeout: Duration,
    /// Waiters wait in line (`Builder::fair_waiting`).
    pub(crate) fair: bool,
    /// The label of holds that name none (`Builder::label`), checked.
    pub(crate) label: Option<Arc<str>>,
    /// The longest TTL a call may ask for (`Builder::max_ttl`).
    pub(crate) max_ttl: Duration,
}

pub(crate) use crate::proto::input::Ttl;

/// What an acquisition holds: the claim, until when, and its fencing token.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) claim: Arc<Claim>,
    pub(crate) ttl_ms: u64,
    pub(crate) deadline: Instant,
    pub(crate) fence: Option<u64>,
    /// The nodes the acquire was made to (not refused before it was sent).
    pub(crate) made: Mask,
    /// Its slot among the client's claims (`crate::engine::holds`).
    pub(crate) slot: usize,
}

/// How many rounds an acquisition may take: the retry policy's, or until a
/// deadline.
pub(crate) type Attempts = Budget<Instant>;

/// The nodes and what every operation shares.
pub(crate) struct Driver {
    nodes: Box<[Dispatcher]>,
    pub(crate) settings: Settings,
    /// Release notifications, for Redis nodes with notifications on.
    hub: Option<Arc<Hub>>,
    /// Some member is a Redis Cluster: a lock's keys must share a slot.
    clustered: bool,
    /// The pauses' random draws, when seeded (`Builder::jitter_seed`).
    jitter: Option<std::sync::Mutex<rand::rngs::StdRng>>,
    /// How resources map to keys.
    layout: KeyLayout,
    /// When the client was built: the first round's connect budget counts
    /// from here.
    started: Instant,
    /// The nodes' names, for the rounds' logs.
    names: Arc<[Arc<str>]>,
    /// What the client counts of its locks.
    pub(crate) telemetry: ClientTelemetry,
    /// Its claims that may hold something on the nodes — in flight, held,
    /// a waiter's marks —, released by `shutdown`, which closes it to new
    /// acquisitions.
    pub(crate) holds: crate::engine::holds::Holds,
    /// `true` once `shutdown` began (and released every claim): leases end
    /// as lost, acquisitions and waits end with `LockError::ShutDown`.
    closing: tokio::sync::watch::Sender<bool>,
    /// One acquire round per resource at a time.
    turns: crate::engine::turns::Turns,
    /// The client's agreement with its nodes' deployment record: which
    /// member sets a round counts in (docs/agreement.md).
    agreement: Option<Arc<crate::transport::agreement::Agreement>>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("nodes", &self.nodes)
            .field("settings", &self.settings)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Driver {
    pub(crate) fn new(
        nodes: Vec<Dispatcher>,
        settings: Settings,
        layout: KeyLayout,
        hub: Option<Arc<Hub>>,
        jitter_seed: Option<u64>,
    ) -> Self {
        let clustered = nodes
            .iter()
            .any(|node| matches!(node.member(), Member::Cluster(_)));
        let names = nodes.iter().map(|node| Arc::clone(node.name())).collect();
        let agreement = nodes.iter().find_map(|node| match node.member() {
            Member::Redis(node) => node.link().agreement().map(|(a, _)| Arc::clone(a)),
            _ => None,
        });
        Driver {
            agreement,
            nodes: nodes.into(),
            settings,
            hub,
            clustered,
            jitter: jitter_seed
                .map(|seed| std::sync::Mutex::new(rand::SeedableRng::seed_from_u64(seed))),
            layout,
            started: Instant::now(),
            names,
            telemetry: ClientTelemetry::default(),
            holds: crate::engine::holds::Holds::default(),
            closing: tokio::sync::watch::Sender::new(false),
            turns: crate::engine::turns::Turns::default(),
        }
    }

    /// How resources map to keys.
    pub(crate) fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// A uniform random `u64` for a pause: seeded if asked, else the
    /// operating system's.
    pub(crate) fn draw(&self) -> u64 {
        match &self.jitter {
            Some(rng) => rand::Rng::next_u64(
                &mut *rng
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
            None => rand::random(),
        }
    }

    /// A waiter's place in line: the wall clock in ms since the Unix epoch,
    /// the same scale for every client of the nodes. A seeded client
    /// (`Builder::jitter_seed`, for replayable simulations, whose clients
    /// share no wall clock) draws it instead: its waiters are served in a
    /// random order.
    pub(crate) fn ticket(&self) -> u64 {
        if self.jitter.is_some() {
            return 1 + self.draw() % (1 << 41);
        }
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }

    /// The quorum of the nodes.
    pub(crate) fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    /// The nodes, in configured order.
    pub(crate) fn nodes(&self) -> &[Dispatcher] {
        &self.nodes
    }

    /// Every node and its calls in flight, in configured order.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&Member, usize)> {
        self.nodes
            .iter()
            .map(|node| (node.member(), node.in_flight()))
    }

    /// The release notifications, if on.
    pub(crate) fn hub(&self) -> Option<&Arc<Hub>> {
        self.hub.as_ref()
    }

    /// When a quorum of the nodes' yeses will count toward a new grant
    /// again, as the client knows at `now`: a Redis node's quarantine ends
    /// when its connection's handshake said; a node of your own's end is
    /// unknown while it reports itself quarantined.
    pub(crate) fn quorum_counts(&self, now: Instant) -> Counts {
        let nodes = self.nodes.iter().map(|n| {
            let left = match n.member() {
                Member::Redis(node) => node.standing().quarantined_for(now),
                Member::Cluster(node) => node.standing().quarantined_for(now),
                Member::Custom(node) if node.quarantined() => return Counts::Unknown,
                Member::Custom(_) => None,
            };
            left.map_or(Counts::Now, Counts::After)
        });
        quorum_counts(nodes, self.quorum())
    }

    /// The one check of a lock call's input, before anything is sent: its
    /// keys in one cluster slot where a member is a cluster, its TTL within
    /// bounds and above the drift allowance.
    pub(crate) fn admit(&self, keys: &Keys, ttl: Duration) -> Result<Ttl, InputError> {
        self.check_slots(keys)?;
        self.check_ttl(ttl)
    }

    /// Refuses a lock whose keys a cluster member would spread over
    /// several slots ([`InputError::CrossSlot`]), before anything is sent.
    pub(crate) fn check_slots(&self, keys: &Keys) -> Result<(), InputError> {
        if !self.clustered || keys.one_slot() {
            return Ok(());
        }
        Err(InputError::CrossSlot {
            resources: keys.resources().map(str::to_owned).collect(),
        })
    }

    /// Checks a TTL: 1 ms to 2^40 ms (sub-millisecond parts are dropped, as
    /// Redis would), at most the longest TTL (`Builder::max_ttl`), and
    /// longer than its drift allowance.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Ttl, InputError> {
        Ttl::check(ttl, self.settings.max_ttl, self.settings.drift_factor)
    }

    /// A round of `step` on `claim`: its answers with the nodes' names, as
    /// errors report them.
    pub(crate) fn votes(&self, claim: &Claim, step: Step, answers: PerNode<Answer>) -> Votes {
        let names = self.nodes.iter().map(|node| Arc::clone(node.name()));
        Votes::new(names.zip(answers).collect()).about(subject(claim, step))
    }

    /// `work`'s output, or [`LockError::ShutDown`] as soon as the shutdown
    /// begins (`work` is dropped then).
    pub(crate) async fn unless_closing<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, LockError> {
        tokio::select! {
            biased;
            () = self.closing() => Err(LockError::ShutDown),
            out = work => Ok(out),
        }
    }

    /// The label of a call's holds: the one its options give (`given`),
    /// checked, else the client's.
    pub(crate) fn label(&self, given: Option<&str>) -> Result<Option<Arc<str>>, InputError> {
        match given {
            Some(label) => crate::proto::input::check_label(label).map(Some),
            None => Ok(self.settings.label.clone()),
        }
    }

    /// Reads what every node holds under `claim`'s keys ([`Step::Inspect`]),
    /// waiting for each at most the node timeout (the configured one, or
    /// [`DEFAULT_NODE_TIMEOUT`](crate::settings::DEFAULT_NODE_TIMEOUT)); a node silent
    /// by then answers [`NodeError::TimedOut`].
    pub(crate) async fn gather(&self, claim: &Arc<Claim>) -> Vec<Result<Snapshot, NodeError>> {
        self.first_connections().await;
        let wait = self
            .settings
            .node_timeout
            .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT);
        let timer = Instant::now() + wait;
        let everyone = Wait::Nodes(smallvec::smallvec![true; self.nodes.len()]);
        let round = self.submit(claim, Step::Inspect, 0, None, everyone);
        let tally = self.collect(&round, timer).await;
        tally
            .snapshots
            .into_iter()
            .zip(tally.answers.iter())
            .map(|(snapshot, answer)| match (snapshot, answer) {
                (Some(snapshot), _) => Ok(snapshot),
                (None, Answer::Failed(error)) => Err(error.clone()),
                (None, other) => Err(NodeError::Protocol(
                    format!("{other:?} for an inspection").into(),
                )),
            })
            .collect()
    }

    /// Waits, before a round's clock starts, for nodes still connecting for
    /// the first time: until each has connected or failed, or a quorum has
    /// connected and one node timeout more has passed — at most the connect
    /// budget ([`Settings::connect_timeout`]) from the client's start. Free
    /// once every node has had its first attempt.
    async fn first_connections(&self) {
        if !self.nodes.iter().any(|n| n.member().connecting_first()) {
            return;
        }
        let budget = self.started + self.settings.connect_timeout;
        let quorum = self.quorum();
        let grace = self
            .settings
            .node_timeout
            .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT);
        let mut quorum_since: Option<Instant> = None;
        loop {
            // Listening before looking: no change is missed in between.
            let mut changes: Vec<_> = self
                .nodes
                .iter()
                .filter_map(|n| n.member().changed())
                .map(Box::pin)
                .collect();
            for change in &mut changes {
                change.as_mut().enable();
            }
            let connecting = self
                .nodes
                .iter()
                .filter(|n| n.member().connecting_first())
                .count();
            if connecting == 0 {
                return;
            }
            let up = self
                .nodes
                .iter()
                .filter(|n| n.member().ready().is_ok())
                .count();
            let now = Instant::now();
            if up >= quorum {
                quorum_since.get_or_insert(now);
            }
            let until = quorum_since.map_or(budget, |since| budget.min(since + grace));
            if now >= until {
                return;
            }
            let _ = tokio::time::timeout_at(until, futures::future::select_all(changes)).await;
        }
    }

    /// Makes one operation on every node at once (or on those marked in
    /// `only`), each answer cast into the round's ballot, listened to
    /// `until`. Each call is delivered whatever becomes of the returned
    /// round; a node that cannot take it answers at once.
    fn submit(
        &self,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
        until: Wait,
    ) -> Sent {
        self.submit_with(claim, step, ttl_ms, only, until, None, None)
    }

    /// [`submit`](Self::submit), with `late` hearing the answers that come
    /// after the round stopped listening, and places already reserved.
    #[allow(clippy::too_many_arguments)]
    fn submit_with(
        &self,
        claim: &Arc<Claim>,
        step: Step,
        ttl_ms: u64,
        only: Option<&[bool]>,
        until: Wait,
        late: Option<crate::engine::ballot::Late>,
        places: Option<Places>,
    ) -> Sent {
        let mut places = places.unwrap_or_default();
        let asked: Mask = (0..self.nodes.len())
            .map(|i| only.is_none_or(|only| only[i]))
            .collect();
        let span = tracing::debug_span!(
            "redquorum.round",
            op = step.name(),
            key = claim.keys().first(),
            nodes = self.nodes.len()
        );
        let sets = self.agreement.as_ref().map_or_else(
            || crate::proto::joint::Sets::all(self.nodes.len()),
            |agreement| agreement.sets(),
        );
        let ballot = Ballot::new(step, &asked, &sets, until, span, &self.names, late);
        let round = RoundCalls::new(claim, step, ttl_ms, ballot);
        let made = self
            .nodes
            .iter()
            .zip(&asked)
            .enumerate()
            .map(|(i, (node, &asked))| {
                let place = places.get_mut(i).and_then(Option::take);
                asked && node.call(&round, i, place)
            })
            .collect();
        Sent { round, made }
    }

    /// Waits until `round` may stop listening, or `timer` passes (nodes
    /// silent by then count as timed out): its tally.
    async fn collect(&self, round: &Sent, timer: Instant) -> Tally {
        // A round whose every node refuses at once (none connected) never
        // waits on anything: it still counts against the task's budget, so
        // a caller looping on it lets the runtime run the reconnects (and
        // timers) it needs.
        tokio::task::coop::consume_budget().await;
        let timed_out = tokio::select! {
            biased;
            () = round.round.ballot.decided() => false,
            () = tokio::time::sleep_until(timer) => true,
        };
        round.round.ballot.close(timed_out)
    }
}

/// What a round of `step` on `claim` is about, for its error's message.
fn subject(claim: &Claim, step: Step) -> Subject {
    Subject::Lock {
        resources: claim
            .keys()
            .resources()
            .collect::<Vec<_>>()
            .join(", ")
            .into(),
        kind: claim.keys().kind(),
        step: step.name(),
    }
}

/// One round's calls (its ballot), and the nodes they were made to.
#[derive(Debug)]
struct Sent {
    round: Arc<RoundCalls>,
    made: Mask,
}
