//! What is held now, found by pattern ([`Redlock::list`]): each node's keys
//! scanned (`SCAN`, bounded), then each resource found inspected, and the
//! ones held on a quorum listed. A snapshot, never a permission.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::api::redlock::Redlock;
use crate::api::rwlock::RwLock;
use crate::api::semaphore::Semaphore;
use crate::engine::dispatch::Member;
use crate::proto::error::{LockError, NodeError};
use crate::proto::input::{InputError, MAX_LISTED};
use crate::proto::quorum::quorum;
use crate::transport::scan::literal;

use super::{Holder, Inspection, TimeLeft, Verdict};

/// How many keys each node's scan keeps per entry asked for (a resource
/// has up to five keys: lock, fence, line…).
const KEYS_PER_ENTRY: usize = 8;

/// What kind of hold a listed resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ListedKind {
    /// A plain lock.
    Lock,
    /// A fenced lock, or a leadership (its fence is the term).
    Fenced,
    /// A reentrant lock (its holder is the owner).
    Reentrant,
    /// A read/write lock held by its writer.
    Writer,
    /// A read/write lock held by readers.
    Readers,
    /// A semaphore with permits held.
    Semaphore,
}

impl ListedKind {
    /// Its name, as the CLI prints it.
    ///
    /// ```
    /// use redquorum::inspect::ListedKind;
    /// assert_eq!(ListedKind::Fenced.name(), "fenced");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            ListedKind::Lock => "lock",
            ListedKind::Fenced => "fenced",
            ListedKind::Reentrant => "reentrant",
            ListedKind::Writer => "writer",
            ListedKind::Readers => "readers",
            ListedKind::Semaphore => "semaphore",
        }
    }
}

/// One resource held on a quorum of nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listed {
    /// What kind of hold.
    pub kind: ListedKind,
    /// The resource (or semaphore, or read/write lock) name.
    pub resource: String,
    /// Who holds it: the holder's label, if it gave one.
    pub label: Option<String>,
    /// The first 8 characters of the holder's token, or a reentrant lock's
    /// owner (never a whole token: a token releases the lock).
    pub holder: Option<String>,
    /// How long the holder keeps a quorum of keys, by the nodes' clocks.
    pub time_left: Option<TimeLeft>,
    /// On how many nodes.
    pub nodes: usize,
    /// A fenced lock's fence (a leadership's term).
    pub fence: Option<u64>,
    /// Readers holding a read/write lock, or permits held of a semaphore
    /// (1 for the other kinds).
    pub holds: usize,
}

/// What [`Redlock::list`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The resources held on a quorum, by name and kind.
    pub held: Vec<Listed>,
    /// Whether every resource held on a quorum and matching the pattern is
    /// there: enough nodes were scanned (`N − quorum + 1`: every quorum
    /// meets them), none was cut short, and the limit was not reached.
    pub complete: bool,
    /// The nodes that could not be scanned, and why.
    pub unscanned: Vec<(String, NodeError)>,
}

impl Redlock {
    /// The locks, read/write locks, semaphores and leaderships held now on
    /// a quorum whose name matches `pattern` (`*` matches any run of
    /// characters, every other character itself), at most `limit` of
    /// them, in name order: kind, label, token prefix, time left, nodes.
    ///
    /// Each node's keys are scanned (`SCAN`, at most
    /// [`MAX_SCAN_KEYS`](crate::inspect::MAX_SCAN_KEYS) a node), then each
    /// resource found is inspected ([`inspect`](Redlock::inspect)). Not
    /// listed: plain locks under interop keys (their key is the name
    /// alone), and nodes of your own (they cannot scan: named in
    /// [`Listing::unscanned`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(3).await;
    /// // In-memory nodes cannot scan: nothing is found, and they are named.
    /// let listing = redlock.list("job:*", 100).await?;
    /// assert!(listing.held.is_empty() && !listing.complete);
    /// assert_eq!(listing.unscanned.len(), 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Input`] for an empty pattern or a limit of 0 or above
    /// [`MAX_LISTED`](crate::inspect::MAX_LISTED). A node that cannot be
    /// scanned is no error: it is named in the listing, which then says it
    /// may be incomplete.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping it leaves nothing behind.
    pub async fn list(&self, pattern: &str, limit: usize) -> Result<Listing, LockError> {
        if pattern.is_empty() {
            return Err(InputError::EmptyResource.into());
        }
        if limit == 0 || limit > MAX_LISTED {
            return Err(InputError::InvalidListLimit(limit).into());
        }
        let driver = self.driver();
        let prefix = driver.layout().prefix().to_owned();
        let glob = format!("{}{{{}}}:*", literal(&prefix), name_glob(pattern));
        let within = driver
            .settings
            .node_timeout
            .unwrap_or(crate::settings::DEFAULT_NODE_TIMEOUT)
            .max(Duration::from_secs(1));
        let keep = (limit * KEYS_PER_ENTRY).min(MAX_SCAN_KEYS);
        let scans = driver.members().map(|(member, _)| {
            let glob = glob.as_str();
            async move {
                let scanned = match member {
                    Member::Redis(node) => node.keys(glob, keep, within).await,
                    Member::Cluster(node) => node.keys(glob, keep, within).await,
                    Member::Custom(_) => Err(NodeError::Protocol(
                        "a node of your own cannot be scanned".into(),
                    )),
                };
                (member.name().to_string(), scanned)
            }
        });
        let mut found = BTreeSet::new();
        let (mut scanned, mut cut, mut unscanned) = (0, false, Vec::new());
        let n = driver.members().count();
        for (node, result) in futures::future::join_all(scans).await {
            match result {
                Ok((keys, more)) => {
                    scanned += 1;
                    cut |= more;
                    // By name first: the listing is in name order.
                    let named = keys.iter().filter_map(|k| parse_key(&prefix, k));
                    found.extend(named.map(|(class, name)| (name, class)));
                }
                Err(e) => unscanned.push((node, e)),
            }
        }
        let mut held = Vec::new();
        let mut limited = false;
        for (name, class) in found {
            if held.len() >= limit {
                limited = true;
                break;
            }
            // A name this client refuses to read (its own checks) is left
            // out: it names nothing this client could hold.
            if let Ok(Some(listed)) = self.listed(class, name).await {
                held.push(listed);
            }
        }
        Ok(Listing {
            held,
            // Every quorum meets any n − quorum + 1 nodes.
            complete: scanned > n - quorum(n) && !cut && !limited,
            unscanned,
        })
    }
}

