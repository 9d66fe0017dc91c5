//! Opening a connection to a node: the transport — TCP (no delay, kernel
//! keepalive), TLS over it, or a Unix socket — and the handshake: `AUTH`,
//! `SELECT`, `PING`, `INFO server` and, for lock connections, `FUNCTION
//! LOAD` of redquorum's library, pipelined (one round trip however far the
//! node is); and one whole attempt ([`connect`]): both, then the checks of
//! who the server is and whether its settings and the user's rights will
//! do. The caller bounds the whole.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use std::sync::Arc;

use crate::proto::error::NodeError;
use crate::proto::restart::{Facts, evicting, info_field};
use crate::settings::config_error::ConfigError;
use crate::transport::address::{Endpoint, Target};
use crate::transport::resp::{self, Frame};
use crate::transport::scripts;

use super::Link;
use super::tls::Configs;

/// How long a TCP connection may sit idle before the kernel probes it, and
/// then how often: a peer gone without a FIN is found within about
/// `KEEPALIVE + 3 × KEEPALIVE_INTERVAL` even where no `PING` is due.
const KEEPALIVE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// One connection's byte stream.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What the handshake learnt.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hello {
    /// `INFO server`'s `run_id` (`None` where `INFO` is not allowed).
    pub(crate) run_id: Option<String>,
    /// The server and version: `valkey 8.1.8`, `redis 7.0.15`.
    pub(crate) server: Option<String>,
    /// The function library is loaded: scripts go by `FCALL`.
    pub(crate) loaded: bool,
    /// What the node says of its process, persistence and dataset (lock
    /// connections only).
    pub(crate) facts: Facts,
    /// The node may evict lock keys: its `maxmemory-policy`.
    pub(crate) evicting: Option<String>,
    /// The node is a replica (`role:slave`).
    pub(crate) replica: bool,
    /// Commands the user may not run that the library needs (lock
    /// connections only; empty where the server cannot say).
    pub(crate) denied: Vec<String>,
    /// The dataset mark's stamp, encoded, that the connection sends every
    /// `scripts::STAMP_EVERY` (clients that trust durable restarts).
    pub(crate) stamp: Option<Vec<u8>>,
    /// The `at` of the handshake's stamp, on the node's clock (ms).
    pub(crate) stamped_at: Option<u64>,
    /// The deployment record as the node holds it (clients that keep one;
    /// `None` also where the node could not say).
    pub(crate) deployment: Option<crate::proto::deployment::Reading>,
    /// The record was asked for: not of a cluster shard named as a plain
    /// master (whose slots the record's key may miss; its calls are
    /// redirected, never granted).
    pub(crate) deployment_asked: bool,
}

/// What a connection attempt that took too long means.
pub(super) fn slow(link: &Link) -> NodeError {
    let limit = link.limits.connect;
    if link.address.endpoint().tls != crate::transport::address::Tls::Off {
        NodeError::Connection(
            format!(
                "no answer to the TLS handshake within {limit:?}: a plain-text port, or a frozen node"
            )
            .into(),
        )
    } else {
        NodeError::Connection(format!("no answer within {limit:?} (connecting)").into())
    }
}

/// One attempt: the transport, the handshake, the identity check.
pub(super) async fn connect(link: &Link) -> Result<(Stream, Hello), NodeError> {
    let endpoint = link.address.endpoint();
    let mut stream = dial(endpoint, &link.tls).await?;
    let (known, acked) = {
        let shared = link.lock();
        (shared.standing.run_id.clone(), shared.standing.stamped_at)
    };
    let asked = tokio::time::Instant::now();
    let hello = handshake(
        &mut stream,
        endpoint,
        link.checks.as_ref(),
        known.as_deref(),
        acked,
    )
    .await?;
    if let Some(identity) = &link.identity
        && let Err(other) = identity(&hello)
    {
        link.lock().same_as = Some(Arc::clone(&other));
        return Err(NodeError::Server(
            format!("same server as member {other}").into(),
        ));
    }
    if let Some(checks) = &link.checks {
        let node = link.name.to_string();
        let refused = if !hello.denied.is_empty() {
            let message = format!("denied {}", hello.denied.join(", "));
            let error = NodeError::NoPermission(message.clone().into());
            Some((ConfigError::Permission { node, message }, error))
        } else if let (true, Some(policy)) = (checks.strict, &hello.evicting) {
            let error = NodeError::Server(
                format!("maxmemory-policy {policy} may evict lock keys (strict)").into(),
            );
            let policy = policy.clone();
            Some((ConfigError::Evicting { node, policy }, error))
        } else {
            None
        };
        if let Some((config, error)) = refused {
            link.lock().misconfigured = Some(config);
            return Err(error);
        }
        if let Some((agreement, place)) = &checks.agreement
            && hello.deployment_asked
        {
            agreement.met(*place, hello.loaded, hello.deployment.clone(), asked);
        }
    }
    Ok((stream, hello))
}

