//! One client's agreement with its nodes' deployment record
//! (docs/agreement.md): what each node answered at its last connection,
//! the record once agreed, and which nodes count.
//!
//! Every lock connection reads the record in its handshake and hands what
//! it read to [`Agreement::met`]; `crate::proto::deployment` decides. Until
//! the record is agreed, and for a node that is no member, a connection's
//! calls end unsent, a no vote (releases and undos still go). Writes — the record where it is first
//! created, a member that lost its data adopted back, the addresses the
//! members know — go in one batch at a time, each bounded by the connect
//! timeout, at most [`MAX_PASSES`] passes per batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::proto::deployment::{self, Admission, Agreed, Decision, Mismatch, Reading, Record};
use crate::proto::joint::Sets;
use crate::transport::link::Link;
use crate::transport::scripts::{self, DeploymentCall};

mod write;

/// How often a connection reads its node's record again: a running
/// client learns that the record changed under it (the membership moved,
/// a member lost its data) within this and a round trip, on every node it
/// reaches (docs/agreement.md, "Bounds").
pub(crate) const RECORD_EVERY: Duration = Duration::from_secs(1);

/// How long a node counts after its record was last read (from when the
/// read was sent): a node whose reads stopped answering counts toward no
/// grant, so that every client follows a change of members within this
/// bound on every node it counts (docs/agreement.md, "Bounds").
pub(crate) const RECORD_FRESH: Duration = Duration::from_secs(5);

/// A record to write, and the member id the node takes with it.
type Write<'s> = (&'s Record, Option<&'s str>);

/// Write-and-read passes one batch makes at most (creating, then the
/// addresses, then what a concurrent client changed).
const MAX_PASSES: usize = 4;

/// A client's agreement with the record on its Redis nodes.
pub(crate) struct Agreement {
    /// The client's nodes' names, in order: the addresses members are
    /// known by.
    names: Vec<Arc<str>>,
    /// The record's key.
    key: Arc<str>,
    /// The client's `max_ttl` (ms), and whether it is fixed: chosen by
    /// the user, or the client built (else the record's, if not longer, is
    /// taken).
    max_ttl_ms: AtomicU64,
    chosen: AtomicBool,
    /// The client is built: a refusal is logged (before, `build` returns
    /// it).
    built: AtomicBool,
    /// Each node counts toward grants.
    admitted: Vec<AtomicBool>,
    /// When each node's last record read was sent, in ms after `origin`,
    /// plus one (0: never).
    read_at: Vec<AtomicU64>,
    origin: Instant,
    /// The member sets rounds count in (docs/agreement.md).
    sets: RwLock<Sets>,
    /// Why the client asks for no new grant, if the deployment moved away
    /// from its list (`moving` says so without the lock).
    moved: RwLock<Option<Arc<str>>>,
    moving: AtomicBool,
    state: Mutex<State>,
    /// The links, once started: where a batch writes.
    links: OnceLock<Vec<Weak<Link>>>,
    /// How long one write may take.
    timeout: Duration,
    /// Notified when a batch of writes ends.
    ended: tokio::sync::Notify,
}

impl std::fmt::Debug for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Agreement")
            .field("record", &state.agreed.as_ref().map(|a| &a.record))
            .field("refused", &state.refused)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// What each node answered at its last connection.
    readings: Vec<Option<Reading>>,
    /// Each node's connection has the function library (else `EVAL`).
    loaded: Vec<bool>,
    /// The record, once agreed, and who each node is.
    agreed: Option<Agreed>,
    /// Why the client is refused (until the record is agreed).
    refused: Option<Mismatch>,
    /// The record to create where none is.
    creating: Option<Record>,
    /// A batch of writes is under way.
    writing: bool,
    /// The members' addresses were written to each node since it last
    /// answered without the record (once: a node whose `seen:` fields are
    /// full keeps no more, and is not asked again).
    told: Vec<bool>,
    /// Why each node is excluded, if it is (each change logged once).
    excluded: Vec<Option<Mismatch>>,
}

/// The record and the client's standing with it, for `nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// The agreed record.
    pub(crate) record: Option<Record>,
    /// Each node's member id, where known.
    pub(crate) ids: Vec<Option<String>>,
    /// Why each node counts toward no grant under the record: no member,
    /// the client refused, or no record agreed yet.
    pub(crate) excluded: Vec<Option<String>>,
}

