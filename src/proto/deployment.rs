//! The deployment record: what every client of one set of nodes must agree
//! on — which nodes are the members and the longest TTL — as the nodes
//! record it, and what a client decides from what its nodes answered
//! (docs/agreement.md).
//!
//! Each node holds, under the client's key prefix, an identity of its own
//! (a random id written by the first client that reads it) and, once the
//! deployment is first used, the record: the members' ids and `max_ttl`.
//! A node may also say which member it knows a client's address to be
//! (`seen`): that is how a member that lost its data (an empty restart, a
//! lost volume) is told from a new node at another address.
//!
//! [`decide`] is pure: the client hands it one [`Reading`] per node that
//! answered, in the order of its configuration.
//!
//! ```
//! use redquorum::deployment::{decide, Decision, Reading, Record};
//!
//! let blank = |id: &str| Reading::blank(id, 3);
//! // First use: every node answered, none holds a record: create it.
//! let fresh = [Some(blank("a")), Some(blank("b")), Some(blank("c"))];
//! let record = match decide(&fresh, 30_000) {
//!     Decision::Create(record) => record,
//!     other => panic!("{other:?}"),
//! };
//! assert_eq!(record.members(), ["a", "b", "c"]);
//!
//! // A client whose third node is another (new, empty) server at an
//! // address no member knows: refused, never counted.
//! let held = |id: &str| Reading::holding(id, record.clone(), vec![None; 3]);
//! let replaced = [Some(held("a")), Some(held("b")), Some(blank("z"))];
//! assert!(matches!(decide(&replaced, 30_000), Decision::Refused(_)));
//! ```

use std::fmt;
use std::time::Duration;

use super::quorum::quorum;

mod record;
pub use record::Record;

/// What one node answered: its id, the record it holds (`None`: none,
/// a node new or emptied) and, for each of the client's nodes in order,
/// which member it knows that node's address to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The node's id.
    pub id: String,
    /// The record it holds.
    pub record: Option<Record>,
    /// For each of the client's nodes, the member id this node has seen
    /// at that address, if any.
    pub seen: Vec<Option<String>>,
}

impl Reading {
    /// A node `id` that holds no record (and so knows no address), for a
    /// client of `nodes` nodes.
    pub fn blank(id: &str, nodes: usize) -> Self {
        Reading {
            id: id.to_owned(),
            record: None,
            seen: vec![None; nodes],
        }
    }

    /// A node `id` holding `record`, knowing the addresses `seen`.
    pub fn holding(id: &str, record: Record, seen: Vec<Option<String>>) -> Self {
        Reading {
            id: id.to_owned(),
            record: Some(record),
            seen,
        }
    }
}

/// What a client does with what its nodes answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Too few nodes answered to say: wait for more.
    Unknown,
    /// No node holds a record and every node answered: write this one
    /// (where none is yet), then decide again.
    Create(Record),
    /// The record, agreed: the client's nodes are its members.
    Agreed(Agreed),
    /// The client's settings differ from the record.
    Refused(Mismatch),
}

/// An agreed record and who each of the client's nodes is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// The record.
    pub record: Record,
    /// For each of the client's nodes, the member it is: its own id where
    /// it holds the record, else the id the members know its address by
    /// (`None`: not known yet).
    pub ids: Vec<Option<String>>,
    /// Nodes that answered without the record but are known members (a
    /// member that lost its data): the record is written back there,
    /// under the member's id.
    pub adopt: Vec<usize>,
}