/// Opens the transport to `endpoint`.
pub(crate) async fn dial(endpoint: &Endpoint, tls: &Configs) -> Result<Stream, NodeError> {
    let refused = |e: io::Error| NodeError::Connection(e.to_string().into());
    match &endpoint.target {
        Target::Tcp { host, port } => {
            let tcp = TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(refused)?;
            tcp.set_nodelay(true).map_err(refused)?;
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(KEEPALIVE)
                .with_interval(KEEPALIVE_INTERVAL);
            // Best effort: a platform without it still has the idle PING.
            let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
            match tls.get(endpoint.tls) {
                None => Ok(Stream::Tcp(tcp)),
                #[cfg(feature = "tls")]
                Some(config) => {
                    let name =
                        super::tls::server_name(host).map_err(|e| NodeError::Tls(e.into()))?;
                    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(config));
                    let tls = connector
                        .connect(name, tcp)
                        .await
                        .map_err(|e| NodeError::Tls(tls_text(&e).into()))?;
                    Ok(Stream::Tls(Box::new(tls)))
                }
                #[cfg(not(feature = "tls"))]
                Some(_) => unreachable!("TLS endpoints are refused without the feature"),
            }
        }
        #[cfg(unix)]
        Target::Unix(path) => tokio::net::UnixStream::connect(path)
            .await
            .map(Stream::Unix)
            .map_err(refused),
        #[cfg(not(unix))]
        Target::Unix(_) => Err(NodeError::Connection(
            "Unix sockets are not available on this platform".into(),
        )),
    }
}

/// An I/O error of a connection: a TLS failure (rustls' alerts and
/// certificate errors, which TLS 1.3 may report only at the first read
/// after the handshake) or a broken connection.
pub(crate) fn io_error(e: &io::Error) -> NodeError {
    const MARKS: [&str; 6] = [
        "certificate",
        "Certificate",
        "received fatal alert",
        "corrupt message",
        "handshake",
        "InvalidContentType",
    ];
    let text = e.to_string();
    if MARKS.iter().any(|mark| text.contains(mark)) {
        NodeError::Tls(text.into())
    } else {
        NodeError::Connection(text.into())
    }
}

/// A TLS failure's text: what rustls said, or the I/O error (a plain-text
/// port closes or answers garbage).
#[cfg(feature = "tls")]
fn tls_text(e: &io::Error) -> String {
    match e.get_ref() {
        Some(inner) => format!("handshake failed: {inner}"),
        None => format!("handshake failed: {e}"),
    }
}

