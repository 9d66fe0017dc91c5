//! A TCP proxy in front of one node that can add latency or cut the link,
//! for fault tests and benchmarks. Listens on 127.0.0.1 only.
//!
//! Latency is added per direction without serialising the stream: each chunk
//! read is stamped and written once its time has come, so pipelined traffic
//! keeps flowing. A cut holds traffic (as a partition does to TCP: nothing
//! arrives, nothing is lost) until healed; new connections wait too. An
//! idle black hole silently drops, for good, every connection that carried
//! nothing for a while (a NAT or conntrack entry expiring: no FIN, no RST).

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
                if from_client && reset_here(&shared, &buf[..n]) {
                    reset = true;
                    break;
                }
                let latency = Duration::from_micros(shared.latency_us.load(Ordering::Relaxed));
                if tx
                    .send((Instant::now() + latency, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    drop(tx);
    if *shared.down.borrow() || reset {
        writer.abort(); // closes the write half at once
    }
    let _ = writer.await;
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
        shared.resets.fetch_add(1, Ordering::Relaxed);
    }
    hit
}
