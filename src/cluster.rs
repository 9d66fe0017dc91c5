//! A Redis Cluster (or Valkey cluster) as one quorum member, named by one
//! seed URL: `redis+cluster://host:port`, `rediss+cluster://…` with TLS.
//!
//! The member votes like a single master: every key of one lock lives in one
//! hash slot (see [`crate::proto::slot`]), so each call is one script on the shard
//! that serves the slot, atomic there. More shards per member spread lock
//! traffic over more masters; the quorum stays a quorum of members.
//!
//! The member keeps a map of which master serves each slot, learnt from
//! `CLUSTER SLOTS` (asked of the seed, or of any shard when the seed is
//! down) by one background task, and one [`RedisNode`] per master — its own
//! connection, grace and reconnects, so a frozen shard costs only the calls
//! for its slots. A call goes to the slot's master as one message, written in
//! the order calls are made; a `MOVED` answer (the command did nothing)
//! updates that slot and the call follows it once more, an `ASK` answer
//! (the slot is migrating) sends it on with `ASKING`, at most
//! [`MAX_REDIRECTS`] times. A redirection to a master not yet connected, a
//! shard that is down or a slot no master serves is a refusal at once, and
//! the map is refreshed in the background.
//!
//! Bounds: at most [`MAX_MASTERS`] masters per member; the map is refreshed
//! at most once per [`MIN_REFRESH_GAP`], and every [`REFRESH_EVERY`]
//! otherwise; the member's calls in flight are bounded by the dispatcher
//! like any node's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::Value;
use tokio::sync::{Notify, oneshot};

use crate::address::Address;
use crate::error::{ConfigError, NodeError};
use crate::node::{Op, Reply};
use crate::proto::slot::{SLOTS, slot};
use crate::redis_node::{Background, Failure, RedisNode, Servers, parse_reply};

/// Redirections one call follows at most.
pub(crate) const MAX_REDIRECTS: usize = 3;
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
    name: Arc<str>,
    shared: Arc<Shared>,
    /// Keeps the map; aborted with the member.
    _mapper: Background,
}

#[derive(Debug)]
struct Shared {
    /// The seed's address: every master is reached with its scheme,
    /// credentials and TLS settings.
    address: Address,
    /// The seed, asked for the map first.
    seed: RedisNode,
    map: Mutex<Map>,
    /// Asks the mapper for a fresh map.
    refresh: Notify,
    max_in_flight: usize,
    /// Whether masters batch what is queued for them.
    batching: bool,
}

/// Which master serves each slot.
#[derive(Debug)]
struct Map {
    /// Per slot, the index of its master in `masters`, or [`NONE`].
    owners: Box<[u16]>,
    /// Each master, with its `host:port`.
    masters: Vec<(String, Arc<RedisNode>)>,
    /// Why there is no map yet (or it is no longer trusted).
    trouble: Option<Arc<str>>,
}

impl Map {
    fn empty() -> Self {
        Map {
            owners: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
            masters: Vec::new(),
            trouble: Some("the cluster's map is not known yet".into()),
        }
    }
}