/// How a client's settings differ from the record (never a secret: ids,
/// counts and positions in the client's list).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// The nodes that answered hold different records.
    Conflicting {
        /// How many different records.
        records: usize,
    },
    /// The client lists another number of nodes than the record.
    MemberCount {
        /// Nodes the client lists.
        configured: usize,
        /// Members the record lists.
        recorded: usize,
    },
    /// One of the client's nodes is no member: another server, or a new
    /// one at an address no member knows.
    NotAMember {
        /// Its position in the client's list.
        node: usize,
        /// Its id (a new or emptied node has one too).
        id: String,
        /// It holds no record.
        blank: bool,
    },
    /// The deployment's members are no longer this client's list: its
    /// membership changed (under a running client, or before this one
    /// started with an old list).
    Moved {
        /// The record the node holds now.
        now: Record,
    },
    /// Two of the client's nodes are one member.
    SameMember {
        /// Their positions in the client's list.
        nodes: (usize, usize),
    },
    /// The client's `max_ttl` is not the record's.
    MaxTtl {
        /// The client's.
        configured: Duration,
        /// The record's.
        recorded: Duration,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Conflicting { records } => write!(
                f,
                "the nodes hold {records} different deployment records (clients created them \
                 with different settings)"
            ),
            Mismatch::MemberCount {
                configured,
                recorded,
            } => write!(
                f,
                "this client lists {configured} nodes, the deployment has {recorded} members"
            ),
            Mismatch::NotAMember {
                node,
                id,
                blank: true,
            } => write!(
                f,
                "node #{} (id {id}) holds no deployment record and no member knows its address: a \
                 new server, not a member",
                node + 1
            ),
            Mismatch::NotAMember { node, id, .. } => {
                write!(f, "node #{} (id {id}) is not a member", node + 1)
            }
            Mismatch::Moved { now } => write!(
                f,
                "the membership moved: the deployment is now {now}; this client's list is not \
                 its members; start it again with the new list (docs/agreement.md)"
            ),
            Mismatch::SameMember { nodes } => write!(
                f,
                "nodes #{} and #{} are the same member",
                nodes.0 + 1,
                nodes.1 + 1
            ),
            Mismatch::MaxTtl {
                configured,
                recorded,
            } => write!(
                f,
                "this client's max_ttl is {configured:?}, the deployment's {recorded:?}"
            ),
        }
    }
}

/// Decides from `readings`, one per client node in order (`None`: no
/// answer yet), for a client whose record would carry `max_ttl_ms`.
///
/// - Every node that answered and holds a record must hold the same one;
/// - an answering node without one is a member that lost its data when
///   the record's holders know its address as a member nobody else
///   answered as (it is adopted); otherwise it is not a member;
/// - the record must list as many members as the client has nodes, each
///   answering node must be one of them, once, and a quorum of the
///   client's nodes must have answered (else: wait, never guess);
/// - with no record anywhere, every node must have answered to create one.
///
/// `max_ttl` is checked by the caller, which knows whether it was chosen.
pub fn decide(readings: &[Option<Reading>], max_ttl_ms: u64) -> Decision {
    let n = readings.len();
    let answered = || {
        readings
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.as_ref()?)))
    };
    // The newest record decides; a node holding an older one is behind
    // (it missed a step of a change) and is written forward.
    let newest = answered()
        .filter_map(|(_, r)| Some(r.record.as_ref()?.epoch()))
        .max();
    let mut records: Vec<&Record> = Vec::new();
    for (_, reading) in answered() {
        if let Some(record) = &reading.record
            && Some(record.epoch()) == newest
            && !records.contains(&record)
        {
            records.push(record);
        }
    }
    let record = match records.as_slice() {
        [] if answered().count() == n && n > 0 => {
            return match same_ids(readings) {
                Some(nodes) => Decision::Refused(Mismatch::SameMember { nodes }),
                None => Decision::Create(Record::new(
                    answered().map(|(_, r)| r.id.clone()),
                    max_ttl_ms,
                )),
            };
        }
        [] => return Decision::Unknown,
        [record] => (*record).clone(),
        more => {
            return Decision::Refused(Mismatch::Conflicting {
                records: more.len(),
            });
        }
    };
    if !record.lists_of().any(|list| list.len() == n) {
        return Decision::Refused(if record.epoch() > 0 {
            Mismatch::Moved { now: record }
        } else {
            Mismatch::MemberCount {
                configured: n,
                recorded: record.members().len(),
            }
        });
    }
    let mut ids: Vec<Option<String>> = vec![None; n];
    let mut adopt = Vec::new();
    for (i, reading) in answered() {
        if reading.record.is_some() {
            if !record.lists(&reading.id) {
                return Decision::Refused(outside(i, reading, &record));
            }
            ids[i] = Some(reading.id.clone());
        }
    }
    // Who the holders know each other node's address to be.
    for i in 0..n {
        if ids[i].is_some() {
            continue;
        }
        let known = known_as(readings, i).filter(|id| {
            record.lists(id) && !answered().any(|(_, r)| r.record.is_some() && &r.id == id)
        });
        match (&readings[i], known) {
            (Some(reading), None) => return Decision::Refused(not_a_member(i, reading)),
            (Some(_), Some(id)) => {
                adopt.push(i);
                ids[i] = Some(id);
            }
            (None, known) => ids[i] = known,
        }
    }
    if let Some(nodes) = same_ids(&ids) {
        return Decision::Refused(Mismatch::SameMember { nodes });
    }
    if !fits(&record, &ids) {
        return Decision::Refused(Mismatch::Moved { now: record });
    }
    // Every answering node holds the record or is a known member: with
    // fewer than a quorum answering, the others may yet say otherwise.
    if answered().count() < quorum(n) {
        return Decision::Unknown;
    }
    Decision::Agreed(Agreed { record, ids, adopt })
}

