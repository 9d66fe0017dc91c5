//! The running service: an HTTP listener (Dapr's HTTP API, health,
//! metrics) and a gRPC listener (Dapr's runtime service), over one
//! [`LockService`], and their graceful end.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redquorum::Redlock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::ApiToken;
use crate::connections::{Counted, CountedListener};
use crate::grpc::DaprLocks;
use crate::health::Health;
use crate::limits::Limits;
use crate::locks::LockService;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// The HTTP address. Default `127.0.0.1:3500` (Dapr's HTTP port).
    pub http: SocketAddr,
    /// The gRPC address. Default `127.0.0.1:50001` (Dapr's gRPC port).
    pub grpc: SocketAddr,
    /// The lock store names answered for. Default `["lockstore"]`.
    pub stores: Vec<String>,
    /// The token required of every request but health checks; required
    /// itself when either address is not loopback.
    pub token: Option<ApiToken>,
    /// The longest expiry: the client's `max_ttl`.
    pub max_ttl: Duration,
    /// The bounds.
    pub limits: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            http: SocketAddr::from(([127, 0, 0, 1], 3500)),
            grpc: SocketAddr::from(([127, 0, 0, 1], 50001)),
            stores: vec!["lockstore".to_owned()],
            token: None,
            max_ttl: redquorum::DEFAULT_MAX_TTL,
            limits: Limits::default(),
        }
    }
}

/// Why the service did not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// An address other than loopback, and no token.
    TokenRequired(SocketAddr),
    /// An address could not be listened on.
    Bind(SocketAddr, std::io::Error),
    /// A bound out of range ([`Limits::check`]).
    Limits(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::TokenRequired(addr) => write!(
                f,
                "{addr} is not a loopback address: give an API token (--api-token-file) \
                 so that only callers holding it can lock"
            ),
            StartError::Bind(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
            StartError::Limits(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StartError {}

/// The service, running until [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct Running {
    http: SocketAddr,
    grpc: SocketAddr,
    locks: Arc<LockService>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// How long the listeners may take to end after the stop: the idle
    /// timeout (a request under way is one round once waits have ended).
    grace: Duration,
}

/// The process's Prometheus recorder: installed by the first service
/// started, shared by the others (tests start several in one process).
fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = match PrometheusBuilder::new().install_recorder() {
                Ok(handle) => handle,
                // Another recorder is the process's: ours renders nothing
                // of the library's, but still answers.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            };
            redquorum::telemetry::describe();
            crate::metrics::describe();
            handle
        })
        .clone()
}

/// The gRPC listener's connections, each once it has a place.
fn incoming(
    listener: CountedListener,
) -> impl futures::Stream<Item = Result<Counted, std::io::Error>> + Send + 'static {
    futures::stream::unfold(listener, |listener| async move {
        let counted = listener.next().await;
        Some((Ok(counted), listener))
    })
}

impl Running {
    /// Starts serving `config` over `redlock` (build it with
    /// [`Retry::none`](redquorum::Retry::none): a try-lock is one round,
    /// and with `max_ttl` equal to `config.max_ttl`).
    ///
    /// # Errors
    ///
    /// [`StartError::TokenRequired`] for an address other than loopback
    /// without a token; [`StartError::Limits`] for a bound out of range;
    /// [`StartError::Bind`] when an address cannot be listened on. Nothing
    /// is served then.
    pub async fn start(redlock: Redlock, config: Config) -> Result<Running, StartError> {
        config.limits.check().map_err(StartError::Limits)?;
        for addr in [config.http, config.grpc] {
            if !addr.ip().is_loopback() && config.token.is_none() {
                return Err(StartError::TokenRequired(addr));
            }
        }
        let bind = |addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Bind(addr, e))
        };
        let (http_listener, grpc_listener) = (bind(config.http).await?, bind(config.grpc).await?);
        let local = |l: &TcpListener, addr| l.local_addr().map_err(|e| StartError::Bind(addr, e));
        let http = local(&http_listener, config.http)?;
        let grpc = local(&grpc_listener, config.grpc)?;

        let metrics = recorder();
        let idle = config.limits.idle_timeout;
        let room = Arc::new(tokio::sync::Semaphore::new(config.limits.max_connections));
        let locks = LockService::new(
            redlock.clone(),
            config.stores,
            config.max_ttl,
            config.limits,
        );
        let (stop, stopped) = watch::channel(false);
        let until_stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };

        let router = crate::http::router(crate::http::Shared {
            locks: Arc::clone(&locks),
            health: Arc::new(Health::new(redlock)),
            token: config.token.clone(),
            metrics,
        });
        let http_listener = CountedListener::new(http_listener, Arc::clone(&room), idle, false);
        let http_task = tokio::spawn(crate::http::serve::serve(
            http_listener,
            router,
            idle,
            stopped.clone(),
        ));

        let dapr = DaprLocks::new(Arc::clone(&locks), config.token.clone()).into_service();
        let native =
            crate::grpc::native::Locks::new(Arc::clone(&locks), config.token).into_service();
        let grpc_task = tokio::spawn(async move {
            // Pings every third of the idle timeout: a live client's
            // answers are reads, so only a silent one reaches it.
            let served = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(idle / 3))
                .http2_keepalive_timeout(Some(idle / 3))
                .add_service(dapr)
                .add_service(native)
                .serve_with_incoming_shutdown(
                    incoming(CountedListener::new(grpc_listener, room, idle, true)),
                    until_stopped(stopped),
                )
                .await;
            if let Err(e) = served {
                tracing::error!("the gRPC listener ended: {e}");
            }
        });
        tracing::info!(%http, %grpc, "serving Dapr's lock API");
        Ok(Running {
            http,
            grpc,
            locks,
            stop,
            tasks: vec![http_task, grpc_task],
            grace: idle,
        })
    }

    /// The HTTP address listened on (the port picked, for port 0).
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// The gRPC address listened on.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc
    }

    /// The lock service behind both.
    pub fn locks(&self) -> &Arc<LockService> {
        &self.locks
    }

    /// Ends the service gracefully: new lock requests are refused
    /// ([`ServeError::ShuttingDown`](crate::ServeError::ShuttingDown)),
    /// the listeners stop accepting, the requests under way finish and
    /// get their answers, then the client settles every call in flight
    /// ([`Redlock::shutdown`]). The locks granted stay held by their
    /// owners until released or expired: a lock belongs to its owner, not
    /// to this process (docs/serve.md, "Shutdown and crashes").
    pub async fn shutdown(self) {
        self.locks.close();
        let _ = self.stop.send(true);
        for mut task in self.tasks {
            if tokio::time::timeout(self.grace, &mut task).await.is_err() {
                task.abort();
                let _ = task.await;
            }
        }
        self.locks.leave_granted();
        self.locks.redlock().shutdown().await;
    }
}
