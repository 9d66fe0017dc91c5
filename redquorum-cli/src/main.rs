//! `redquorum`: run a command under a Redlock quorum lock, inspect a lock,
//! release one by token. See `docs/cli.md`.

mod cli;
mod exec;
mod exit;
mod leader;
mod list;
mod members;
mod nodes;
mod process;
mod release;
mod status;
mod ui;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use redquorum::{ConfigError, Redlock, Retry};

use crate::cli::{Cli, Command, Global};
use crate::exit::Code;
use crate::ui::Ui;

/// Far beyond any useful node timeout, and far from instant overflow.
const MAX_NODE_TIMEOUT: Duration = Duration::from_secs(3600);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; anything else is a usage
            // error (EX_USAGE), not clap's default 2.
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    ui::init_logging(cli.global.verbose, cli.global.quiet);
    let ui = Ui::new(cli.global.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            ui.error(format_args!("cannot start the async runtime: {e}"));
            return ExitCode::from(exit::OSERR);
        }
    };
    let code = runtime.block_on(run(cli, &ui));
    // Background tasks (reconnects, release tails) are not waited for: every
    // command has finished what it needs before returning.
    runtime.shutdown_background();
    ExitCode::from(code)
}

async fn run(cli: Cli, ui: &Ui) -> Code {
    if cli.global.timeout.is_some() {
        ui.usage(
            "--timeout: did you mean --wait D (how long exec waits for the lock) or \
             --node-timeout D (how long one node may take to answer)?",
        );
        return exit::USAGE;
    }
    let nodes = match node_urls(&cli.global) {
        Ok(nodes) => nodes,
        Err(message) => {
            ui.usage(&message);
            return exit::USAGE;
        }
    };
    if cli
        .global
        .node_timeout
        .is_some_and(|t| t > MAX_NODE_TIMEOUT)
    {
        ui.usage("--node-timeout must be at most 1h");
        return exit::USAGE;
    }
    // Served from before the client is built (its nodes' series from the
    // start) until the command ends.
    let _metrics = match cli.global.metrics_addr {
        None => None,
        Some(_) if !cli.command.runs_on() => {
            ui.usage(
                "--metrics-addr: only exec, elect and leader --watch run long enough to scrape",
            );
            return exit::USAGE;
        }
        Some(addr) => match redquorum::telemetry::MetricsEndpoint::serve(addr).await {
            Ok(endpoint) => Some(endpoint),
            Err(e) => {
                ui.error(format_args!("--metrics-addr {addr}: {e}"));
                return exit::OSERR;
            }
        },
    };
    match cli.command {
        Command::Exec(args) => exec::exec(&cli.global, &nodes, args, ui).await,
        Command::Elect(args) => exec::exec(&cli.global, &nodes, args.into_exec(), ui).await,
        Command::Leader(args) => leader::leader(&cli.global, &nodes, &args, ui).await,
        Command::Status(args) => status::status(&cli.global, &nodes, &args, ui).await,
        Command::List(args) => list::list(&cli.global, &nodes, &args, ui).await,
        Command::Release(args) => release::release(&cli.global, &nodes, &args, ui).await,
        Command::Nodes(args) => nodes::nodes(&cli.global, &nodes, &args, ui).await,
        Command::Members(args) => members::members(&cli.global, &nodes, &args, ui).await,
    }
}

/// The node URLs from `--nodes` / `REDQUORUM_NODES`, trimmed, empty entries
/// (a trailing comma) dropped.
fn node_urls(global: &Global) -> Result<Vec<String>, String> {
    let urls: Vec<String> = global
        .nodes
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        return Err(
            "no nodes: pass --nodes URL,URL,… or set REDQUORUM_NODES (comma-separated redis:// URLs)"
                .to_owned(),
        );
    }
    Ok(urls)
}

/// A client over `nodes` with the global settings and `retry`.
pub(crate) async fn connect(
    global: &Global,
    nodes: &[String],
    retry: Retry,
) -> Result<Redlock, ConfigError> {
    connect_with(global, nodes, retry, global.node_timeout).await
}

/// [`connect`] with this node timeout instead of --node-timeout.
pub(crate) async fn connect_with(
    global: &Global,
    nodes: &[String],
    retry: Retry,
    node_timeout: Option<std::time::Duration>,
) -> Result<Redlock, ConfigError> {
    builder(global, nodes, retry, node_timeout)?.build().await
}

/// The builder [`connect_with`] builds.
pub(crate) fn builder(
    global: &Global,
    nodes: &[String],
    retry: Retry,
    node_timeout: Option<std::time::Duration>,
) -> Result<redquorum::Builder, ConfigError> {
    let mut builder = Redlock::builder()
        .nodes(nodes)
        .retry(retry)
        .interop_keys(global.interop_keys)
        .key_prefix(&global.key_prefix)
        .restart_quarantine(!global.no_restart_quarantine)
        .trust_durable_restarts(global.trust_durable_restarts)
        .strict(global.strict);
    if let Some(max_ttl) = global.max_ttl {
        builder = builder.max_ttl(max_ttl);
    }
    if let Some(timeout) = node_timeout {
        builder = builder.node_timeout(timeout);
    }
    let tls = tls_files(global)?;
    if let Some(ca) = tls.ca {
        builder = builder.tls_ca(ca);
    }
    if let Some((cert, key)) = tls.client {
        builder = builder.tls_client_cert(cert, key);
    }
    Ok(builder)
}

/// The contents of --tls-ca / --tls-cert / --tls-key (PEM).
#[derive(Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Reads the TLS files named on the command line; an unreadable one is a
/// `ConfigError::Tls` naming the file (never its contents).
pub(crate) fn tls_files(global: &Global) -> Result<TlsFiles, ConfigError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| ConfigError::Tls(format!("{}: {e}", path.display())))
    };
    let ca = global.tls_ca.as_deref().map(read).transpose()?;
    let client = match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    Ok(TlsFiles { ca, client })
}

/// Whether the nodes refused a round for want of permission or
/// credentials, not for being down: a quorum could not answer because
/// too many refused this user.
pub(crate) fn denied(votes: &redquorum::Votes) -> bool {
    let refused = votes.count(|a| {
        matches!(
            a,
            redquorum::Answer::Failed(
                redquorum::NodeError::NoPermission(_) | redquorum::NodeError::Auth(_)
            )
        )
    });
    refused > votes.len() - votes.len() / 2 - 1
}

/// The exit code and message for a client that could not be built.
pub(crate) fn config_failure(ui: &Ui, error: &ConfigError) -> Code {
    match error {
        ConfigError::Auth { .. } | ConfigError::Permission { .. } => {
            ui.error(format_args!("{error}"));
            exit::NOPERM
        }
        _ => {
            ui.usage(&error.to_string());
            exit::USAGE
        }
    }
}