/// Whether a client whose nodes are the members `ids` (in its order;
/// `None`: not known yet) is configured with one of `record`'s lists: the
/// members or, while they change, the next members.
pub(crate) fn fits(record: &Record, ids: &[Option<String>]) -> bool {
    record
        .lists_of()
        .any(|list| list.len() == ids.len() && ids.iter().flatten().all(|id| list.contains(id)))
}

/// Why node `place`, answering `reading`, is not counted under `record`:
/// no member, or (the record has moved on from its first epoch) no longer
/// one.
fn outside(place: usize, reading: &Reading, record: &Record) -> Mismatch {
    if record.epoch() > 0 && reading.record.is_some() {
        Mismatch::Moved {
            now: record.clone(),
        }
    } else {
        not_a_member(place, reading)
    }
}

/// The member the record's holders know node `place`'s address to be,
/// where those that know it agree.
fn known_as(readings: &[Option<Reading>], place: usize) -> Option<String> {
    let mut known: Option<&String> = None;
    for reading in readings.iter().flatten().filter(|r| r.record.is_some()) {
        match (known, reading.seen.get(place).and_then(Option::as_ref)) {
            (_, None) => {}
            (None, Some(id)) => known = Some(id),
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => return None,
        }
    }
    known.cloned()
}

fn not_a_member(node: usize, reading: &Reading) -> Mismatch {
    Mismatch::NotAMember {
        node,
        id: reading.id.clone(),
        blank: reading.record.is_none(),
    }
}

/// Two positions with the same id, if any.
fn same_ids<T: Ids>(items: &[T]) -> Option<(usize, usize)> {
    for (i, a) in items.iter().enumerate() {
        for (j, b) in items.iter().enumerate().skip(i + 1) {
            if let (Some(a), Some(b)) = (a.id(), b.id())
                && a == b
            {
                return Some((i, j));
            }
        }
    }
    None
}

trait Ids {
    fn id(&self) -> Option<&str>;
}

impl Ids for Option<Reading> {
    fn id(&self) -> Option<&str> {
        self.as_ref().map(|r| r.id.as_str())
    }
}

impl Ids for Option<String> {
    fn id(&self) -> Option<&str> {
        self.as_deref()
    }
}

/// What a node that connects after the decision is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The member it should be.
    Member,
    /// A member that lost its data: write the record back, under this id.
    Adopt(String),
    /// Not counted: why.
    Excluded(Mismatch),
}

