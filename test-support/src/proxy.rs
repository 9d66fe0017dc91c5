//! A TCP proxy in front of one node that can add latency or cut the link,
//! for fault tests and benchmarks. Listens on 127.0.0.1 only.
//!
//! Latency is added per direction without serialising the stream: each chunk
//! read is stamped and written once its time has come, so pipelined traffic
//! keeps flowing. A cut holds traffic (as a partition does to TCP: nothing
//! arrives, nothing is lost) until healed; new connections wait too. An
//! idle black hole silently drops, for good, every connection that carried
//! nothing for a while (a NAT or conntrack entry expiring: no FIN, no RST).
//! A reply rewrite replaces bytes the node sends with others of the same
//! length (a node that reports another version in `INFO`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    /// Added one-way latency in microseconds.
    latency_us: AtomicU64,
    /// `true` while the link is cut.
    cut: watch::Sender<bool>,
    /// `true` while the node is "down": connections are closed and refused.
    down: watch::Sender<bool>,
    /// Connections idle this long (µs; 0: never) are black-holed.
    blackhole_idle_us: AtomicU64,
    /// Connections black-holed so far.
    blackholed: AtomicU64,
    /// Bumped by `blackhole_now`: connections opened before are dead.
    generation: AtomicU64,
    /// The next chunk the client sends that holds these bytes resets its
    /// connection instead of reaching the node (once).
    reset_on: std::sync::Mutex<Option<Vec<u8>>>,
    /// Connections reset by `reset_on` so far.
    resets: AtomicU64,
    /// The chunk the last of them carried, which never reached the node.
    reset_chunk: std::sync::Mutex<Option<Vec<u8>>>,
    /// What connections opened from now on rewrite in the node's replies
    /// (`Proxy::rewrite_replies`): each `from` becomes its `to`.
    rewrites: std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Occurrences rewritten so far, over every connection.
    rewritten: AtomicU64,
    /// Chunks the clients send that hold this are counted (`Proxy::count_sent`).
    counted: std::sync::Mutex<Option<Vec<u8>>>,
    /// How many so far.
    sent: AtomicU64,
    /// Connections accepted (not refused while down) so far.
    accepted: watch::Sender<u64>,
    start: Instant,
}

/// One proxied connection's activity, shared by its two directions.
#[derive(Debug, Default)]
struct Activity {
    /// When it last carried a byte, in µs since the proxy started.
    last_us: AtomicU64,
    /// Black-holed: nothing goes through any more, either way.
    dead: std::sync::atomic::AtomicBool,
    /// The proxy's generation when it opened.
    generation: u64,
}

