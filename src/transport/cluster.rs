//! A Redis Cluster (or Valkey cluster) as one quorum member, named by one
//! seed URL: `redis+cluster://host:port`, `rediss+cluster://…` with TLS.
//!
//! The member votes like a single master: every key of one lock lives in one
//! hash slot (see [`crate::proto::slot`]), so each call is one script on the
//! shard that serves the slot, atomic there. More shards per member spread
//! lock traffic over more masters; the quorum stays a quorum of members.
//!
//! The member keeps a map of which master serves each slot, learnt from
//! `CLUSTER SLOTS` (asked of the seed, or of any shard when the seed is
//! down) by one background task, and one [`Link`] per master — its own
//! connection, grace and reconnects, so a frozen shard costs only the calls
//! for its slots.
//!
//! **Order across redirections.** A node applies one client's calls in the
//! order they were made (docs/design.md §11), and so does a member: a call
//! answered `MOVED` (the command did nothing) or `ASK` (the slot is
//! migrating) is handed to the new master by the old master's I/O loop as
//! it reads the reply — replies come in the order calls were written, so the
//! calls of one slot reach the new master in the order they were made. A
//! call for a slot that still has calls outstanding follows them to the
//! master the first of them went to (and is redirected behind them), even
//! when the map has changed meanwhile; only once none is outstanding does a
//! call go where the map says. A call follows at most three redirections;
//! a master it is sent to that is not connected yet is connected, the call
//! waiting in its queue.
//!
//! Bounds: at most [`MAX_MASTERS`] masters per member; the map is refreshed
//! at most once per [`MIN_REFRESH_GAP`], and every [`REFRESH_EVERY`]
//! otherwise; the member's calls in flight are bounded by the dispatcher
//! like any node's.
//!
//! # A cluster member
//!
//! A `redis+cluster://` member is one vote backed by one link per master of a Redis
//! Cluster (at most 1024 masters), each with the connection, reconnects and grace above.
//!
//! - **The map.** The seed's own link (no function library) is asked `CLUSTER SLOTS`
//!   (then each known master, 1 s each, when the seed does not answer). The map of 16 384
//!   slots is learnt at start, every 30 s, and when a call asks (a `MOVED`, a master down,
//!   a slot with no owner), at most once per 250 ms. The member is recognised by its
//!   smallest master node ID: two seeds of one cluster are `ConfigError::SameServer`.
//! - **Routing.** A call computes its slot (CRC16 of the hash tag `{R}`, shared by every
//!   key of one lock) and goes to that slot's master as one message, so order and
//!   delivery are as for a single node. A call for a slot that still has calls
//!   outstanding follows them to the master the first of them went to, even when the map
//!   has changed meanwhile; only once none is outstanding does a call go where the map
//!   says.
//! - **Redirections.** A `MOVED` answer (the command did nothing) or an `ASK` (the slot is
//!   migrating) is handed to the new master by the old master's I/O loop as it reads the
//!   reply; replies come in the order calls were written, so the calls of one slot reach
//!   the new master in the order they were made. `ASK` sends `ASKING` first; `MOVED` also
//!   updates the map's entry and asks for a refresh. A call follows at most 3
//!   redirections. A master it is sent to that is not connected yet is connected, the
//!   call waiting in its queue.
//! - A member is ready when its map is known and every master is connected. The
//!   dispatcher's bounds apply to the member as a whole; a frozen master costs only its
//!   slots' calls. Failover inside a member is an empty restart of that member
//!   (operations.md docs/design.md §5c).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::proto::error::NodeError;
use crate::proto::slot::{SLOTS, slot};
use crate::settings::config_error::ConfigError;
use crate::transport::address::Address;
use crate::transport::link::{
    Checks, First, Limits, Link, LinkHandle, Options, Outstanding, Pending, Route, Standing, Work,
    tls,
};
use crate::transport::master::Servers;
use crate::transport::resp::Frame;

mod listen;
mod mapper;

use mapper::{Identity, Mapping, map_continuously, split_host_port};