impl Shared {
    fn map(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The master serving `slot`.
    fn owner(&self, slot: u16) -> Result<Arc<RedisNode>, NodeError> {
        let map = self.map();
        if let Some(trouble) = &map.trouble {
            return Err(NodeError::NotConnected(Arc::clone(trouble)));
        }
        match map.masters.get(usize::from(map.owners[usize::from(slot)])) {
            Some((_, node)) => Ok(Arc::clone(node)),
            None => Err(NodeError::NotConnected(
                format!("no master serves slot {slot}").into(),
            )),
        }
    }

    /// The master at `to` (`host:port`), if known; after a `MOVED`, it now
    /// serves `slot`.
    fn redirected(&self, slot: u16, to: &str, moved: bool) -> Option<Arc<RedisNode>> {
        let mut map = self.map();
        let index = map.masters.iter().position(|(at, _)| at == to)?;
        if moved {
            map.owners[usize::from(slot)] = index as u16;
        }
        Some(Arc::clone(&map.masters[index].1))
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
        wait: Duration,
        max_in_flight: usize,
        batching: bool,
    ) -> Result<(Self, Option<NodeError>), ConfigError> {
        let name = Arc::clone(address.name());
        let own = Servers::new(vec![Arc::clone(&name)]);
        let (seed, seed_failed) =
            RedisNode::connect(address.clone(), 0, own, wait, max_in_flight, batching).await?;
        let shared = Arc::new(Shared {
            address,
            seed,
            map: Mutex::new(Map::empty()),
            refresh: Notify::new(),
            max_in_flight,
            batching,
        });
        let (first_tx, first_rx) = oneshot::channel();
        let mapper = Background::spawn(map_continuously(
            Arc::clone(&shared),
            Identity { index, servers },
            first_tx,
        ));
        let node = ClusterNode {
            name,
            shared,
            _mapper: mapper,
        };
        if seed_failed.is_some() {
            return Ok((node, seed_failed));
        }
        match tokio::time::timeout(wait, first_rx).await {
            Ok(Ok(Err(Mapping::SameAs(first)))) => Err(ConfigError::SameServer {
                first: first.to_string(),
                second: node.name.to_string(),
            }),
            Ok(Ok(Err(Mapping::Failed(error)))) => Ok((node, Some(error))),
            _ => Ok((node, None)),
        }
    }

    /// The member's name (the seed's URL, passwords masked).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
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

    /// One `PING` to every master at once; the first failure, if any.
    pub(crate) async fn ping(&self) -> Result<(), NodeError> {
        self.ready()?;
        let masters: Vec<_> = self.shared.map().masters.clone();
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

    /// Performs `op` on the master serving its slot, following redirections
    /// (see the module docs). The first poll writes the command.
    pub(crate) async fn run(&self, op: Op<'_>, grace: Duration) -> Result<Reply, NodeError> {
        let key = op.first_key();
        let mut master = self.shared.owner(slot(key.as_bytes())).inspect_err(|_| {
            self.shared.refresh.notify_one();
        })?;
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            match master.exchange(&op, asking, grace).await {
                Ok(value) => return parse_reply(&op, value),
                Err(Failure::Node(error)) => {
                    if matches!(
                        error,
                        NodeError::NotConnected(_) | NodeError::Connection(_) | NodeError::TimedOut
                    ) {
                        // Maybe a failover: another master serves it now.
                        self.shared.refresh.notify_one();
                    }
                    return Err(error);
                }
                Err(Failure::Redirect { ask, slot, to, .. }) => {
                    if !ask {
                        self.shared.refresh.notify_one();
                    }
                    master = self.shared.redirected(slot, &to, !ask).ok_or_else(|| {
                        self.shared.refresh.notify_one();
                        NodeError::NotConnected(
                            format!("slot {slot} is served by {to}, not connected yet").into(),
                        )
                    })?;
                    asking = ask;
                }
            }
        }
        Err(NodeError::Server(
            format!("redirected more than {MAX_REDIRECTS} times").into(),
        ))
    }
}

/// Who the cluster is among the members, for the mapper.
struct Identity {
    index: usize,
    servers: Arc<Servers>,
}

/// Why a map could not be had.
#[derive(Debug, Clone)]
enum Mapping {
    Failed(NodeError),
    /// The cluster is already a member under this name.
    SameAs(Arc<str>),
}

/// The background task that keeps the map: once at start, then whenever a
/// call asks (at most once per [`MIN_REFRESH_GAP`]) and every
/// [`REFRESH_EVERY`].
async fn map_continuously(
    shared: Arc<Shared>,
    identity: Identity,
    first: oneshot::Sender<Result<(), Mapping>>,
) {
    let mut first = Some(first);
    loop {
        let outcome = map_once(&shared, &identity).await;
        let next = match &outcome {
            Ok(()) => REFRESH_EVERY,
            Err(trouble) => {
                let text: Arc<str> = match trouble {
                    Mapping::Failed(error) => format!("no cluster map: {error}").into(),
                    Mapping::SameAs(other) => format!("same cluster as member {other}").into(),
                };
                let mut map = shared.map();
                // A map already known is kept (its masters may be fine); a
                // duplicate cluster never gets one.
                if map.masters.is_empty() || matches!(trouble, Mapping::SameAs(_)) {
                    map.trouble = Some(text);
                }
                MIN_REFRESH_GAP
            }
        };
        if let Some(first) = first.take() {
            let _ = first.send(outcome);
        }
        tokio::select! {
            biased;
            () = shared.refresh.notified() => {}
            () = tokio::time::sleep(next) => {}
        }
        tokio::time::sleep(MIN_REFRESH_GAP).await;
    }
}

/// One refresh: asks for the map, checks the cluster is no other member,
/// connects any new master, installs the map.
async fn map_once(shared: &Shared, identity: &Identity) -> Result<(), Mapping> {
    let layout = ask_for_layout(shared).await.map_err(Mapping::Failed)?;
    if let Some(id) = layout.iter().map(|range| &range.id).min()
        && !id.is_empty()
    {
        identity
            .servers
            .claim(identity.index, &format!("cluster {id}"))
            .map_err(Mapping::SameAs)?;
    }
    let mut addresses: Vec<String> = layout.iter().map(|r| r.at.clone()).collect();
    addresses.sort_unstable();
    addresses.dedup();
    if addresses.len() > MAX_MASTERS {
        return Err(Mapping::Failed(NodeError::Protocol(
            format!("{} masters: at most {MAX_MASTERS}", addresses.len()).into(),
        )));
    }
    // Keep the masters already connected; connect the new ones (at once,
    // off the lock, each bounded).
    let known: HashMap<String, Arc<RedisNode>> = shared.map().masters.iter().cloned().collect();
    let connecting = addresses.iter().map(|at| {
        let known = known.get(at).cloned();
        async move {
            if let Some(node) = known {
                return Ok((at.clone(), node));
            }
            let (host, port) = split_host_port(at)?;
            let address = shared
                .address
                .node_at(host, port)
                .map_err(|e| NodeError::Protocol(e.to_string().into()))?;
            let own = Servers::new(vec![Arc::clone(address.name())]);
            let (node, _) = RedisNode::connect(
                address,
                0,
                own,
                ASK_TIMEOUT,
                shared.max_in_flight,
                shared.batching,
            )
            .await
            .map_err(|e| NodeError::Auth(e.to_string().into()))?;
            Ok((at.clone(), Arc::new(node)))
        }
    });
    let masters = futures::future::join_all(connecting)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, NodeError>>()
        .map_err(Mapping::Failed)?;
    let mut owners = vec![NONE; usize::from(SLOTS)].into_boxed_slice();
    for range in &layout {
        let index = addresses.binary_search(&range.at).unwrap_or_default() as u16;
        for slot in range.start..=range.end {
            owners[usize::from(slot)] = index;
        }
    }
    let mut map = shared.map();
    *map = Map {
        owners,
        masters,
        trouble: None,
    };
    Ok(())
}

/// One range of slots and its master, from `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    start: u16,
    end: u16,
    /// `host:port`
    at: String,
    /// The master's node ID (empty where not reported).
    id: String,
}