/// A running proxy; stops accepting when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Let held pumps go so their tasks end.
        self.shared.cut.send_replace(false);
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` (e.g. `127.0.0.1:7001`).
    pub async fn start(upstream: &str) -> Proxy {
        let upstream: SocketAddr = upstream.parse().expect("upstream address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (cut, _) = watch::channel(false);
        let (down, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            upstream,
            latency_us: AtomicU64::new(0),
            cut,
            down,
            blackhole_idle_us: AtomicU64::new(0),
            blackholed: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            reset_on: std::sync::Mutex::new(None),
            resets: AtomicU64::new(0),
            reset_chunk: std::sync::Mutex::new(None),
            rewrites: std::sync::Mutex::new(Vec::new()),
            rewritten: AtomicU64::new(0),
            counted: std::sync::Mutex::new(None),
            sent: AtomicU64::new(0),
            accepted: watch::channel(0).0,
            start: Instant::now(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Silently drops, for good, each connection once it has been idle for
    /// `idle` (`None`: never).
    pub fn set_blackhole_idle(&self, idle: Option<Duration>) {
        let us = idle.map_or(0, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        self.shared.blackhole_idle_us.store(us, Ordering::Relaxed);
    }

    /// Silently drops, for good, every connection open now (a NAT table
    /// flushed): no FIN, no RST; later connections pass.
    pub fn blackhole_now(&self) {
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// How many connections have been black-holed.
    pub fn blackholed(&self) -> u64 {
        self.shared.blackholed.load(Ordering::Relaxed)
    }

    /// Adds `latency` to each direction (so a round trip gains twice that).
    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(us, Ordering::Relaxed);
    }

    /// Cuts (`true`) or heals (`false`) the link.
    pub fn set_cut(&self, cut: bool) {
        self.shared.cut.send_replace(cut);
    }

    /// Resets the connection that next sends a chunk holding `pattern` (a
    /// script's name: exactly that call), the chunk never reaching the node;
    /// once.
    pub fn reset_on(&self, pattern: &[u8]) {
        *self.shared.reset_on.lock().unwrap() = Some(pattern.to_vec());
    }

    /// Disarms a `reset_on` that has not fired.
    pub fn disarm_reset(&self) {
        *self.shared.reset_on.lock().unwrap() = None;
    }

    /// How many connections `reset_on` has reset.
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::Relaxed)
    }

    /// What the last connection `reset_on` reset was carrying: the calls
    /// (RESP) that never reached the node.
    pub fn reset_chunk(&self) -> Option<Vec<u8>> {
        self.shared.reset_chunk.lock().unwrap().clone()
    }

    /// Makes connections opened from now on replace, in what the node
    /// sends, every `from` with `to` (the same length, so that a RESP
    /// length prefix stays true: `redis_version:7.0.15` for
    /// `redis_version:6.0.15`). An occurrence split between two reads is
    /// still found: a chunk's tail that could begin one is held back until
    /// the next read (or the end of the connection).
    ///
    /// # Panics
    ///
    /// When `from` is empty or `to` is not as long as `from`.
    pub fn rewrite_replies(&self, from: &[u8], to: &[u8]) {
        assert!(!from.is_empty(), "nothing to rewrite");
        assert_eq!(from.len(), to.len(), "a rewrite must keep the length");
        self.shared
            .rewrites
            .lock()
            .unwrap()
            .push((from.to_vec(), to.to_vec()));
    }

    /// How many occurrences `rewrite_replies` has rewritten so far.
    pub fn rewritten(&self) -> u64 {
        self.shared.rewritten.load(Ordering::Relaxed)
    }

    /// Counts, from now on, the chunks clients send that hold `pattern` (a
    /// script's name: how often that call went out); see [`sent`](Self::sent).
    pub fn count_sent(&self, pattern: &[u8]) {
        *self.shared.counted.lock().unwrap() = Some(pattern.to_vec());
        self.shared.sent.store(0, Ordering::Relaxed);
    }

    /// How many chunks holding `count_sent`'s pattern clients have sent.
    pub fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// How many connections the proxy has accepted so far (those refused
    /// while down are not counted): a held connection (`set_cut`) counts
    /// when it arrives, so that a test can tell a client's attempts apart.
    /// Every connection counts: that holds only while the test's client is
    /// the proxy's only one (a lock that waits also opens a pub/sub
    /// connection).
    pub fn accepted(&self) -> u64 {
        *self.shared.accepted.borrow()
    }

    /// Waits until the proxy has accepted `n` connections in all
    /// ([`accepted`](Self::accepted)), at most `within`; `false` when the
    /// time ran out first.
    pub async fn wait_accepted(&self, n: u64, within: Duration) -> bool {
        let mut accepted = self.shared.accepted.subscribe();
        tokio::time::timeout(within, accepted.wait_for(|&a| a >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Takes the node "down" (`true`: open connections are closed, new ones
    /// refused, as when the process is gone) or back up.
    pub fn set_down(&self, down: bool) {
        self.shared.down.send_replace(down);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        if *shared.down.borrow() {
            drop(client); // refused
            continue;
        }
        shared.accepted.send_modify(|a| *a += 1);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut cut = shared.cut.subscribe();
            if cut.wait_for(|c| !*c).await.is_err() {
                return;
            }
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let activity = Arc::new(Activity {
                generation: shared.generation.load(Ordering::Relaxed),
                ..Activity::default()
            });
            activity
                .last_us
                .store(shared.start.elapsed().as_micros() as u64, Ordering::Relaxed);
            tokio::spawn(pump(cr, sw, shared.clone(), activity.clone(), true));
            tokio::spawn(pump(sr, cw, shared, activity, false));
        });
    }
}

/// Copies one direction: a reader task stamps chunks, a writer task delivers
/// them when due and while the link is not cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    activity: Arc<Activity>,
    from_client: bool,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer_shared = shared.clone();
    let writer = tokio::spawn(async move {
        let mut cut = writer_shared.cut.subscribe();
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if cut.wait_for(|c| !*c).await.is_err() || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut down = shared.down.subscribe();
    let mut reset = false;
    let mut rewrite = if from_client {
        Rewrite::default()
    } else {
        Rewrite::new(shared.rewrites.lock().unwrap().clone())
    };
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = down.wait_for(|d| *d) => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let now = shared.start.elapsed().as_micros() as u64;
                let idle_limit = shared.blackhole_idle_us.load(Ordering::Relaxed);
                let last = activity.last_us.swap(now, Ordering::Relaxed);
                let flushed = shared.generation.load(Ordering::Relaxed) > activity.generation;
                let idled = idle_limit > 0 && now.saturating_sub(last) >= idle_limit;
                if (flushed || idled) && !activity.dead.swap(true, Ordering::Relaxed) {
                    shared.blackholed.fetch_add(1, Ordering::Relaxed);
                }
                if activity.dead.load(Ordering::Relaxed) {
                    continue; // swallowed: no FIN, no RST, no answer
                }
                if from_client && holds(&shared.counted, &buf[..n]) {
                    shared.sent.fetch_add(1, Ordering::Relaxed);
                }
                if from_client && reset_here(&shared, &buf[..n]) {
                    reset = true;
                    break;
                }
                let (chunk, hits) = rewrite.feed(&buf[..n]);
                shared.rewritten.fetch_add(hits, Ordering::Relaxed);
                let latency = Duration::from_micros(shared.latency_us.load(Ordering::Relaxed));
                if !chunk.is_empty() && tx.send((Instant::now() + latency, chunk)).is_err() {
                    break;
                }
            }
        }
    }
    let held = rewrite.finish();
    if !held.is_empty() && !reset && !*shared.down.borrow() {
        let _ = tx.send((Instant::now(), held));
    }
    drop(tx);
    if *shared.down.borrow() || reset {
        writer.abort(); // closes the write half at once
    }
    let _ = writer.await;
}

/// Whether `chunk` holds `pattern`'s bytes, if any.
fn holds(pattern: &std::sync::Mutex<Option<Vec<u8>>>, chunk: &[u8]) -> bool {
    pattern
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|p| chunk.windows(p.len()).any(|w| w == p.as_slice()))
}

/// Whether `chunk` holds the pattern armed by `Proxy::reset_on` (disarmed
/// when it does).
fn reset_here(shared: &Shared, chunk: &[u8]) -> bool {
    let mut armed = shared.reset_on.lock().unwrap();
    let hit = armed
        .as_ref()
        .is_some_and(|p| chunk.windows(p.len()).any(|w| w == p.as_slice()));
    if hit {
        *armed = None;
        *shared.reset_chunk.lock().unwrap() = Some(chunk.to_vec());
        shared.resets.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

/// One connection's rewrites of what the node sends (`Proxy::rewrite_replies`).
#[derive(Debug, Default)]
struct Rewrite {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The end of the last chunk, which may begin an occurrence.
    held: Vec<u8>,
}

impl Rewrite {
    fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        Rewrite {
            pairs,
            held: Vec::new(),
        }
    }

    /// `chunk` rewritten, after what was held back, less a new tail that
    /// could begin an occurrence; and how many occurrences it rewrote.
    fn feed(&mut self, chunk: &[u8]) -> (Vec<u8>, u64) {
        if self.pairs.is_empty() {
            return (chunk.to_vec(), 0);
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut hits = 0;
        let mut settled = 0; // bytes before this are final
        for (from, to) in &self.pairs {
            let mut i = 0;
            while i + from.len() <= data.len() {
                if data[i..].starts_with(from) {
                    data[i..i + from.len()].copy_from_slice(to);
                    hits += 1;
                    i += from.len();
                    settled = settled.max(i);
                } else {
                    i += 1;
                }
            }
        }
        // The longest tail past the last rewrite that is a proper prefix of
        // some `from`.
        let keep = self
            .pairs
            .iter()
            .filter_map(|(from, _)| {
                (1..from.len())
                    .rev()
                    .find(|&k| k <= data.len() - settled && data.ends_with(&from[..k]))
            })
            .max()
            .unwrap_or(0);
        self.held = data.split_off(data.len() - keep);
        (data, hits)
    }

    /// What is still held back, at the end of the connection.
    fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::Rewrite;

    fn version() -> Rewrite {
        Rewrite::new(vec![(
            b"redis_version:7.0.15".to_vec(),
            b"redis_version:6.0.15".to_vec(),
        )])
    }

    #[test]
    fn a_rewrite_keeps_everything_else() {
        let mut r = version();
        let (out, hits) = r.feed(b"$40\r\n# Server\r\nredis_version:7.0.15\r\nx:1\r\n");
        assert_eq!(hits, 1);
        assert_eq!(
            &out[..],
            b"$40\r\n# Server\r\nredis_version:6.0.15\r\nx:1\r\n"
        );
        assert!(r.finish().is_empty());
    }

    #[test]
    fn an_occurrence_split_between_reads_is_rewritten() {
        let whole = b"+OK\r\nredis_version:7.0.15\r\n";
        for cut in 0..=whole.len() {
            let mut r = version();
            let (mut out, mut hits) = r.feed(&whole[..cut]);
            let (rest, more) = r.feed(&whole[cut..]);
            out.extend(rest);
            out.extend(r.finish());
            hits += more;
            assert_eq!(hits, 1, "cut at {cut}");
            assert_eq!(&out[..], b"+OK\r\nredis_version:6.0.15\r\n", "cut at {cut}");
        }
    }

    #[test]
    fn a_tail_that_only_looks_like_a_start_is_sent_at_the_end() {
        let mut r = version();
        let (out, hits) = r.feed(b"+redis_ver");
        assert_eq!((&out[..], hits), (&b"+"[..], 0));
        assert_eq!(r.finish(), b"redis_ver");
    }
}
