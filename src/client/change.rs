//! Changing a deployment's members without a drain: a change declared on
//! the nodes of both lists, joint quorums while it lasts, and its end once
//! no lock granted by the old members alone can still be valid
//! (docs/agreement.md, "Changing members").

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::redlock::Redlock;
use crate::engine::dispatch::Member;
use crate::proto::deployment::{self, Decision, Mismatch, Reading, Record};
use crate::proto::quorum::quorum;
use crate::settings::config_error::ConfigError;
use crate::transport::agreement::{RECORD_FRESH, fresh_id};
use crate::transport::link::Link;
use crate::transport::scripts::{self, DeploymentCall};

use super::Builder;

/// How long one read or write of a node's record may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A change of members, declared: every client of either list now needs
/// a majority of the old members **and** one of the new for each grant
/// and extension. [`finish`](MemberChange::finish) ends it once no lock
/// granted by the old members alone can still be valid.
///
/// ```no_run
/// # async fn replace() -> Result<(), redquorum::ChangeError> {
/// use redquorum::{MemberChange, Redlock};
///
/// let old = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
/// let new = ["redis://a:6379", "redis://b:6379", "redis://d:6379"];
/// let change = MemberChange::declare(
///     Redlock::builder().nodes(old),
///     Redlock::builder().nodes(new),
/// )
/// .await?;
/// println!("joint quorums for {:?}", change.ends_in());
/// let now = change.finish().await?;
/// println!("the deployment is now {now}");
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// Dropping either future leaves the record at one step or the other on
/// each node: clients follow the newest step any node holds, and write it
/// to the nodes behind. A change stopped before its end keeps joint quorums
/// until it is declared again with the same new list (which waits again)
/// and finished.
pub struct MemberChange {
    from: Fleet,
    to: Fleet,
    joint: Record,
    ends: Instant,
}

impl fmt::Debug for MemberChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberChange")
            .field("joint", &self.joint)
            .field("ends_in", &self.ends_in())
            .finish_non_exhaustive()
    }
}

/// Why a change of members was not declared or finished.
#[derive(Debug)]
#[non_exhaustive]
pub enum ChangeError {
    /// A list's settings are not valid.
    Config(ConfigError),
    /// The old list does not match the record its nodes hold.
    Deployment(Mismatch),
    /// The old list's nodes hold no record yet: use the deployment once
    /// (any client builds it) before changing it.
    NoRecord,
    /// The new list is the deployment's members already.
    Unchanged,
    /// Another change, to other members, is under way: finish it first.
    Busy {
        /// The record the nodes hold.
        record: Record,
    },
    /// Too many members change at once: the nodes both lists share cannot
    /// make a majority of each list.
    TooMany {
        /// Nodes in both lists.
        shared: usize,
        /// The larger of the two majorities.
        needed: usize,
    },
    /// A node is no plain Redis master (a cluster or a custom node): the
    /// record lives on plain masters only.
    NotAMaster {
        /// Its position in its list.
        node: usize,
    },
    /// A node of the new list is in another deployment.
    Foreign {
        /// Its position in the new list.
        node: usize,
    },
    /// Too few nodes answered: every node of the new list must be read,
    /// and a majority of each list written.
    Unavailable {
        /// What was missing.
        detail: String,
    },
}

impl fmt::Display for ChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeError::Config(e) => write!(f, "{e}"),
            ChangeError::Deployment(m) => write!(f, "the old list: {m}"),
            ChangeError::NoRecord => write!(
                f,
                "the old list's nodes hold no deployment record yet: use the deployment once \
                 before changing its members"
            ),
            ChangeError::Unchanged => write!(f, "the new list is the deployment's members already"),
            ChangeError::Busy { record } => write!(
                f,
                "another change of members is under way ({record}): declare it again with its \
                 own new list to finish it"
            ),
            ChangeError::TooMany { shared, needed } => write!(
                f,
                "the lists share {shared} nodes, a majority of each needs {needed}: change fewer \
                 members at once (docs/agreement.md)"
            ),
            ChangeError::NotAMaster { node } => write!(
                f,
                "node #{} is not a plain Redis master: members are recorded on plain masters only",
                node + 1
            ),
            ChangeError::Foreign { node } => write!(
                f,
                "node #{} of the new list holds another deployment's record",
                node + 1
            ),
            ChangeError::Unavailable { detail } => write!(f, "{detail}"),
        }
    }
}