/// What node `place`, answering `reading`, is under the agreed `record`:
/// a node holding it, the member whose id it answers with (unless another
/// node of the client is that member: `taken`, the ids they are); a node
/// without it, the member `expected` (what the decision knew of its
/// address), adopted back.
///
/// ```
/// use redquorum::deployment::{admit, Admission, Reading, Record};
///
/// let record = Record::new(["a".into(), "b".into(), "c".into()], 1_000);
/// // Member c restarted empty: known by its address, adopted back.
/// let emptied = Reading::blank("fresh", 3);
/// assert_eq!(admit(&record, 2, &emptied, Some("c"), &[]), Admission::Adopt("c".into()));
/// // A new server where no member was known: not counted.
/// assert!(matches!(admit(&record, 2, &emptied, None, &[]), Admission::Excluded(_)));
/// ```
pub fn admit(
    record: &Record,
    place: usize,
    reading: &Reading,
    expected: Option<&str>,
    taken: &[&str],
) -> Admission {
    match &reading.record {
        None => match expected {
            Some(id) if !taken.contains(&id) && record.lists(id) => Admission::Adopt(id.to_owned()),
            _ => Admission::Excluded(not_a_member(place, reading)),
        },
        // A newer record, or another at this epoch: the deployment moved
        // under the client (a newer one it could follow is followed before
        // nodes are admitted: see `follow`).
        Some(held)
            if held.epoch() > record.epoch()
                || (held.epoch() == record.epoch() && held != record) =>
        {
            Admission::Excluded(Mismatch::Moved { now: held.clone() })
        }
        // This record, or an older one (a node behind, written forward).
        // A node that holds it answers for itself: `expected` may be a
        // stale `seen:` entry (an address given to another server since),
        // which only serves a node with no record.
        Some(_) => {
            let id = reading.id.as_str();
            if record.lists(id) && !taken.contains(&id) {
                Admission::Member
            } else {
                Admission::Excluded(outside(place, reading, record))
            }
        }
    }
}

/// The newer record a running client that agreed `record` follows, if its
/// nodes hold one: the one record at the newest epoch they answered with,
/// above `record`'s (a change declared or finished while it runs; its
/// nodes keep the member ids it knows them by).
///
/// ```
/// use redquorum::deployment::{follow, Reading, Record};
/// let ids = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
/// let agreed = Record::new(ids("a b c"), 1_000);
/// let joint = agreed.joint(ids("a b d"));
/// let readings = [
///     Some(Reading::holding("a", joint.clone(), vec![None; 3])),
///     Some(Reading::holding("b", agreed.clone(), vec![None; 3])),
///     None,
/// ];
/// assert_eq!(follow(&agreed, &readings), Some(joint));
/// ```
pub fn follow(record: &Record, readings: &[Option<Reading>]) -> Option<Record> {
    let held = || readings.iter().flatten().filter_map(|r| r.record.as_ref());
    let newest = held()
        .map(|r| r.epoch())
        .max()
        .filter(|e| *e > record.epoch())?;
    let mut at_newest = held().filter(|r| r.epoch() == newest);
    let first = at_newest.next()?;
    at_newest.all(|r| r == first).then(|| first.clone())
}

/// The member sets a client whose nodes are the members `ids` counts its
/// rounds in under `record`: the members and, while they change, the next
/// members (docs/agreement.md, "Changing members").
pub(crate) fn sets(record: &Record, ids: &[Option<String>]) -> crate::proto::joint::Sets {
    let places = |list: &[String]| {
        ids.iter()
            .map(|id| id.as_ref().is_some_and(|id| list.contains(id)))
            .collect::<Vec<_>>()
    };
    crate::proto::joint::Sets::new(record.lists_of().map(|list| (places(list), list.len())))
}

/// Whether every node of the client but `place` is accounted for as
/// another member than `id`: it answered with another id, or the holders
/// know its address as another.
pub(crate) fn accounted(
    readings: &[Option<Reading>],
    ids: &[Option<String>],
    place: usize,
    id: &str,
) -> bool {
    (0..readings.len())
        .filter(|q| *q != place)
        .all(|q| match (&readings[q], &ids[q]) {
            (Some(reading), _) => reading.id != id,
            (None, Some(known)) => known != id,
            (None, None) => false,
        })
}

#[cfg(test)]
mod tests;