/// Masters one member may have (Redis advises at most 1000 nodes).
pub(crate) const MAX_MASTERS: usize = 1024;
/// The map is refreshed at most this often, however often calls ask.
pub(crate) const MIN_REFRESH_GAP: Duration = Duration::from_millis(250);
/// …and this often when nothing asks.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// How long asking a node for the map, or connecting a new master, may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// A slot no master serves.
const NONE: u16 = u16::MAX;

/// A Redis Cluster that is one member.
#[derive(Debug)]
pub(crate) struct ClusterNode {
    shared: Arc<Shared>,
    /// Keeps the map; aborted with the member.
    mapper: tokio::task::AbortHandle,
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.mapper.abort();
    }
}

struct Shared {
    name: Arc<str>,
    /// The seed's address: every master is reached with its scheme,
    /// credentials and TLS settings.
    address: Address,
    tls: tls::Configs,
    limits: Limits,
    /// What each master's connections check.
    checks: Checks,
    /// The seed, asked for the map first.
    seed: LinkHandle,
    map: Mutex<Map>,
    /// Asks the mapper for a fresh map.
    refresh: Notify,
    /// Notified after each attempt to learn the map.
    changed: Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Which master serves each slot.
struct Map {
    /// Per slot, the index of its master in `masters`, or [`NONE`].
    owners: Box<[u16]>,
    /// Each master, with its `host:port`.
    masters: Vec<(String, LinkHandle)>,
    /// Why there is no map yet (or it is no longer trusted).
    trouble: Option<Arc<str>>,
    /// No attempt to learn the map has ended yet.
    first: bool,
    /// Per slot with calls outstanding: the master the first of them went
    /// to, and how many there are.
    outstanding: HashMap<u16, (Arc<Link>, u32)>,
}

impl Map {
    fn empty() -> Self {
        Map {
            owners: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
            masters: Vec::new(),
            trouble: Some("the cluster's map is not known yet".into()),
            first: true,
            outstanding: HashMap::new(),
        }
    }

    /// The master at `at`, connecting it if new (its calls wait in its
    /// queue meanwhile).
    fn master_at(&mut self, at: &str, shared: &Shared) -> Result<Arc<Link>, NodeError> {
        if let Some((_, link)) = self.masters.iter().find(|(a, _)| a == at) {
            return Ok(Arc::clone(link.arc()));
        }
        if self.masters.len() >= MAX_MASTERS {
            return Err(NodeError::Server(
                format!("more than {MAX_MASTERS} masters").into(),
            ));
        }
        let link = shared.connect(at)?;
        let arc = Arc::clone(link.arc());
        self.masters.push((at.to_owned(), link));
        Ok(arc)
    }
}

impl Shared {
    fn map(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A link to the master at `at` (`host:port`), connecting in the
    /// background.
    fn connect(&self, at: &str) -> Result<LinkHandle, NodeError> {
        let (host, port) = split_host_port(at)?;
        let options = Options {
            limits: self.limits,
            checks: Some(self.checks.clone()),
            identity: None,
        };
        Ok(Link::start(
            self.address.node_at(host, port),
            self.tls.clone(),
            options,
        ))
    }
}

impl Route for Shared {
    fn redirect(&self, call: Pending, ask: bool, slot: u16, to: &str) {
        let mut map = self.map();
        let link = match map.master_at(to, self) {
            Ok(link) => link,
            Err(error) => {
                drop(map);
                self.refresh.notify_one();
                call.finish(Err(error), self.limits.late);
                return;
            }
        };
        if !ask {
            // The slot moved: the map says so from now on (calls of the slot
            // still outstanding are redirected behind this one).
            let index = map
                .masters
                .iter()
                .position(|(_, l)| Arc::ptr_eq(l.arc(), &link))
                .expect("just found");
            map.owners[usize::from(slot)] = index as u16;
            self.refresh.notify_one();
        }
        drop(map);
        link.submit(call);
    }