impl std::error::Error for ChangeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChangeError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for ChangeError {
    fn from(e: ConfigError) -> Self {
        ChangeError::Config(e)
    }
}

impl MemberChange {
    /// Declares the change from the members `from` lists to those `to`
    /// lists (each list's settings as for [`Builder::build`]; the key
    /// prefix is `from`'s): reads every node, and writes the joint record
    /// to a majority of each list at least. Declared again with the same
    /// new list, a change under way is taken up (and waits again).
    ///
    /// The lists must share a majority of each: replace or add or remove a
    /// few members at a time ([`ChangeError::TooMany`]).
    ///
    /// # Errors
    ///
    /// [`ChangeError`] naming why: a list's settings, the old list not matching the
    /// record, too many members changing at once, another change under way, a
    /// node of the new list in another deployment, or too few nodes answering
    /// (nothing is declared then, or, for the last, the joint record stands on
    /// some nodes: declare again).
    ///
    /// # Cancel safety
    ///
    /// Dropping this future may leave the joint record on some nodes: clients
    /// that read it count by both sets (safe); declare again to take it up.
    pub async fn declare(from: Builder, to: Builder) -> Result<MemberChange, ChangeError> {
        let prefix = from.key_prefix.clone();
        let interop = from.interop_keys;
        let to = to.key_prefix(&prefix).interop_keys(interop);
        let key = crate::proto::keys::KeyLayout::new(&prefix, interop)
            .map_err(ConfigError::from)?
            .deployment();
        let from = Fleet::open(from.deployment_record(false), &key).await?;
        let to = Fleet::open(to.deployment_record(false), &key).await?;
        let old = from.read().await;
        let current = match deployment::decide(&old, 0) {
            Decision::Agreed(agreed) => agreed.record,
            Decision::Refused(mismatch) => return Err(ChangeError::Deployment(mismatch)),
            Decision::Create(_) => return Err(ChangeError::NoRecord),
            Decision::Unknown => {
                return Err(ChangeError::Unavailable {
                    detail: format!(
                        "too few of the old list's nodes answered: {} of {}",
                        old.iter().flatten().count(),
                        old.len()
                    ),
                });
            }
        };
        let new = to.read().await;
        let mut next = Vec::with_capacity(new.len());
        for (node, reading) in new.iter().enumerate() {
            let Some(reading) = reading else {
                return Err(ChangeError::Unavailable {
                    detail: format!("node #{} of the new list did not answer", node + 1),
                });
            };
            if reading.record.is_some() && !current.lists(&reading.id) {
                return Err(ChangeError::Foreign { node });
            }
            next.push(reading.id.clone());
        }
        let joint = if current.changing() {
            let mut sorted = next.clone();
            sorted.sort_unstable();
            if current.next() != sorted {
                return Err(ChangeError::Busy { record: current });
            }
            current
        } else {
            let mut sorted = next.clone();
            sorted.sort_unstable();
            if current.members() == sorted {
                return Err(ChangeError::Unchanged);
            }
            let shared = next
                .iter()
                .filter(|id| current.members().contains(id))
                .count();
            let needed = quorum(current.members().len()).max(quorum(next.len()));
            if shared < needed {
                return Err(ChangeError::TooMany { shared, needed });
            }
            current.joint(next)
        };
        write_each(&from, &to, &joint, true).await?;
        let max_ttl = joint.max_ttl();
        // No lock granted by the old members alone outlives this: a
        // client counts a node only within RECORD_FRESH of reading its
        // record (after which it knows of the change), and what it was
        // granted before lives at most max_ttl, measured by clocks that
        // may run 2% apart.
        let wait = max_ttl + max_ttl / 50 + RECORD_FRESH + Duration::from_secs(1);
        Ok(MemberChange {
            from,
            to,
            joint,
            ends: Instant::now() + wait,
        })
    }