/// Logs in on `stream` and asks who the server is; for a lock connection
/// (`lock`: its checks), also loads the function library, reads what the node
/// says of its persistence and memory, checks the user's permissions and
/// reads (and sets) the dataset mark and reads the deployment record — in two pipelined round
/// trips however far the node is. Refusals: a wrong password or user is
/// [`NodeError::Auth`], any other refusal of `AUTH`, `SELECT` or `PING`
/// the error it means ([`NodeError::from_reply`]).
pub(crate) async fn handshake(
    stream: &mut Stream,
    endpoint: &Endpoint,
    lock: Option<&super::Checks>,
    known_run: Option<&str>,
    acked_at: Option<u64>,
) -> Result<Hello, NodeError> {
    let library = lock.is_some();
    let mut out = Vec::new();
    let mut asked = 0;
    if let Some(password) = &endpoint.password {
        match &endpoint.user {
            Some(user) => out.extend(resp::encode(&[
                b"AUTH",
                user.as_bytes(),
                password.as_bytes(),
            ])),
            None => out.extend(resp::encode(&[b"AUTH", password.as_bytes()])),
        }
        asked += 1;
    }
    if endpoint.db != 0 {
        out.extend(resp::encode(&[
            b"SELECT",
            endpoint.db.to_string().as_bytes(),
        ]));
        asked += 1;
    }
    let checks = asked;
    out.extend(resp::encode(&[b"PING"]));
    // `INFO` with no section: server, persistence, memory and replication
    // among the defaults, on every version.
    if library {
        out.extend(resp::encode(&[b"INFO"]));
    } else {
        out.extend(resp::encode(&[b"INFO", b"server"]));
    }
    asked += 2;
    if library {
        out.extend(resp::encode(&[b"CONFIG", b"GET", b"appendfsync"]));
        out.extend(resp::encode(&[
            b"FUNCTION",
            b"LOAD",
            scripts::LIBRARY.as_bytes(),
        ]));
        if let Some(lock) = lock {
            scripts::encode_probe(true, &lock.probe_key, &mut out);
        }
        asked += 3;
    }
    // A node that refuses the connection (max clients) says why and
    // closes: what it said is worth more than the write's broken pipe.
    let written = async {
        stream.write_all(&out).await?;
        stream.flush().await
    }
    .await;
    let replies = match (read_replies(stream, asked).await, written) {
        (Ok(replies), _) => replies,
        (Err(e), _) => return Err(e),
    };
    // AUTH, SELECT, then PING: the first refusal says why (a PING refused
    // with NOAUTH: credentials missing).
    for reply in &replies[..checks + 1] {
        if let Frame::Error(text) = reply {
            return Err(NodeError::from_reply(text));
        }
    }
    let info = match &replies[checks + 1] {
        Frame::Bulk(text) => String::from_utf8_lossy(text).into_owned(),
        _ => String::new(),
    };
    let mut hello = Hello {
        run_id: run_id(&info),
        server: server(&info),
        ..Hello::default()
    };
    let Some(lock) = lock else {
        return Ok(hello);
    };
    let mark = &*lock.mark;
    let [fsync, load, probe] = &replies[checks + 2..] else {
        unreachable!("three replies asked");
    };
    let fsync = match fsync {
        Frame::Array(pair) => match pair.get(1) {
            Some(Frame::Bulk(v)) => Some(String::from_utf8_lossy(v).into_owned()),
            _ => None,
        },
        _ => None,
    };
    hello.facts = Facts::from_info(&info, fsync.as_deref());
    hello.evicting = evicting(&info).map(str::to_owned);
    hello.replica = info_field(&info, "role") == Some("slave");
    // "Already exists": this version, loaded before. Any other refusal (an
    // older server, no rights): `EVAL` on this connection.
    hello.loaded = match load {
        Frame::Error(text) => text.contains("already exists"),
        _ => true,
    };
    // The second round trip: the probe by `EVAL` where the library is not
    // loaded, and the dataset mark (where `INFO` named the process and the
    // node is no cluster shard, whose slots the mark's key may miss).
    let mut out = Vec::new();
    let mut second = 0;
    if !hello.loaded {
        scripts::encode_probe(false, &lock.probe_key, &mut out);
        second += 1;
    }
    let cluster = info_field(&info, "cluster_enabled") == Some("1");
    hello.stamp = match (&hello.facts.run_id, cluster, lock.trust_durable) {
        (Some(id), false, true) => {
            let stamp = scripts::Stamp {
                run_id: id,
                uptime_s: hello.facts.uptime.map(|u| u.as_secs()),
                durable: hello.facts.durable == Some(true),
                known: known_run == Some(id.as_str()),
                acked: match (known_run, acked_at) {
                    (Some(before), Some(at)) if before != id => Some((before, at)),
                    _ => None,
                },
            };
            scripts::encode_stamp(hello.loaded, mark, &stamp, &mut out);
            second += 1;
            // Later stamps on this connection: by the same process, known.
            let mut again = Vec::new();
            let stamp = scripts::Stamp {
                known: true,
                acked: None,
                ..stamp
            };
            scripts::encode_stamp(hello.loaded, mark, &stamp, &mut again);
            Some(again)
        }
        _ => None,
    };
    // The deployment record, read last (not on a cluster shard, whose
    // slots the record's key may miss).
    let agreement = lock.agreement.as_ref().filter(|_| !cluster);
    if let Some((agreement, _)) = agreement {
        agreement.encode_read(hello.loaded, &mut out);
        hello.deployment_asked = true;
        second += 1;
    }
    let more = if second > 0 {
        stream.write_all(&out).await.map_err(|e| io_error(&e))?;
        stream.flush().await.map_err(|e| io_error(&e))?;
        read_replies(stream, second).await?
    } else {
        Vec::new()
    };
    let probe = if hello.loaded { probe } else { &more[0] };
    hello.denied = denied(probe, hello.loaded);
    let mut more = &more[..];
    if agreement.is_some()
        && let Some((read, rest)) = more.split_last()
    {
        more = rest;
        match read {
            Frame::Error(text) if text.starts_with("NOPERM") => {
                hello
                    .denied
                    .push(format!("the deployment record's key ({text})"));
            }
            read => hello.deployment = scripts::read_deployment(read),
        }
    }
    if hello.stamp.is_some() {
        // How long the dataset has been continuous; a refusal (no right to
        // the mark's key, an older server) leaves the default rule.
        if let Some((continuous, at)) = more.last().and_then(scripts::read_stamp) {
            hello.facts.continuous = Some(continuous);
            hello.stamped_at = Some(at);
        }
    }
    Ok(hello)
}