/// Asks the seed for the map, else each master known, each bounded.
async fn ask_for_layout(shared: &Shared) -> Result<Vec<Range>, NodeError> {
    let command = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
    let seed_host = shared.address.node_host();
    let masters: Vec<Arc<RedisNode>> = shared
        .map()
        .masters
        .iter()
        .map(|(_, node)| Arc::clone(node))
        .collect();
    let mut last = NodeError::NotConnected("no node to ask".into());
    let asked = std::iter::once(&shared.seed).chain(masters.iter().map(|m| &**m));
    for node in asked {
        let answer = tokio::time::timeout(ASK_TIMEOUT, node.query(&command))
            .await
            .unwrap_or(Err(NodeError::TimedOut));
        match answer.and_then(|value| parse_slots(&value, &seed_host)) {
            Ok(layout) => return Ok(layout),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Parses a `CLUSTER SLOTS` answer: `[[start, end, [host, port, id, …],
/// replicas…], …]`. An empty or unknown host (`""`, `"?"`) is `seed_host`.
fn parse_slots(value: &Value, seed_host: &str) -> Result<Vec<Range>, NodeError> {
    let bad = || NodeError::Protocol(format!("unexpected CLUSTER SLOTS answer: {value:?}").into());
    let Value::Array(ranges) = value else {
        return Err(bad());
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let mut layout = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let [start, end, master, ..] = fields.as_slice() else {
            return Err(bad());
        };
        let Value::Array(master) = master else {
            return Err(bad());
        };
        let (Some(start), Some(end)) = (number(start), number(end)) else {
            return Err(bad());
        };
        let host = master.first().and_then(text).ok_or_else(bad)?;
        let port = master.get(1).and_then(number).ok_or_else(bad)?;
        let id = master.get(2).and_then(text).unwrap_or_default();
        if start > end || end >= SLOTS {
            return Err(bad());
        }
        let host = if host.is_empty() || host == "?" {
            seed_host.to_owned()
        } else {
            host
        };
        let at = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        layout.push(Range { start, end, at, id });
    }
    if layout.is_empty() {
        return Err(NodeError::Server(
            "the cluster serves no slots (is it in cluster mode?)".into(),
        ));
    }
    Ok(layout)
}

/// `host:port` or `[v6]:port` into its parts.
fn split_host_port(at: &str) -> Result<(&str, u16), NodeError> {
    let bad = || NodeError::Protocol(format!("not host:port: {at}").into());
    let (host, port) = at.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok((host, port.parse().map_err(|_| bad())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_cluster_slots() {
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7301), bulk("bbb")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7304), bulk("r")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7302), bulk("aaa")]),
            ]),
        ]);
        let layout = parse_slots(&answer, "seed").unwrap();
        assert_eq!(
            layout,
            [
                Range {
                    start: 0,
                    end: 5460,
                    at: "127.0.0.1:7301".into(),
                    id: "bbb".into()
                },
                Range {
                    start: 5461,
                    end: 16383,
                    at: "seed:7302".into(),
                    id: "aaa".into()
                },
            ]
        );
        assert!(parse_slots(&Value::Array(vec![]), "seed").is_err());
        assert!(parse_slots(&Value::Nil, "seed").is_err());
        let beyond = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16384),
            Value::Array(vec![bulk("h"), Value::Int(1)]),
        ])]);
        assert!(parse_slots(&beyond, "seed").is_err());
    }

    #[test]
    fn splits_host_and_port() {
        assert_eq!(
            split_host_port("127.0.0.1:7301").unwrap(),
            ("127.0.0.1", 7301)
        );
        assert_eq!(split_host_port("[::1]:7301").unwrap(), ("::1", 7301));
        assert!(split_host_port("nohost").is_err());
        assert!(split_host_port("h:99999").is_err());
    }
}
