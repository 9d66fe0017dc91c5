//! The offline checker: reads a history (crate::history) and finds what no
//! correct run may contain.
//!
//! A hold is a `grant` line: held from the moment the acquire returned
//! until the first of its validity (its last `until`) and the holder's
//! `end`. Two holds conflict when their intervals intersect and
//! - both are exclusive (`plain`, `fenced`, `reentrant`, `many`, `lease`,
//!   `write`, `leader`) on a common resource and their holders differ
//!   (one reentrant owner's nested holds share), or
//! - one is a writer and the other a reader of the resource;
//!
//! and permits (`permit`) of one semaphore never number more than its
//! limit at once. Fences (`fenced`) and terms (`leader`) of one resource
//! grow with the order of their grants; the fenced store never accepts a
//! write whose fence is below one it accepted before; no key with a TTL is
//! left on a node after the run (`left`).
//!
//! A node's clock that jumps forward (the `clock` fault) forgets its keys,
//! and a grant that reached only a bare quorum survives no such jump
//! (docs/guarantees.md, "Clocks that jump"): contention makes such grants
//! common. Two holds, or permits over the limit, that a jump explains — the
//! earlier begun before the jump took effect (its keys were set in its last
//! round: after its task's `invoke`, and at most a TTL before its grant), the
//! later granted after the jump began and within a TTL of the later of the
//! jump and the earlier grant (by then every key set before the jump is gone
//! anyway) — are reported apart (`explained`), not as violations. A jump takes effect between the
//! fault's `begin` and `stepped` lines; one with no `stepped` did not
//! happen. A jump of a majority
//! (`clock3`, a negative control) explains nothing.

use std::collections::BTreeMap;
use std::fmt;

use crate::history::Line;

/// One hold, from its `grant` line and the lines that followed.
#[derive(Debug, Clone)]
struct Hold {
    id: String,
    kind: String,
    resources: Vec<String>,
    holder: String,
    start: u64,
    /// When its task began the operation (`invoke`): its keys were set on
    /// the nodes somewhere between this and `start`.
    invoked: u64,
    until: u64,
    end: Option<u64>,
    fence: Option<u64>,
    limit: Option<u64>,
}

impl Hold {
    /// When the holder stops being entitled to act: its validity, or
    /// earlier when it let go.
    fn stop(&self) -> u64 {
        self.end.map_or(self.until, |end| end.min(self.until))
    }

    fn exclusive(&self) -> bool {
        !matches!(self.kind.as_str(), "read" | "permit")
    }
}

/// Something no correct run contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two holds that exclude each other were valid at once.
    Overlap {
        /// The resource.
        resource: String,
        /// The earlier grant's id and kind.
        first: (String, String),
        /// The later grant's id and kind.
        second: (String, String),
        /// How long both were valid, in nanoseconds.
        for_ns: u64,
    },
    /// More permits than the semaphore's limit at once.
    TooManyPermits {
        /// The semaphore.
        semaphore: String,
        /// The earliest of the permits held at once.
        earliest: String,
        /// How many at once.
        held: usize,
        /// Its limit.
        limit: u64,
        /// The grant that went over.
        id: String,
    },
    /// A later grant's fence (or term) is not above an earlier one's.
    FenceBackwards {
        /// The resource.
        resource: String,
        /// The earlier grant and its fence.
        earlier: (String, u64),
        /// The later grant and its fence.
        later: (String, u64),
    },
    /// The store accepted a write with a fence below one it had accepted.
    StaleWrite {
        /// The resource whose store it is.
        resource: String,
        /// The stale write's grant and fence.
        id: String,
        /// Its fence.
        fence: u64,
        /// The highest fence accepted before it.
        highest: u64,
    },
    /// A release cut on its way to a node (`cut`) was not sent again: the
    /// node still held the releaser's token under the key well after.
    ReleaseNotResent {
        /// The node (1-based).
        node: String,
        /// The key.
        key: String,
    },
    /// A key with a TTL found on a node after the run.
    KeyLeft {
        /// The node (1-based).
        node: String,
        /// The key.
        key: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                resource,
                first,
                second,
                for_ns,
            } => write!(
                f,
                "two holders of {resource}: {} ({}) and {} ({}) both valid for {:.1} ms",
                first.0,
                first.1,
                second.0,
                second.1,
                *for_ns as f64 / 1e6
            ),
            Violation::TooManyPermits {
                semaphore,
                earliest,
                held,
                limit,
                id,
            } => write!(
                f,
                "{held} permits of {semaphore} at once (limit {limit}) when {id} was granted \
                 (the earliest held: {earliest})"
            ),
            Violation::FenceBackwards {
                resource,
                earlier,
                later,
            } => write!(
                f,
                "fence of {resource} went backwards: {} had {}, the later {} has {}",
                earlier.0, earlier.1, later.0, later.1
            ),
            Violation::StaleWrite {
                resource,
                id,
                fence,
                highest,
            } => write!(
                f,
                "the store of {resource} accepted {id}'s write with fence {fence} after fence {highest}"
            ),
            Violation::ReleaseNotResent { node, key } => {
                write!(
                    f,
                    "a release of {key} cut on its way to node {node} was not sent again"
                )
            }
            Violation::KeyLeft { node, key } => {
                write!(f, "key {key} left on node {node} after the run")
            }
        }
    }
}