/// The commands a permission probe's reply says are denied: the probe's
/// list, or the script command itself where that was refused (`NOPERM`).
/// Anything else (an older server without `redis.acl_check_cmd`) says
/// nothing.
fn denied(reply: &Frame, loaded: bool) -> Vec<String> {
    match reply {
        Frame::Array(missing) => missing
            .iter()
            .filter_map(|m| match m {
                Frame::Bulk(name) => Some(String::from_utf8_lossy(name).into_owned()),
                _ => None,
            })
            .collect(),
        Frame::Error(text) if text.starts_with("NOPERM") => {
            vec![if loaded { "fcall" } else { "eval" }.to_owned()]
        }
        _ => Vec::new(),
    }
}

/// Reads `count` replies.
async fn read_replies(stream: &mut Stream, count: usize) -> Result<Vec<Frame>, NodeError> {
    let mut buf = Vec::with_capacity(4096);
    let mut replies = Vec::with_capacity(count);
    let mut at = 0;
    while replies.len() < count {
        match resp::parse(&buf[at..]).map_err(|e| NodeError::Protocol(e.to_string().into()))? {
            Some((frame, used)) => {
                replies.push(frame);
                at += used;
            }
            None => {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.map_err(|e| io_error(&e))?;
                if n == 0 {
                    // A node that refuses a connection says why, then
                    // closes.
                    if let Some(Frame::Error(text)) =
                        replies.iter().find(|r| matches!(r, Frame::Error(_)))
                    {
                        return Err(NodeError::from_reply(text));
                    }
                    return Err(NodeError::Connection(
                        "the node closed the connection".into(),
                    ));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
    Ok(replies)
}

/// The server and version from `INFO server`: `valkey 8.1.8` (Valkey also
/// reports a `redis_version` for compatibility), else `redis 7.0.15`.
fn server(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    match (field("valkey_version:"), field("redis_version:")) {
        (Some(v), _) => Some(format!("valkey {v}")),
        (None, Some(v)) => Some(format!("redis {v}")),
        _ => None,
    }
}

/// The `run_id` line of `INFO server`.
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_run_id() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:ab12\r\ntcp_port:6379\r\n";
        assert_eq!(run_id(info).as_deref(), Some("ab12"));
        assert_eq!(run_id("# Server\r\n"), None);
    }

    #[test]
    fn reads_the_server() {
        let redis = "redis_version:7.0.15\r\nrun_id:x\r\n";
        assert_eq!(server(redis).as_deref(), Some("redis 7.0.15"));
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        assert_eq!(server(valkey).as_deref(), Some("valkey 8.1.8"));
        assert_eq!(server(""), None);
    }
}