    /// The joint record the nodes hold.
    pub fn record(&self) -> &Record {
        &self.joint
    }

    /// How long until the change may end.
    pub fn ends_in(&self) -> Duration {
        self.ends.saturating_duration_since(Instant::now())
    }

    /// Waits until no lock granted by the old members alone can still be
    /// valid, then writes the new members' record to a majority of the
    /// new list at least: clients still configured with the old list are
    /// refused from then on (a running one keeps counting the nodes that
    /// stay members, and says that the membership moved). Returns the
    /// record.
    ///
    /// # Errors
    ///
    /// [`ChangeError::Unavailable`] when too few nodes of the new list took the
    /// new record: finish again by declaring the change again.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future while it waits changes nothing; once writing, the
    /// new record may stand on some nodes: clients carry it to the others.
    pub async fn finish(self) -> Result<Record, ChangeError> {
        tokio::time::sleep_until(self.ends).await;
        let done = self.joint.finished();
        write_each(&self.from, &self.to, &done, false).await?;
        Ok(done)
    }
}

/// One list's nodes, connected without a deployment record of their own.
struct Fleet {
    /// Keeps the connections open.
    _client: Redlock,
    names: Vec<Arc<str>>,
    links: Vec<Arc<Link>>,
    key: String,
}

impl Fleet {
    async fn open(builder: Builder, key: &str) -> Result<Fleet, ChangeError> {
        let client = builder.build().await?;
        let mut names = Vec::new();
        let mut links = Vec::new();
        for (member, _) in client.driver().members() {
            let Member::Redis(node) = member else {
                return Err(ChangeError::NotAMaster { node: names.len() });
            };
            names.push(Arc::clone(member.name()));
            links.push(Arc::clone(node.link()));
        }
        Ok(Fleet {
            _client: client,
            names,
            links,
            key: key.to_owned(),
        })
    }

    /// Each node's reading, after writing `write` where it is due.
    async fn call(&self, write: Option<&Record>) -> Vec<Option<Reading>> {
        let calls = self.links.iter().map(|link| {
            let call = DeploymentCall {
                id: &fresh_id(),
                write: write.map(|record| (record, None)),
                addresses: &self.names,
                known: &[],
            };
            let mut command = Vec::new();
            scripts::encode_deployment(false, &self.key, &call, &mut command);
            async move {
                match tokio::time::timeout(CALL_TIMEOUT, link.query(command, None)).await {
                    Ok(Ok(frame)) => scripts::read_deployment(&frame),
                    _ => None,
                }
            }
        });
        futures::future::join_all(calls).await
    }

    async fn read(&self) -> Vec<Option<Reading>> {
        self.call(None).await
    }
}

/// Writes `record` to every node of both lists; a majority of each list
/// (of the old one only where `old_too`) must hold it after.
async fn write_each(
    from: &Fleet,
    to: &Fleet,
    record: &Record,
    old_too: bool,
) -> Result<(), ChangeError> {
    let (old, new) = futures::future::join(from.call(Some(record)), to.call(Some(record))).await;
    let holding = |readings: &[Option<Reading>]| {
        readings
            .iter()
            .flatten()
            .filter(|r| r.record.as_ref() == Some(record))
            .count()
    };
    for (list, readings, needed) in [("old", &old, old_too), ("new", &new, true)] {
        let (held, n) = (holding(readings), readings.len());
        if needed && held < quorum(n) {
            return Err(ChangeError::Unavailable {
                detail: format!(
                    "only {held} of the {list} list's {n} nodes hold the record ({record}): a \
                     majority must; declare the change again when they answer"
                ),
            });
        }
    }
    Ok(())
}