impl Agreement {
    /// The agreement of a client of the nodes `names`, whose record is
    /// `key`.
    pub(crate) fn new(
        names: Vec<Arc<str>>,
        key: String,
        max_ttl: Duration,
        chosen: bool,
        timeout: Duration,
    ) -> Arc<Self> {
        let n = names.len();
        Arc::new(Agreement {
            admitted: (0..n).map(|_| AtomicBool::new(false)).collect(),
            read_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            origin: Instant::now(),
            sets: RwLock::new(Sets::all(n)),
            moved: RwLock::new(None),
            moving: AtomicBool::new(false),
            state: Mutex::new(State {
                readings: vec![None; n],
                loaded: vec![false; n],
                told: vec![false; n],
                excluded: vec![None; n],
                ..State::default()
            }),
            names,
            key: key.into(),
            max_ttl_ms: AtomicU64::new(u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX)),
            chosen: AtomicBool::new(chosen),
            built: AtomicBool::new(false),
            links: OnceLock::new(),
            timeout,
            ended: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether node `place` counts toward grants: it is a member, and its
    /// record was read within [`RECORD_FRESH`].
    pub(crate) fn admits(&self, place: usize) -> bool {
        self.admitted[place].load(Ordering::Acquire) && self.fresh(place)
    }

    /// Whether node `place`'s record was read within [`RECORD_FRESH`].
    fn fresh(&self, place: usize) -> bool {
        match self.read_at[place].load(Ordering::Acquire) {
            0 => false,
            at => {
                let sent = self.origin + Duration::from_millis(at - 1);
                Instant::now().saturating_duration_since(sent) <= RECORD_FRESH
            }
        }
    }

    /// Stamps node `place`'s record as read by a call sent at `sent`.
    fn stamp(&self, place: usize, sent: Instant) {
        let ms = u64::try_from(sent.saturating_duration_since(self.origin).as_millis())
            .unwrap_or(u64::MAX - 1);
        self.read_at[place].fetch_max(ms + 1, Ordering::AcqRel);
    }

    /// Why this client asks for no new grant, if the deployment's members
    /// moved away from its list: it keeps what it holds (extensions count
    /// on the nodes that stay members) and is told to restart with the new
    /// list.
    pub(crate) fn moved(&self) -> Option<Arc<str>> {
        if !self.moving.load(Ordering::Acquire) {
            return None;
        }
        self.moved
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The member sets a round counts in now: the deployment's members
    /// and, while they change, the next members (docs/agreement.md).
    pub(crate) fn sets(&self) -> Sets {
        self.sets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The record and who each node is.
    pub(crate) fn standing(&self) -> Standing {
        let state = self.lock();
        Standing {
            record: state.agreed.as_ref().map(|a| a.record.clone()),
            ids: state
                .agreed
                .as_ref()
                .map_or_else(|| vec![None; self.names.len()], |a| a.ids.clone()),
            excluded: (0..self.names.len())
                .map(|place| self.why_not_counted(&state, place))
                .collect(),
        }
    }

    /// Why node `place` counts toward no grant, where the record says so:
    /// it is no member, the client is refused, or no record is agreed yet.
    fn why_not_counted(&self, state: &State, place: usize) -> Option<String> {
        if self.admits(place) {
            return None;
        }
        if let Some(why) = &state.excluded[place] {
            return Some(why.to_string());
        }
        if state.agreed.is_some() {
            return None; // not read yet, or being adopted back
        }
        Some(match &state.refused {
            Some(why) => why.to_string(),
            None => self.undecided(state),
        })
    }

    /// What an undecided client says of itself.
    fn undecided(&self, state: &State) -> String {
        let answered = state.readings.iter().flatten().count();
        format!(
            "no deployment record agreed yet: {answered} of {} nodes answered (a quorum of \
             them to read it, every one to create it)",
            self.names.len()
        )
    }

    /// Says, once built, that the record is not agreed yet (too few nodes
    /// answered): no node counts toward a grant until it is.
    pub(crate) fn warn_undecided(&self) {
        let state = self.lock();
        if state.agreed.is_none() && state.refused.is_none() {
            tracing::warn!(
                "{}; no node counts toward a grant until it is (docs/agreement.md)",
                self.undecided(&state)
            );
        }
    }

    /// Fixes the client's longest TTL at what it grants with: the
    /// record's where it was agreed at connect and the user chose none,
    /// else its own; a record agreed later must match it. Returns it.
    pub(crate) fn fix_max_ttl(&self) -> Duration {
        let state = self.lock();
        if let Some(agreed) = &state.agreed {
            self.max_ttl_ms
                .store(agreed.record.max_ttl_ms(), Ordering::Relaxed);
        }
        self.chosen.store(true, Ordering::Relaxed);
        self.built.store(true, Ordering::Relaxed);
        Duration::from_millis(self.max_ttl_ms.load(Ordering::Relaxed))
    }

    /// Some node answered.
    pub(crate) fn answered(&self) -> bool {
        self.lock().readings.iter().any(Option::is_some)
    }

    /// The record is agreed, or the client refused.
    pub(crate) fn decided(&self) -> bool {
        let state = self.lock();
        state.agreed.is_some() || state.refused.is_some()
    }

    /// Why the client is refused, if it is: it does not match the record,
    /// or one of its nodes that answered is no member.
    pub(crate) fn refused(&self) -> Option<Mismatch> {
        let state = self.lock();
        state
            .refused
            .clone()
            .or_else(|| state.excluded.iter().flatten().next().cloned())
    }

    /// Writes the handshake's read of the record into `out` (node `place`
    /// takes a fresh id if it has none).
    pub(crate) fn encode_read(&self, loaded: bool, out: &mut Vec<u8>) {
        let id = fresh_id();
        let call = DeploymentCall {
            id: &id,
            write: None,
            addresses: &self.names,
            known: &[],
        };
        scripts::encode_deployment(loaded, &self.key, &call, out);
    }

    /// The links to write through (once, after they start).
    pub(crate) fn bind(&self, links: Vec<Weak<Link>>) {
        let _ = self.links.set(links);
    }

    /// Node `place` connected (with the function library `loaded`) and
    /// answered `reading` (`None`: it could not say) to a read sent at
    /// `sent`. Decides what can be decided, and starts the writes that
    /// follow (unless a batch is under way or the links are not bound).
    pub(crate) fn met(
        self: &Arc<Self>,
        place: usize,
        loaded: bool,
        reading: Option<Reading>,
        sent: Instant,
    ) {
        let start = {
            let mut state = self.lock();
            if reading.is_some() {
                self.stamp(place, sent);
            }
            if reading.is_none() {
                // A connection that could not read the record counts for
                // nothing it has not shown.
                self.admitted[place].store(false, Ordering::Release);
            }
            if reading.as_ref().is_some_and(|r| r.record.is_none()) {
                state.told[place] = false;
            }
            state.readings[place] = reading;
            state.loaded[place] = loaded;
            self.settle(&mut state);
            let due = !self.due(&state).is_empty();
            let start = due && !state.writing && self.links.get().is_some();
            state.writing |= start;
            start
        };
        if start {
            let agreement = Arc::clone(self);
            tokio::spawn(async move { agreement.write().await });
        }
    }

    /// Runs one batch of writes now (at connect), unless one is under way.
    /// A batch under way (begun by a node that connected meanwhile) is
    /// waited for, at most as long as a batch may take.
    pub(crate) async fn settle_now(self: &Arc<Self>) {
        let until = tokio::time::Instant::now() + self.timeout * (MAX_PASSES as u32 + 1);
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut state = self.lock();
                if !state.writing {
                    state.writing = true;
                    break;
                }
            }
            if tokio::time::timeout_at(until, ended).await.is_err() {
                return;
            }
        }
        self.write().await;
    }

    /// Reads node `place`'s record again now (at most the connect
    /// timeout).
    pub(crate) async fn reread(self: &Arc<Self>, place: usize) {
        let Some(link) = self.links.get().and_then(|l| l.get(place)?.upgrade()) else {
            return;
        };
        let loaded = self.lock().loaded[place];
        let mut command = Vec::new();
        self.encode_read(loaded, &mut command);
        let sent = Instant::now();
        let reply = tokio::time::timeout(self.timeout, link.query(command, None)).await;
        if let Ok(Ok(frame)) = reply
            && let Some(reading) = scripts::read_deployment(&frame)
        {
            self.met(place, loaded, Some(reading), sent);
        }
    }

    /// Decides, or (once agreed) admits each node, from the readings.
    fn settle(&self, state: &mut State) {
        if state.agreed.is_none() {
            let max_ttl_ms = self.max_ttl_ms.load(Ordering::Relaxed);
            match deployment::decide(&state.readings, max_ttl_ms) {
                Decision::Unknown => {}
                Decision::Create(record) => {
                    state.refused = None;
                    state.creating = Some(record);
                }
                // A node the record is being written to answered before
                // the write: no refusal, the write's reply decides.
                Decision::Refused(Mismatch::NotAMember { blank: true, .. })
                    if state.creating.is_some() => {}
                Decision::Refused(mismatch) => {
                    self.refuse(state, mismatch);
                }
                Decision::Agreed(agreed) => {
                    let recorded = agreed.record.max_ttl_ms();
                    let fits = recorded == max_ttl_ms
                        || (!self.chosen.load(Ordering::Relaxed) && recorded < max_ttl_ms);
                    if !fits {
                        let mismatch = Mismatch::MaxTtl {
                            configured: Duration::from_millis(max_ttl_ms),
                            recorded: agreed.record.max_ttl(),
                        };
                        self.refuse(state, mismatch);
                        return;
                    }
                    tracing::info!(record = %agreed.record, "deployment record agreed");
                    state.refused = None;
                    state.creating = None;
                    state.agreed = Some(agreed);
                }
            }
        }
        let Some(agreed) = &mut state.agreed else {
            return;
        };
        if let Some(newer) = deployment::follow(&agreed.record, &state.readings) {
            // A change of members declared, or finished, while this
            // client runs: it counts by the newer record from now on.
            tracing::warn!(
                was = %agreed.record,
                "the deployment's membership is changing or changed: now {newer} \
                 (docs/agreement.md)"
            );
            agreed.record = newer;
        }
        for place in 0..self.names.len() {
            let Some(reading) = &state.readings[place] else {
                continue;
            };
            // Ids other nodes are, or are being adopted back as.
            let taken: Vec<&str> = agreed
                .ids
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != place && (self.admits(*i) || agreed.adopt.contains(i)))
                .filter_map(|(_, id)| id.as_deref())
                .collect();
            let admission = deployment::admit(
                &agreed.record,
                place,
                reading,
                agreed.ids[place].as_deref(),
                &taken,
            );
            let (admitted, excluded) = match admission {
                Admission::Member => {
                    if !self.admits(place) {
                        // A member counted anew: its address is news to the
                        // holders.
                        state.told.iter_mut().for_each(|t| *t = false);
                    }
                    agreed.ids[place] = Some(reading.id.clone());
                    agreed.adopt.retain(|p| *p != place);
                    (true, None)
                }
                Admission::Adopt(id) => {
                    if !agreed.adopt.contains(&place) {
                        agreed.adopt.push(place);
                    }
                    agreed.ids[place] = Some(id);
                    (false, None)
                }
                Admission::Excluded(why) => {
                    agreed.adopt.retain(|p| *p != place);
                    (false, Some(why))
                }
            };
            self.admitted[place].store(admitted, Ordering::Release);
            if state.excluded[place] != excluded {
                if let (Some(why), true) = (&excluded, self.built.load(Ordering::Relaxed)) {
                    tracing::error!(
                        node = %self.names[place],
                        "node excluded: {why}; its yes counts toward no grant (docs/agreement.md)"
                    );
                }
                state.excluded[place] = excluded;
            }
        }
        *self.sets.write().unwrap_or_else(PoisonError::into_inner) =
            deployment::sets(&agreed.record, &agreed.ids);
        let moved = (!deployment::fits(&agreed.record, &agreed.ids)).then(|| {
            Mismatch::Moved {
                now: agreed.record.clone(),
            }
            .to_string()
        });
        let mut was = self.moved.write().unwrap_or_else(PoisonError::into_inner);
        if was.as_deref() != moved.as_deref() {
            if let Some(why) = &moved {
                tracing::error!("{why}; no new lock is asked for, what is held is kept");
            }
            self.moving.store(moved.is_some(), Ordering::Release);
            *was = moved.map(Arc::from);
        }
    }

    fn refuse(&self, state: &mut State, mismatch: Mismatch) {
        if state.refused.as_ref() != Some(&mismatch) && self.built.load(Ordering::Relaxed) {
            tracing::error!(
                "this client does not match the deployment recorded on its nodes: {mismatch}; no \
                 node counts toward a grant (docs/agreement.md)"
            );
        }
        state.creating = None;
        state.refused = Some(mismatch);
    }
}

/// A fresh node id: 16 hex digits, random.
pub(crate) fn fresh_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests;