    fn ended(&self, slot: u16) {
        let mut map = self.map();
        if let Some((_, count)) = map.outstanding.get_mut(&slot) {
            *count -= 1;
            if *count == 0 {
                map.outstanding.remove(&slot);
            }
        }
    }
}

impl ClusterNode {
    /// Connects to the seed at `address` (member `index` of `servers`),
    /// learns the cluster's map and connects to its masters, waiting at most
    /// `wait` for each. As for a single node, a cluster that is down now is
    /// not an error (it may come back); credentials it rejects are, and so is
    /// a cluster that is already a member (compared by its masters' node
    /// IDs).
    ///
    /// Returns the member and how its first attempt failed, if it did
    /// within `wait`.
    pub(crate) async fn connect(
        address: Address,
        index: usize,
        servers: Arc<Servers>,
        tls: tls::Configs,
        limits: Limits,
        checks: Checks,
        wait: Duration,
    ) -> Result<(Self, Option<NodeError>), ConfigError> {
        let name = Arc::clone(address.name());
        let seed = Link::start(
            address.clone(),
            tls.clone(),
            Options {
                limits,
                checks: None,
                identity: None,
            },
        );
        let seed_failed = match seed.first_outcome(wait).await {
            Some(Err(First::Failed(NodeError::Auth(message)))) => {
                return Err(ConfigError::Auth {
                    node: name.to_string(),
                    message: message.to_string(),
                });
            }
            Some(Err(First::Failed(error))) => Some(error),
            _ => None,
        };
        let shared = Arc::new(Shared {
            name: Arc::clone(&name),
            address,
            tls,
            limits,
            checks,
            seed,
            map: Mutex::new(Map::empty()),
            refresh: Notify::new(),
            changed: Notify::new(),
        });
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let mapper = tokio::spawn(map_continuously(
            Arc::clone(&shared),
            Identity { index, servers },
            first_tx,
        ))
        .abort_handle();
        let node = ClusterNode { shared, mapper };
        if seed_failed.is_some() {
            return Ok((node, seed_failed));
        }
        match tokio::time::timeout(wait, first_rx).await {
            Ok(Ok(Err(Mapping::SameAs(first)))) => Err(ConfigError::SameServer {
                first: first.to_string(),
                second: name.to_string(),
            }),
            Ok(Ok(Err(Mapping::Failed(error)))) => Ok((node, Some(error))),
            _ => Ok((node, None)),
        }
    }

    /// How the member's listener is opened: over the masters that serve
    /// each channel's slot (sharded pub/sub, [`listen`]).
    pub(crate) fn listener_source(
        &self,
    ) -> impl Fn() -> Option<
        futures::future::BoxFuture<
            'static,
            Result<Box<dyn crate::transport::node::Listener>, NodeError>,
        >,
    > + Send
    + Sync
    + 'static {
        let shared = Arc::clone(&self.shared);
        move || Some(listen::listen(Arc::clone(&shared)))
    }

    /// The member's name (the seed's URL, passwords masked).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// `Ok` while the map is known and every master is connected; otherwise
    /// why not.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        let map = self.shared.map();
        if let Some(trouble) = &map.trouble {
            return Err(NodeError::NotConnected(Arc::clone(trouble)));
        }
        for (at, master) in &map.masters {
            master
                .ready()
                .map_err(|e| NodeError::NotConnected(format!("master {at}: {e}").into()))?;
        }
        Ok(())
    }

    /// Every master's link waiting out a backoff tries again now (see
    /// [`Link::kick`](crate::transport::link::Link::kick)).
    pub(crate) fn kick(&self) {
        for (_, master) in &self.shared.map().masters {
            master.kick();
        }
    }

    /// Whether no attempt to learn the map has ended yet.
    pub(crate) fn connecting_first(&self) -> bool {
        self.shared.map().first
    }

