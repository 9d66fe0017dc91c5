//! Keeping a cluster member's map: which master serves each slot, from
//! `CLUSTER SLOTS`, by one background task.

use super::*;

/// Who the cluster is among the members, for the mapper.
pub(super) struct Identity {
    pub(super) index: usize,
    pub(super) servers: Arc<Servers>,
}

/// Why a map could not be had.
#[derive(Debug, Clone)]
pub(super) enum Mapping {
    Failed(NodeError),
    /// The cluster is already a member under this name.
    SameAs(Arc<str>),
}

/// The background task that keeps the map: once at start, then whenever a
/// call asks (at most once per [`MIN_REFRESH_GAP`]) and every
/// [`REFRESH_EVERY`].
pub(super) async fn map_continuously(
    shared: Arc<Shared>,
    identity: Identity,
    first: tokio::sync::oneshot::Sender<Result<(), Mapping>>,
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
        shared.map().first = false;
        shared.changed.notify_waiters();
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
/// connects any new master (waiting for its first attempt), installs the
/// map.
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
    // Keep the masters already connected; connect the new ones.
    let mut known: HashMap<String, LinkHandle> = std::mem::take(&mut shared.map().masters)
        .into_iter()
        .collect();
    let mut masters = Vec::with_capacity(addresses.len());
    let mut fresh = Vec::new();
    for at in &addresses {
        let link = match known.remove(at) {
            Some(link) => link,
            None => {
                let link = shared.connect(at).map_err(Mapping::Failed)?;
                fresh.push(Arc::clone(link.arc()));
                link
            }
        };
        masters.push((at.clone(), link));
    }
    let mut owners = vec![NONE; usize::from(SLOTS)].into_boxed_slice();
    for range in &layout {
        let index = addresses.binary_search(&range.at).unwrap_or_default() as u16;
        for slot in range.start..=range.end {
            owners[usize::from(slot)] = index;
        }
    }
    {
        let mut map = shared.map();
        // Masters gone from the map (`known`'s rest) finish what they hold.
        map.masters = masters;
        map.owners = owners;
        map.trouble = None;
    }
    drop(known);
    // New masters' first attempts, each bounded.
    let first = fresh.iter().map(|link| link.first_outcome(ASK_TIMEOUT));
    futures::future::join_all(first).await;
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
    let command = crate::transport::resp::encode(&[b"CLUSTER", b"SLOTS"]);
    let seed_host = match &shared.address.endpoint().target {
        crate::transport::address::Target::Tcp { host, .. } => host.clone(),
        crate::transport::address::Target::Unix(_) => String::new(),
    };
    let masters: Vec<Arc<Link>> = shared
        .map()
        .masters
        .iter()
        .map(|(_, link)| Arc::clone(link.arc()))
        .collect();
    let mut last = NodeError::NotConnected("no node to ask".into());
    for node in std::iter::once(shared.seed.arc()).chain(masters.iter()) {
        let answer = tokio::time::timeout(ASK_TIMEOUT, node.query(command.clone(), None))
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
fn parse_slots(value: &Frame, seed_host: &str) -> Result<Vec<Range>, NodeError> {
    let bad = || NodeError::Protocol(format!("unexpected CLUSTER SLOTS answer: {value:?}").into());
    let Frame::Array(ranges) = value else {
        return Err(bad());
    };
    let text = |v: &Frame| v.bytes().map(|b| String::from_utf8_lossy(b).into_owned());
    let number = |v: &Frame| match v {
        Frame::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let mut layout = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Frame::Array(fields) = range else {
            return Err(bad());
        };
        let [start, end, master, ..] = fields.as_slice() else {
            return Err(bad());
        };
        let Frame::Array(master) = master else {
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
pub(super) fn split_host_port(at: &str) -> Result<(&str, u16), NodeError> {
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

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_cluster_slots() {
        let answer = Frame::Array(vec![
            Frame::Array(vec![
                Frame::Int(0),
                Frame::Int(5460),
                Frame::Array(vec![bulk("127.0.0.1"), Frame::Int(7301), bulk("bbb")]),
                Frame::Array(vec![bulk("127.0.0.1"), Frame::Int(7304), bulk("r")]),
            ]),
            Frame::Array(vec![
                Frame::Int(5461),
                Frame::Int(16383),
                Frame::Array(vec![bulk(""), Frame::Int(7302), bulk("aaa")]),
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
        assert!(parse_slots(&Frame::Array(vec![]), "seed").is_err());
        assert!(parse_slots(&Frame::Nil, "seed").is_err());
        let beyond = Frame::Array(vec![Frame::Array(vec![
            Frame::Int(0),
            Frame::Int(16384),
            Frame::Array(vec![bulk("h"), Frame::Int(1)]),
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
