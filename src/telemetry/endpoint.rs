//! A Prometheus endpoint (feature `prometheus`): the library's metrics
//! served as Prometheus text on `GET /metrics`, by
//! `metrics-exporter-prometheus` and a few bounded lines of tokio — no HTTP
//! framework.
//!
//! Bounds: at most [`MAX_SCRAPES`] scrapes served at once (a connection
//! beyond them is closed unanswered), a request of at most
//! [`MAX_REQUEST`] bytes read within [`READ_WITHIN`], one response per
//! connection.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The most scrapes served at once.
pub const MAX_SCRAPES: usize = 8;

/// The longest request read, in bytes (a scrape's is a few hundred).
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long a request may take to arrive.
pub const READ_WITHIN: Duration = Duration::from_secs(5);

/// The library's metrics served to Prometheus on `GET /metrics` (feature
/// `prometheus`), until dropped.
///
/// [`serve`](Self::serve) installs a Prometheus recorder as the process's
/// [`metrics`] recorder — before or after building clients: the order does
/// not matter (docs/operations.md §7) — and listens on the address given.
/// Any other path answers 404.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// let endpoint = redquorum::telemetry::MetricsEndpoint::serve("127.0.0.1:0").await?;
/// let redlock = redquorum::testing::redlock(3).await;
/// redlock.try_lock("job", Duration::from_secs(5)).await?.release().await?;
///
/// let mut scrape = tokio::net::TcpStream::connect(endpoint.local_addr()).await?;
/// scrape.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await?;
/// let mut answer = String::new();
/// scrape.read_to_string(&mut answer).await?;
/// assert!(answer.starts_with("HTTP/1.1 200 OK"));
/// assert!(answer.contains("redquorum_grants_total{kind=\"plain\"} 1"));
/// # Ok(()) }
/// ```
pub struct MetricsEndpoint {
    local_addr: SocketAddr,
    handle: PrometheusHandle,
    task: JoinHandle<()>,
}

impl fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

/// Why [`MetricsEndpoint::serve`] could not serve.
#[derive(Debug)]
#[non_exhaustive]
pub enum EndpointError {
    /// The address could not be listened on (in use, not this host's, not
    /// allowed).
    Bind(std::io::Error),
    /// The process has a [`metrics`] recorder already: serve that one's
    /// metrics instead (one recorder per process).
    RecorderInstalled(String),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Bind(e) => write!(f, "cannot listen for metrics scrapes: {e}"),
            EndpointError::RecorderInstalled(e) => write!(
                f,
                "a metrics recorder is installed already ({e}): serve its metrics instead"
            ),
        }
    }
}

impl std::error::Error for EndpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EndpointError::Bind(e) => Some(e),
            EndpointError::RecorderInstalled(_) => None,
        }
    }
}

impl MetricsEndpoint {
    /// Installs the Prometheus recorder and serves its metrics on `addr`
    /// (port 0: one the system picks, see
    /// [`local_addr`](Self::local_addr)). Must be called inside a tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`EndpointError::Bind`] when `addr` cannot be listened on;
    /// [`EndpointError::RecorderInstalled`] when the process has a
    /// [`metrics`] recorder already. Nothing is installed on a bind error.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it ends, nothing listens; a recorder installed stays
    /// (once per process).
    pub async fn serve(addr: impl ToSocketAddrs) -> Result<MetricsEndpoint, EndpointError> {
        let listener = TcpListener::bind(addr).await.map_err(EndpointError::Bind)?;
        let local_addr = listener.local_addr().map_err(EndpointError::Bind)?;
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| EndpointError::RecorderInstalled(e.to_string()))?;
        crate::telemetry::describe();
        let task = tokio::spawn(accept(listener, handle.clone()));
        Ok(MetricsEndpoint {
            local_addr,
            handle,
            task,
        })
    }

    /// The address it listens on (the port the system picked, for port 0).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::telemetry::EndpointError> {
    /// let endpoint = redquorum::telemetry::MetricsEndpoint::serve("127.0.0.1:0").await?;
    /// assert_ne!(endpoint.local_addr().port(), 0);
    /// # Ok(()) }
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics as a scrape would get them now (Prometheus text).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let endpoint = redquorum::telemetry::MetricsEndpoint::serve("127.0.0.1:0").await?;
    /// let redlock = redquorum::testing::redlock(3).await;
    /// redlock.try_lock("job", Duration::from_secs(5)).await?.release().await?;
    /// assert!(endpoint.render().contains("redquorum_node_up{node=\"memory://0\"} 1"));
    /// # Ok(()) }
    /// ```
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves each connection, at most [`MAX_SCRAPES`] at once.
async fn accept(listener: TcpListener, handle: PrometheusHandle) {
    let room = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // A failed accept (out of descriptors): try again shortly.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(place) = Arc::clone(&room).try_acquire_owned() else {
            continue; // beyond the bound: closed unanswered
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(READ_WITHIN, answer(stream, &handle)).await;
            drop(place);
        });
    }
}

/// Reads one request and answers it: the metrics on `GET /metrics`, 404
/// elsewhere, 400 for what is not a request.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || request.len() + n > MAX_REQUEST {
            break;
        }
        request.extend_from_slice(&chunk[..n]);
    }
    let line = request.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|b| *b == b' ');
    let (status, body) = match (words.next(), words.next()) {
        (Some(b"GET"), Some(path)) if path == b"/metrics" || path.starts_with(b"/metrics?") => {
            ("200 OK", handle.render())
        }
        (Some(b"GET"), Some(_)) => ("404 Not Found", "not found: try /metrics\n".to_owned()),
        _ => ("400 Bad Request", "bad request\n".to_owned()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