    /// Resolves after the next attempt to learn the map.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.changed.notified()
    }

    /// The server and version the seed reported, and how many masters.
    pub(crate) fn server(&self) -> Option<Arc<str>> {
        let map = self.shared.map();
        let server = map
            .masters
            .iter()
            .find_map(|(_, master)| master.server())
            .or_else(|| self.shared.seed.server())?;
        Some(format!("{server}, cluster of {} masters", map.masters.len()).into())
    }

    /// What its masters' connections told of them, taken together: the
    /// longest quarantine, the first evicting policy; durable only if every
    /// master is.
    pub(crate) fn standing(&self) -> Standing {
        let map = self.shared.map();
        let mut all = Standing {
            durable: Some(true),
            ..Standing::default()
        };
        for (_, master) in &map.masters {
            let one = master.standing();
            all.quarantine = all.quarantine.max(one.quarantine);
            all.evicting = all.evicting.or(one.evicting);
            all.replica |= one.replica;
            all.durable = match (all.durable, one.durable) {
                (Some(a), Some(b)) => Some(a && b),
                _ => None,
            };
        }
        all
    }

    /// One `PING` to every master at once; the first failure, if any.
    pub(crate) async fn ping(&self) -> Result<(), NodeError> {
        self.ready()?;
        let masters: Vec<(String, Arc<Link>)> = self
            .shared
            .map()
            .masters
            .iter()
            .map(|(at, link)| (at.clone(), Arc::clone(link.arc())))
            .collect();
        let pings = masters.iter().map(|(at, master)| async move {
            master
                .ping()
                .await
                .map_err(|e| NodeError::NotConnected(format!("master {at}: {e}").into()))
        });
        futures::future::join_all(pings)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(drop)
    }

    /// Its keys matching `pattern` on every master, at most `limit` in all,
    /// and whether there may be more ([`scan`](crate::transport::scan::scan)).
    pub(crate) async fn keys(
        &self,
        pattern: &str,
        limit: usize,
        within: std::time::Duration,
    ) -> Result<(Vec<String>, bool), NodeError> {
        self.ready()?;
        let masters: Vec<Arc<Link>> = self
            .shared
            .map()
            .masters
            .iter()
            .map(|(_, link)| Arc::clone(link.arc()))
            .collect();
        let scans = masters
            .iter()
            .map(|master| crate::transport::scan::scan(master, pattern, limit, within));
        let (mut keys, mut more) = (Vec::new(), false);
        for scanned in futures::future::join_all(scans).await {
            let (found, cut) = scanned?;
            more |= cut;
            keys.extend(found);
        }
        more |= keys.len() > limit;
        keys.truncate(limit);
        Ok((keys, more))
    }

    /// Makes `call` on the master serving its key's slot (see the module
    /// docs for which master that is while a slot moves), or ends it at once
    /// with why not. Whether it was made.
    pub(crate) fn submit(&self, mut call: Pending) -> bool {
        let shared = &self.shared;
        let Work::Errand { errand, route, .. } = &mut call.work else {
            unreachable!("a round's call is an errand")
        };
        let key_slot = slot(errand.key().as_bytes());
        let mut map = shared.map();
        let target = match map.outstanding.get_mut(&key_slot) {
            Some((first, count)) => {
                *count += 1;
                Arc::clone(first)
            }
            None => {
                let owner = match &map.trouble {
                    Some(trouble) => Err(NodeError::NotConnected(Arc::clone(trouble))),
                    None => map
                        .masters
                        .get(usize::from(map.owners[usize::from(key_slot)]))
                        .map(|(_, link)| Arc::clone(link.arc()))
                        .ok_or_else(|| {
                            NodeError::NotConnected(
                                format!("no master serves slot {key_slot}").into(),
                            )
                        }),
                };
                match owner {
                    Ok(owner) => {
                        map.outstanding.insert(key_slot, (Arc::clone(&owner), 1));
                        owner
                    }
                    Err(error) => {
                        drop(map);
                        shared.refresh.notify_one();
                        call.finish(Err(error), shared.limits.late);
                        return false;
                    }
                }
            }
        };
        drop(map);
        *route = Some(Outstanding::new(
            Arc::clone(shared) as Arc<dyn Route>,
            key_slot,
        ));
        let made = target.submit(call);
        if !made {
            // The master is down: maybe a failover, another serves it now.
            shared.refresh.notify_one();
        }
        made
    }
}