/// What a history holds, and what is wrong with it.
#[derive(Debug, Default)]
pub struct Report {
    /// Grants by kind.
    pub grants: BTreeMap<String, u64>,
    /// Failed acquires by kind and error.
    pub fails: BTreeMap<String, u64>,
    /// Acquires whose outcome on the nodes is unknown, by kind and error.
    pub unknown: BTreeMap<String, u64>,
    /// Operations begun (`invoke`).
    pub invoked: u64,
    /// Releases that returned an error (their outcome unknown).
    pub releases_unknown: u64,
    /// Faults begun, by name.
    pub faults: BTreeMap<String, u64>,
    /// Node restarts by the fault that made them, each with how many the
    /// nemesis found quarantined (the dataset mark, as the clients read it,
    /// or every one where the clients do not trust durable restarts): the
    /// nemesis's `note restart=N quarantine_ms=…`.
    pub restarts: BTreeMap<String, (u64, u64)>,
    /// Store writes accepted and rejected.
    pub writes: (u64, u64),
    /// Everything wrong, in the order found.
    pub violations: Vec<Violation>,
    /// Overlaps and permits over the limit that a single clock jump
    /// explains (the rule allows them for grants on a bare quorum).
    pub explained: Vec<Violation>,
    /// The span of the history, in nanoseconds.
    pub span_ns: u64,
    /// The clients' connection events (`link`, [`crate::link_log`]), by
    /// what happened.
    pub links: BTreeMap<String, u64>,
    /// For each node a key was left on, its last connection events
    /// ([`TRAIL`] at most), as printed.
    pub trails: Vec<String>,
}

/// How many of a node's last connection events the report shows when a
/// key was left on it.
pub const TRAIL: usize = 8;

