//! The deployment record itself: its members, the next members while the
//! membership changes, `max_ttl` and epoch, and how it is shown.

use std::fmt;
use std::time::Duration;

/// What the nodes record of the deployment: its members (by the ids the
/// nodes hold, sorted), the next members while the membership changes, its
/// longest TTL, and its epoch (0 when first used, one more at each step of
/// each change: a node holding a lower epoch is behind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    members: Vec<String>,
    next: Vec<String>,
    max_ttl_ms: u64,
    epoch: u64,
}

/// Ids sorted, each once.
fn sorted(ids: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

impl Record {
    /// The record of `members` (any order; sorted here) and `max_ttl_ms`,
    /// at epoch 0, no change under way.
    pub fn new(members: impl IntoIterator<Item = String>, max_ttl_ms: u64) -> Self {
        Record {
            members: sorted(members),
            next: Vec::new(),
            max_ttl_ms,
            epoch: 0,
        }
    }

    /// This record at `epoch`, changing to `next` (empty: no change).
    pub fn at(mut self, epoch: u64, next: impl IntoIterator<Item = String>) -> Self {
        self.epoch = epoch;
        self.next = sorted(next);
        self
    }

    /// The first step of a change to `next`: the joint record, one epoch
    /// on, in which every grant needs a majority of the members and one of
    /// `next` (docs/agreement.md, "Changing members").
    ///
    /// ```
    /// use redquorum::deployment::Record;
    /// let ids = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    /// let before = Record::new(ids("a b c"), 1_000);
    /// let joint = before.joint(ids("a b d"));
    /// assert!(joint.changing());
    /// assert_eq!(joint.epoch(), 1);
    /// let after = joint.finished();
    /// assert_eq!((after.members(), after.epoch()), (&ids("a b d")[..], 2));
    /// assert!(!after.changing());
    /// ```
    pub fn joint(&self, next: impl IntoIterator<Item = String>) -> Self {
        self.clone().at(self.epoch + 1, next)
    }

    /// The last step of a change: the next members alone, one epoch on
    /// (a record not changing is only moved to the next epoch).
    pub fn finished(&self) -> Self {
        let members = if self.changing() {
            self.next.clone()
        } else {
            self.members.clone()
        };
        Record {
            members,
            next: Vec::new(),
            max_ttl_ms: self.max_ttl_ms,
            epoch: self.epoch + 1,
        }
    }

    /// The members' ids, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The next members' ids, sorted, while the membership changes (else
    /// empty).
    pub fn next(&self) -> &[String] {
        &self.next
    }

    /// Whether the membership is changing: grants need a majority of the
    /// members and one of the next members.
    pub fn changing(&self) -> bool {
        !self.next.is_empty()
    }

    /// The record's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether `id` is a member or a next member.
    pub fn lists(&self, id: &str) -> bool {
        self.members.iter().chain(&self.next).any(|m| m == id)
    }

    /// The member lists a client may be configured with: the members, and
    /// the next members while changing.
    pub(super) fn lists_of(&self) -> impl Iterator<Item = &[String]> {
        std::iter::once(&self.members[..]).chain(self.changing().then_some(&self.next[..]))
    }

    /// The longest TTL.
    pub fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.max_ttl_ms)
    }

    /// The longest TTL in milliseconds.
    pub fn max_ttl_ms(&self) -> u64 {
        self.max_ttl_ms
    }

    /// 12 hex digits naming the member set (FNV-1a of the sorted ids):
    /// the same for every client that agrees, whatever the URLs.
    ///
    /// ```
    /// use redquorum::deployment::Record;
    /// let a = Record::new(["x".into(), "y".into()], 1_000);
    /// let b = Record::new(["y".into(), "x".into()], 2_000);
    /// assert_eq!(a.fingerprint(), b.fingerprint());
    /// assert_eq!(a.fingerprint().len(), 12);
    /// ```
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.members)
    }
}

/// 12 hex digits naming the sorted ids `set`.
fn fingerprint(set: &[String]) -> String {
    let hash = set
        .join(",")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{hash:016x}")[..12].to_owned()
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} members (set {}), max_ttl {:?}",
            self.members.len(),
            self.fingerprint(),
            self.max_ttl()
        )?;
        if self.changing() {
            write!(
                f,
                ", changing to {} members (set {})",
                self.next.len(),
                fingerprint(&self.next)
            )?;
        }
        if self.epoch > 0 {
            write!(f, ", epoch {}", self.epoch)?;
        }
        Ok(())
    }
}