impl Redlock {
    /// The entry for `name`, read as `class` calls for, where it is held
    /// on a quorum.
    async fn listed(&self, class: Class, name: String) -> Result<Option<Listed>, LockError> {
        Ok(match class {
            Class::Lock => lock_entry(&name, &self.inspect(&name).await?),
            Class::ReadWrite => {
                let rw = RwLock::new(self, &name)?.inspect().await?;
                if let Some(mut listed) = lock_entry(&name, rw.writer()) {
                    listed.kind = ListedKind::Writer;
                    Some(listed)
                } else if rw.readers_held() > 0 {
                    let nodes = rw
                        .nodes()
                        .iter()
                        .filter(|n| matches!(&n.read, Ok(h) if !h.readers.is_empty()))
                        .count();
                    Some(Listed {
                        kind: ListedKind::Readers,
                        resource: name,
                        label: None,
                        holder: None,
                        time_left: None,
                        nodes,
                        fence: None,
                        holds: rw.readers_held(),
                    })
                } else {
                    None
                }
            }
            Class::Semaphore => {
                let Some(permits) = Semaphore::stored_permits(self, &name).await? else {
                    return Ok(None);
                };
                let seen = Semaphore::new(self, &name, permits)?.inspect().await?;
                let first = seen.slots().iter().find(|s| held_by(s).is_some());
                (seen.held() > 0).then(|| Listed {
                    kind: ListedKind::Semaphore,
                    resource: name,
                    label: None,
                    holder: None,
                    time_left: first.and_then(Inspection::time_left),
                    nodes: first.and_then(held_by).map_or(0, |(_, n)| n),
                    fence: None,
                    holds: seen.held(),
                })
            }
        })
    }
}

/// The most keys one node's scan keeps.
pub const MAX_SCAN_KEYS: usize = 100_000;

/// Which reading a key calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Lock,
    ReadWrite,
    Semaphore,
}

/// The kind and name a key of redquorum's names (`prefix{name}:suffix`),
/// for the keys that say something is held.
fn parse_key(prefix: &str, key: &str) -> Option<(Class, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let close = rest.rfind("}:")?;
    let (name, suffix) = (&rest[..close], &rest[close + 2..]);
    let class = match suffix {
        "lock" => Class::Lock,
        "writer" | "readers" => Class::ReadWrite,
        s if s
            .strip_prefix("permit:")
            .is_some_and(|n| n.parse::<u32>().is_ok()) =>
        {
            Class::Semaphore
        }
        _ => return None,
    };
    (!name.is_empty()).then(|| (class, name.to_owned()))
}

/// A name pattern as a `SCAN` glob: `*` stays, everything else literal.
fn name_glob(pattern: &str) -> String {
    pattern
        .split('*')
        .map(literal)
        .collect::<Vec<_>>()
        .join("*")
}

/// The holder and its node count, where a quorum holds one.
fn held_by(seen: &Inspection) -> Option<(&Holder, usize)> {
    match seen.verdict() {
        Verdict::Held { holder, nodes } => Some((holder, *nodes)),
        _ => None,
    }
}

/// A lock's entry, where a token or a reentrant owner holds it on a quorum.
fn lock_entry(name: &str, seen: &Inspection) -> Option<Listed> {
    let (holder, nodes) = held_by(seen)?;
    let (kind, holder) = match holder {
        Holder::Token(token) => {
            let kind = match seen.fence() {
                Some(_) => ListedKind::Fenced,
                None => ListedKind::Lock,
            };
            (kind, token.chars().take(8).collect())
        }
        Holder::Owner(owner) => (ListedKind::Reentrant, owner.clone()),
        _ => return None,
    };
    Some(Listed {
        kind,
        resource: name.to_owned(),
        label: seen.label().map(str::to_owned),
        holder: Some(holder),
        time_left: seen.time_left(),
        nodes,
        fence: seen.fence(),
        holds: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_what_they_hold() {
        let parse = |k| parse_key("app:", k);
        assert_eq!(parse("app:{job}:lock"), Some((Class::Lock, "job".into())));
        assert_eq!(parse("app:{a}b}:lock"), Some((Class::Lock, "a}b".into())));
        assert_eq!(
            parse("app:{doc}:readers"),
            Some((Class::ReadWrite, "doc".into()))
        );
        assert_eq!(
            parse("app:{api}:permit:3"),
            Some((Class::Semaphore, "api".into()))
        );
        assert_eq!(parse("app:{job}:fence"), None);
        assert_eq!(parse("app:{job}:line"), None);
        assert_eq!(parse("other:{job}:lock"), None);
        assert_eq!(parse("app:{}:lock"), None);
        assert_eq!(name_glob("job:*:x?"), "job:*:x\\?");
    }
}
