//! `redquorum-serve`: Dapr's lock API over a quorum of Redis or Valkey
//! masters. Configured like `redquorum` (the same flags and environment
//! for the nodes, TLS and the deployment's settings); ends gracefully on
//! SIGTERM or SIGINT. docs/serve.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use redquorum::{Redlock, Retry};
use redquorum_serve::{ApiToken, Config, Limits, Running};

/// Serve Dapr's distributed-lock API (gRPC and HTTP) over a quorum of
/// Redis or Valkey masters.
#[derive(Parser, Debug)]
#[command(name = "redquorum-serve", version)]
struct Args {
    /// The nodes: independent masters, comma-separated
    /// (redis://[:PASSWORD@]HOST:PORT, rediss:// for TLS).
    #[arg(
        long,
        env = "REDQUORUM_NODES",
        value_delimiter = ',',
        required = true,
        hide_env_values = true
    )]
    nodes: Vec<String>,
    /// The HTTP address: Dapr's HTTP API, /v1.0/healthz, /metrics.
    #[arg(long, env = "REDQUORUM_SERVE_HTTP", default_value = "127.0.0.1:3500")]
    http: SocketAddr,
    /// The gRPC address: Dapr's runtime service (its lock methods).
    #[arg(long, env = "REDQUORUM_SERVE_GRPC", default_value = "127.0.0.1:50001")]
    grpc: SocketAddr,
    /// A lock store name to answer for (repeat for more).
    #[arg(long = "store", default_value = "lockstore")]
    stores: Vec<String>,
    /// A file holding the API token every request must carry
    /// (`dapr-api-token`, or `Authorization: Bearer`): required when an
    /// address is not loopback.
    #[arg(long, env = "REDQUORUM_SERVE_API_TOKEN_FILE", value_name = "FILE")]
    api_token_file: Option<PathBuf>,
    /// The deployment's longest TTL: the longest expiry granted.
    #[arg(long, env = "REDQUORUM_MAX_TTL", value_parser = humantime::parse_duration, default_value = "60s")]
    max_ttl: Duration,
    /// The longest one node may take to answer.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "D")]
    node_timeout: Option<Duration>,
    /// The keys' prefix: the same as every other client's of these locks.
    #[arg(long, env = "REDQUORUM_KEY_PREFIX", default_value = "")]
    key_prefix: String,
    /// Trust a node restarted with its data to have kept every lock.
    #[arg(long, env = "REDQUORUM_TRUST_DURABLE_RESTARTS")]
    trust_durable_restarts: bool,
    /// The CA certificate (PEM) for rediss:// nodes.
    #[arg(long, env = "REDQUORUM_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for rediss:// nodes, with --tls-key.
    #[arg(
        long,
        env = "REDQUORUM_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long,
        env = "REDQUORUM_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// Lock requests handled at once; more are answered 429.
    #[arg(long, default_value_t = Limits::default().max_in_flight)]
    max_in_flight: usize,
    /// Connections open at once (HTTP and gRPC); more wait to be accepted.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// How long a connection may send nothing before it is closed (HTTP:
    /// a request's headers; gRPC: any bytes, pinged every third of it).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "D", default_value = "30s")]
    idle_timeout: Duration,
    /// Lock requests admitted per second; more are answered 429.
    #[arg(long, default_value_t = Limits::default().max_rate)]
    max_rate: u32,
    /// Locks granted through this instance and not yet expired.
    #[arg(long, default_value_t = Limits::default().max_held)]
    max_held: usize,
    /// Of those, the most for one owner.
    #[arg(long, default_value_t = Limits::default().max_held_per_owner)]
    max_held_per_owner: usize,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = Limits::default().max_request_bytes)]
    max_request_bytes: usize,
}

/// sysexits: bad usage, unavailable, cannot listen, bad configuration.
const USAGE: u8 = 64;
const OSERR: u8 = 71;
const CONFIG: u8 = 78;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("redquorum-serve: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(args: Args) -> Result<(), (u8, String)> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| (CONFIG, format!("{}: {e}", path.display())))
    };
    let token = match &args.api_token_file {
        None => None,
        Some(path) => {
            let text = String::from_utf8(read(path)?)
                .map_err(|_| (CONFIG, format!("{}: not UTF-8", path.display())))?;
            Some(ApiToken::new(&text).ok_or((CONFIG, format!("{}: empty", path.display())))?)
        }
    };
    let limits = Limits {
        max_request_bytes: args.max_request_bytes,
        max_in_flight: args.max_in_flight,
        max_connections: args.max_connections,
        idle_timeout: args.idle_timeout,
        max_rate: args.max_rate,
        max_held: args.max_held,
        max_held_per_owner: args.max_held_per_owner,
        ..Limits::default()
    };
    limits.check().map_err(|why| (USAGE, why))?;
    let mut builder = Redlock::builder()
        .nodes(&args.nodes)
        .retry(Retry::none())
        .key_prefix(&args.key_prefix)
        .max_ttl(args.max_ttl)
        .trust_durable_restarts(args.trust_durable_restarts);
    if let Some(timeout) = args.node_timeout {
        builder = builder.node_timeout(timeout);
    }
    if let Some(ca) = &args.tls_ca {
        builder = builder.tls_ca(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls_client_cert(read(cert)?, read(key)?);
    }
    let redlock = builder.build().await.map_err(|e| (CONFIG, e.to_string()))?;
    let config = Config {
        http: args.http,
        grpc: args.grpc,
        stores: args.stores,
        token,
        max_ttl: args.max_ttl,
        limits,
    };
    // Listening for SIGTERM before the addresses are printed: a supervisor
    // that reads them and stops it at once must find it stoppable.
    let stop = stop_signal().map_err(|e| (OSERR, format!("cannot listen for signals: {e}")))?;
    let running = match Running::start(redlock.clone(), config).await {
        Ok(running) => running,
        Err(e) => {
            redlock.shutdown().await;
            let code = match e {
                redquorum_serve::StartError::TokenRequired(_)
                | redquorum_serve::StartError::Limits(_) => USAGE,
                _ => OSERR,
            };
            return Err((code, e.to_string()));
        }
    };
    // Scripts read the addresses from here (port 0 picks one).
    println!("http {} grpc {}", running.http_addr(), running.grpc_addr());
    stop.await;
    tracing::info!("stopping: finishing the requests under way");
    running.shutdown().await;
    Ok(())
}

/// A future that resolves at SIGTERM or SIGINT, listening from now on.
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