impl Report {
    /// Total grants.
    pub fn total_grants(&self) -> u64 {
        self.grants.values().sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "history of {:.1} s: {} grants, {} writes accepted, {} rejected",
            self.span_ns as f64 / 1e9,
            self.total_grants(),
            self.writes.0,
            self.writes.1
        )?;
        let list = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "grants by kind: {}", list(&self.grants))?;
        writeln!(f, "faults by kind: {}", list(&self.faults))?;
        if !self.restarts.is_empty() {
            let restarts = self
                .restarts
                .iter()
                .map(|(k, (all, quarantined))| format!("{k} {quarantined} of {all}"))
                .collect::<Vec<_>>()
                .join(", ");
            writeln!(f, "restarts quarantined, by fault: {restarts}")?;
        }
        writeln!(f, "operations invoked: {}", self.invoked)?;
        writeln!(f, "failed acquires: {}", list(&self.fails))?;
        writeln!(f, "acquires of unknown outcome: {}", list(&self.unknown))?;
        writeln!(f, "releases of unknown outcome: {}", self.releases_unknown)?;
        writeln!(f, "connection events: {}", list(&self.links))?;
        if !self.explained.is_empty() {
            writeln!(
                f,
                "explained by a clock jump (a grant on a bare quorum survives none): {}",
                self.explained.len()
            )?;
            for v in self.explained.iter().take(5) {
                writeln!(f, "  {v}")?;
            }
        }
        writeln!(f, "violations: {}", self.violations.len())?;
        for v in self.violations.iter().take(20) {
            writeln!(f, "  {v}")?;
        }
        if self.violations.len() > 20 {
            writeln!(f, "  ... and {} more", self.violations.len() - 20)?;
        }
        if !self.trails.is_empty() {
            writeln!(
                f,
                "the last connection events of the nodes keys were left on:"
            )?;
            for line in &self.trails {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}

/// Checks a history's lines (in any order).
pub fn check(lines: impl IntoIterator<Item = Line>) -> Report {
    let mut report = Report::default();
    let mut holds: BTreeMap<String, Hold> = BTreeMap::new();
    let mut writes: BTreeMap<String, Vec<(u64, String, u64, bool)>> = BTreeMap::new();
    let (mut first, mut last) = (u64::MAX, 0);
    // Each jump: when it began, when it had taken effect (`None`: it did
    // not).
    let mut jumps: Vec<(u64, Option<u64>)> = Vec::new();
    let mut ttl_ns: u64 = 2_000_000_000;
    // Each task's last `invoke`, by process and task.
    let mut invoked: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut lines: Vec<Line> = lines.into_iter().collect();
    lines.sort_by_key(|l| l.t);
    let mut links: Vec<Line> = Vec::new();
    for line in lines {
        first = first.min(line.t);
        last = last.max(line.t);
        let id = line.get("id").unwrap_or_default().to_owned();
        match line.event.as_str() {
            "grant" => {
                let kind = line.get("kind").unwrap_or("?").to_owned();
                *report.grants.entry(kind.clone()).or_default() += 1;
                let task = (
                    line.proc.clone(),
                    line.get("task").unwrap_or_default().to_owned(),
                );
                let hold = Hold {
                    invoked: invoked.get(&task).copied().unwrap_or(line.t).min(line.t),
                    id: id.clone(),
                    kind,
                    resources: line
                        .get("res")
                        .unwrap_or_default()
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                    holder: line.get("holder").unwrap_or(&line.proc).to_owned(),
                    start: line.t,
                    until: line.num("until").unwrap_or(line.t),
                    end: None,
                    fence: line.num("fence"),
                    limit: line.num("limit"),
                };
                holds.insert(id, hold);
            }
            "until" => {
                if let (Some(hold), Some(until)) = (holds.get_mut(&id), line.num("until")) {
                    hold.until = until;
                }
            }
            "end" => {
                if let Some(hold) = holds.get_mut(&id) {
                    hold.end.get_or_insert(line.t);
                }
            }
            "fail" | "unknown" => {
                let key = format!(
                    "{}:{}",
                    line.get("kind").unwrap_or("?"),
                    line.get("err").unwrap_or("?")
                );
                let counts = if line.event == "fail" {
                    &mut report.fails
                } else {
                    &mut report.unknown
                };
                *counts.entry(key).or_default() += 1;
            }
            "invoke" => {
                report.invoked += 1;
                let task = line.get("task").unwrap_or_default().to_owned();
                invoked.insert((line.proc.clone(), task), line.t);
            }
            "released" if line.get("ok") != Some("1") => report.releases_unknown += 1,
            "write" => {
                let accepted = line.get("accepted") == Some("1");
                if accepted {
                    report.writes.0 += 1;
                } else {
                    report.writes.1 += 1;
                }
                writes
                    .entry(line.get("res").unwrap_or_default().to_owned())
                    .or_default()
                    .push((
                        line.num("seq").unwrap_or_default(),
                        id,
                        line.num("fence").unwrap_or_default(),
                        accepted,
                    ));
            }
            "fault" if line.get("phase") == Some("stepped") => {
                if let Some(jump) = jumps.last_mut() {
                    jump.1 = Some(line.t);
                }
            }
            "note" if line.get("restart").is_some() => {
                let fault = line.get("fault").unwrap_or("?").to_owned();
                let entry = report.restarts.entry(fault).or_default();
                entry.0 += 1;
                entry.1 += u64::from(line.num("quarantine_ms").unwrap_or(0) > 0);
            }
            "note" if line.num("ttl_ms").is_some() => {
                ttl_ns = line.num("ttl_ms").unwrap_or(2000) * 1_000_000;
            }
            "fault" if line.get("phase") == Some("begin") => {
                if line.get("name") == Some("clock") {
                    jumps.push((line.t, None));
                }
                *report
                    .faults
                    .entry(line.get("name").unwrap_or("?").to_owned())
                    .or_default() += 1;
            }
            "kept" => report.violations.push(Violation::ReleaseNotResent {
                node: line.get("node").unwrap_or("?").to_owned(),
                key: line.get("key").unwrap_or("?").to_owned(),
            }),
            "left" => report.violations.push(Violation::KeyLeft {
                node: line.get("node").unwrap_or("?").to_owned(),
                key: line.get("key").unwrap_or("?").to_owned(),
            }),
            "link" => {
                // Counted by the message's head (up to a colon, 40
                // characters): the trails print it whole.
                let what = line.get("what").unwrap_or("?");
                let head = what.split(':').next().unwrap_or(what);
                let head: String = head.chars().take(40).collect();
                *report.links.entry(head).or_default() += 1;
                links.push(line);
            }
            _ => {}
        }
    }
    report.span_ns = last.saturating_sub(first.min(last));
    report.trails = trails(&report.violations, &links, first);
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds.values() {
        for r in &hold.resources {
            by_resource.entry(r).or_default().push(hold);
        }
    }
    for (resource, mut list) in by_resource {
        list.sort_by_key(|h| (h.start, h.id.clone()));
        overlaps(resource, &list, &mut report.violations);
        fences(resource, &list, &mut report.violations);
    }
    // What a single jump explains: begun before it took effect, granted
    // after it began.
    let start = |id: &str| holds.get(id).map(|h| h.start);
    let began = |id: &str| {
        holds
            .get(id)
            .map(|h| h.invoked.max(h.start.saturating_sub(ttl_ns)))
    };
    // `first`'s keys were set before a jump took effect, `second` was
    // granted after it began, and before `first`'s validity from its grant
    // (or from the jump, if granted before it) ran out: its keys set before
    // the jump would have been gone by then anyway.
    let jumped = |first: &str, second: &str| match (began(first), start(first), start(second)) {
        (Some(before), Some(granted), Some(after)) => jumps.iter().any(|&(began, stepped)| {
            stepped.is_some_and(|stepped| {
                before < stepped && began <= after && after < stepped.max(granted) + ttl_ns
            })
        }),
        _ => false,
    };
    let (explained, violations) = std::mem::take(&mut report.violations)
        .into_iter()
        .partition(|v| match v {
            Violation::Overlap { first, second, .. } => jumped(&first.0, &second.0),
            Violation::TooManyPermits { id, earliest, .. } => jumped(earliest, id),
            _ => false,
        });
    report.explained = explained;
    report.violations = violations;
    for (resource, mut list) in writes {
        list.sort();
        let mut highest: Option<u64> = None;
        for (_, id, fence, accepted) in list {
            if !accepted {
                continue;
            }
            if let Some(h) = highest.filter(|h| fence < *h) {
                report.violations.push(Violation::StaleWrite {
                    resource: resource.clone(),
                    id,
                    fence,
                    highest: h,
                });
            }
            highest = highest.max(Some(fence));
        }
    }
    report
}

/// Conflicting holds of one resource, `list` in order of their start.
fn overlaps(resource: &str, list: &[&Hold], out: &mut Vec<Violation>) {
    let mut active: Vec<&Hold> = Vec::new();
    for &hold in list {
        active.retain(|a| a.stop() > hold.start);
        if hold.stop() <= hold.start {
            continue; // never valid (granted after its validity ended)
        }
        if hold.kind == "permit" {
            let permits = active.iter().filter(|a| a.kind == "permit");
            let held = 1 + permits.clone().count();
            if let Some(limit) = hold.limit.filter(|l| held as u64 > *l) {
                let earliest = permits.map(|a| a.id.clone()).next().unwrap_or_default();
                out.push(Violation::TooManyPermits {
                    semaphore: resource.to_owned(),
                    earliest,
                    held,
                    limit,
                    id: hold.id.clone(),
                });
            }
        } else {
            for a in &active {
                let conflict = (a.exclusive() || hold.exclusive())
                    && a.kind != "permit"
                    && (a.holder != hold.holder || !a.exclusive() || !hold.exclusive());
                if conflict {
                    out.push(Violation::Overlap {
                        resource: resource.to_owned(),
                        first: (a.id.clone(), a.kind.clone()),
                        second: (hold.id.clone(), hold.kind.clone()),
                        for_ns: a.stop().min(hold.stop()) - hold.start,
                    });
                }
            }
        }
        active.push(hold);
    }
}

/// Fences (and terms) of one resource that do not grow with the grants.
fn fences(resource: &str, list: &[&Hold], out: &mut Vec<Violation>) {
    let mut highest: Option<(&str, u64)> = None;
    for hold in list {
        let Some(fence) = hold.fence else { continue };
        if let Some((id, h)) = highest.filter(|(_, h)| fence <= *h) {
            out.push(Violation::FenceBackwards {
                resource: resource.to_owned(),
                earlier: (id.to_owned(), h),
                later: (hold.id.clone(), fence),
            });
        }
        if highest.is_none_or(|(_, h)| fence > h) {
            highest = Some((&hold.id, fence));
        }
    }
}

#[cfg(test)]
mod tests;

/// The last [`TRAIL`] connection events of each node a key was left on,
/// their times from the history's start.
fn trails(violations: &[Violation], links: &[Line], first: u64) -> Vec<String> {
    let mut nodes: Vec<&str> = violations
        .iter()
        .filter_map(|v| match v {
            Violation::KeyLeft { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    nodes.dedup();
    let mut out = Vec::new();
    for node in nodes {
        let on_node: Vec<&Line> = links
            .iter()
            .filter(|l| l.get("node") == Some(node))
            .collect();
        if on_node.is_empty() {
            out.push(format!("node {node}: none"));
        }
        for line in &on_node[on_node.len().saturating_sub(TRAIL)..] {
            let rest: Vec<String> = line
                .fields
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "node" | "what"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.push(format!(
                "node {node} at {:.3} s, {}: {} {}",
                line.t.saturating_sub(first) as f64 / 1e9,
                line.proc,
                line.get("what").unwrap_or("?"),
                rest.join(" ")
            ));
        }
    }
    out
}
