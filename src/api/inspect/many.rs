//! Inspections of what several hold at once: a read/write lock's readers
//! and writer (its writer key read as a plain lock's), and a semaphore's
//! slots.

use std::time::Duration;

use super::{Holding, Inspection, NodeView, TimeLeft, Verdict};
#[cfg(doc)]
use crate::api::redlock::Redlock;
#[cfg(doc)]
use crate::api::semaphore::Semaphore;

/// A read/write lock's readers and writer intent on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwHolding {
    /// The writer key, as a plain lock's.
    pub writer: Holding,
    /// The live readers (their tokens) and the time each has left by the
    /// node's clock, longest-lived last.
    pub readers: Vec<(String, Duration)>,
    /// A waiting writer's intent: its token and how long it stands.
    pub intent: Option<(String, TimeLeft)>,
}

/// One reader of a read/write lock, across the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reader {
    /// Its token.
    pub token: String,
    /// On how many nodes it is live.
    pub nodes: usize,
}

/// What every node holds for a read/write lock: the writer (as a plain
/// lock's [`Inspection`]), the readers and a waiting writer's intent. See
/// [`RwLock::inspect`](crate::RwLock::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct RwInspection {
    pub(super) writer: Inspection,
    pub(super) nodes: Vec<NodeView<RwHolding>>,
    pub(super) readers: Vec<Reader>,
}

impl RwInspection {
    /// The writer key's inspection: who writes, if anyone, by quorum.
    pub fn writer(&self) -> &Inspection {
        &self.writer
    }

    /// Every node's readers and intent, in configured order.
    pub fn nodes(&self) -> &[NodeView<RwHolding>] {
        &self.nodes
    }

    /// Every reader live on some node, with on how many.
    pub fn readers(&self) -> &[Reader] {
        &self.readers
    }

    /// How many readers hold the lock: live on a quorum of nodes.
    pub fn readers_held(&self) -> usize {
        let quorum = self.writer.quorum;
        self.readers.iter().filter(|r| r.nodes >= quorum).count()
    }

    /// Whether the unreachable nodes could change how many readers hold
    /// it (a reader live on fewer than a quorum that they could complete).
    pub fn readers_uncertain(&self) -> bool {
        let quorum = self.writer.quorum;
        let unreachable = self.nodes.len() - self.writer.reachable();
        self.readers
            .iter()
            .any(|r| r.nodes < quorum && r.nodes + unreachable >= quorum)
    }

    /// On how many nodes a waiting writer's intent stands.
    pub fn intent_nodes(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(&n.read, Ok(h) if h.intent.is_some()))
            .count()
    }
}

/// Every slot of a semaphore, inspected: see [`Semaphore::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct SemaphoreInspection {
    pub(super) slots: Vec<Inspection>,
}

impl SemaphoreInspection {
    /// Each slot's inspection, slot 0 first; a slot's resource reads
    /// `name:permit:slot` (its key is [`Semaphore::slot_key`]).
    pub fn slots(&self) -> &[Inspection] {
        &self.slots
    }

    /// How many permits are held: slots held on a quorum.
    pub fn held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.verdict(), Verdict::Held { .. }))
            .count()
    }

    /// How many permits are free now (Redisson's `availablePermits`): the
    /// slots free on a quorum. A snapshot: one may be taken a moment later.
    /// Slots neither held nor free on a quorum (too few nodes answered)
    /// count as neither.
    pub fn available(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.verdict(), Verdict::Free { .. }))
            .count()
    }

    /// Whether the unreachable nodes could change [`held`](Self::held).
    pub fn uncertain(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s.verdict(), Verdict::Unknown { .. }))
    }
}
