//! The command line: commands, flags and their help.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0-255    exec: the command's own exit code when it ran to the end
  64       bad usage or configuration (EX_USAGE); exec -n N while holders run
           with another N
  65       release: the token held RESOURCE on no node (EX_DATAERR)
  69       too few nodes answered to decide (EX_UNAVAILABLE)
  70       internal error (EX_SOFTWARE)
  71       cannot start the runtime or signal handling (EX_OSERR)
  75       exec: the lock was not had in time: held elsewhere (EX_TEMPFAIL)
  77       a node rejected the credentials, or does not let the user run
           what redquorum needs (EX_NOPERM), before any command runs
  79       exec: the lease was lost (or about to be) and the command was stopped
  126/127  exec: the command could not be run / was not found
  128+N    exec: the command died of signal N, or redquorum got signal N
           (SIGINT, SIGTERM, SIGHUP, SIGQUIT), passed it on and stopped the
           command

Durations are written like 500ms, 30s, 2m or 1h30m.
Details, and what happens on loss: docs/cli.md";

/// Run a command on exactly one host of many, under a Redlock quorum lock.
#[derive(Debug, Parser)]
#[command(name = "redquorum", version, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every command.
#[derive(Debug, Args)]
pub struct Global {
    /// The Redis masters, comma-separated redis:// URLs (passwords allowed;
    /// they are never printed).
    #[arg(
        long,
        env = "REDQUORUM_NODES",
        value_delimiter = ',',
        global = true,
        hide_env_values = true,
        value_name = "URLS"
    )]
    pub nodes: Vec<String>,

    /// The longest one node may take to answer [default: min(50ms, TTL/20);
    /// status: 1s]. Raise it for distant nodes.
    #[arg(long, global = true, value_parser = humantime::parse_duration, value_name = "D")]
    pub node_timeout: Option<Duration>,

    /// A CA bundle (PEM) to trust for rediss:// nodes instead of the system
    /// roots.
    #[arg(long, env = "REDQUORUM_TLS_CA", global = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// A client certificate (PEM) for rediss:// nodes that require one
    /// (mutual TLS); needs --tls-key.
    #[arg(
        long,
        env = "REDQUORUM_TLS_CERT",
        global = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM); needs --tls-cert.
    #[arg(
        long,
        env = "REDQUORUM_TLS_KEY",
        global = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// Interop keys: a plain lock's key is the resource name itself, as
    /// rslock, node-redlock and redsync name theirs, so that their holders
    /// and this command's exclude each other (see docs/migrating.md).
    /// (Environment: REDQUORUM_INTEROP_KEYS=1.)
    #[arg(long, env = "REDQUORUM_INTEROP_KEYS", global = true, value_parser = clap::builder::FalseyValueParser::new())]
    pub interop_keys: bool,

    /// A prefix in front of every key (no braces, at most 256 bytes); every
    /// client of a resource must use the same one.
    #[arg(
        long,
        env = "REDQUORUM_KEY_PREFIX",
        global = true,
        value_name = "P",
        default_value = ""
    )]
    pub key_prefix: String,

    /// The deployment's longest TTL [default: 60s]: a longer --ttl is
    /// refused, and a node that restarted (or is met first, up for less
    /// than this) counts toward no new lock until it has been up this long. Every client of the
    /// nodes should use the same value. (Environment: REDQUORUM_MAX_TTL.)
    #[arg(long, env = "REDQUORUM_MAX_TTL", global = true, value_parser = humantime::parse_duration, value_name = "D")]
    pub max_ttl: Option<Duration>,

    /// Count a node that restarted at once, instead of after --max-ttl:
    /// UNSAFE where nodes restart empty or rolled back (two holders at once
    /// become possible); only for throwaway nodes. A durable deployment
    /// wants --trust-durable-restarts instead.
    /// (Environment: REDQUORUM_NO_RESTART_QUARANTINE=1.)
    #[arg(long, env = "REDQUORUM_NO_RESTART_QUARANTINE", global = true, value_parser = clap::builder::FalseyValueParser::new())]
    pub no_restart_quarantine: bool,

    /// Count a restart of a durable node (appendonly yes, appendfsync
    /// always, a kept volume) at once where its dataset mark shows it kept
    /// its data; a wiped, rolled-back or long-down node still sits out
    /// --max-ttl. Never switch AOF off at run time nor restore an old AOF
    /// with it on (docs/operations.md, "Trusting durable restarts").
    /// (Environment: REDQUORUM_TRUST_DURABLE_RESTARTS=1.)
    #[arg(long, env = "REDQUORUM_TRUST_DURABLE_RESTARTS", global = true, value_parser = clap::builder::FalseyValueParser::new())]
    pub trust_durable_restarts: bool,

    /// Refuse nodes that may evict lock keys (maxmemory with an evicting
    /// maxmemory-policy) instead of warning (exit 64).
    /// (Environment: REDQUORUM_STRICT=1.)
    #[arg(long, env = "REDQUORUM_STRICT", global = true, value_parser = clap::builder::FalseyValueParser::new())]
    pub strict: bool,

    /// Not an option: `--timeout` is ambiguous here, and is refused with the
    /// two it may mean (--wait, --node-timeout).
    #[arg(long, global = true, hide = true, value_name = "D")]
    pub timeout: Option<String>,

    /// Print nothing of redquorum's own but usage errors (the exit code says
    /// what happened).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Serve the client's metrics to Prometheus on http://ADDR/metrics while
    /// the command runs (exec, elect, leader --watch), e.g. 127.0.0.1:9898
    /// (docs/operations.md §7).
    #[arg(
        long,
        env = "REDQUORUM_METRICS_ADDR",
        global = true,
        value_name = "ADDR"
    )]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// More detail on stderr. By default: nodes that degrade or recover. -v:
    /// what happens and every node's answer in each round; -vv: debug;
    /// -vvv: everything. RUST_LOG (an env filter) overrides it.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Exec(ExecArgs),
    Elect(ElectArgs),
    Leader(LeaderArgs),
    Status(StatusArgs),
    List(ListArgs),
    Release(ReleaseArgs),
    Nodes(NodesArgs),
    Members(MembersArgs),
}

impl Command {
    /// Whether it runs until stopped or its command ends: what a metrics
    /// endpoint is for.
    pub fn runs_on(&self) -> bool {
        match self {
            Command::Exec(_) | Command::Elect(_) => true,
            Command::Leader(args) => args.watch,
            _ => false,
        }
    }
}

/// Stand for leader of NAME, waiting as long as it takes, and run CMD as
/// leader: `exec --fence --wait forever` on NAME, with the leader's term in
/// REDQUORUM_TERM (and REDQUORUM_FENCE).
///
/// The term is larger than every earlier leader's: pass it to what the
/// command writes to. The command is stopped, as under exec, when the
/// leadership cannot be kept (exit 79); when it ends, the next candidate is
/// elected at once.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ElectArgs {
    /// The leadership's time to live (at least 100ms); it is extended every
    /// TTL/3 while the command runs. A leader that dies is replaced after it.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "D")]
    pub ttl: Duration,

    /// How long the command has between SIGTERM and SIGKILL when the
    /// leadership is lost or redquorum is signalled [default: as exec].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "D")]
    pub grace: Option<Duration>,

    /// Who leads, as `redquorum leader` and `status` show it (at most 256
    /// bytes) [default: HOST pid PID].
    #[arg(long, value_name = "L")]
    pub label: Option<String>,

    /// The name of the election.
    pub name: String,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

impl ElectArgs {
    /// The `exec` that runs it.
    pub fn into_exec(self) -> ExecArgs {
        ExecArgs {
            ttl: self.ttl,
            wait: Some(Duration::MAX),
            grace: self.grace,
            fence: true,
            permits: None,
            read: false,
            write: false,
            label: self.label,
            at_least: None,
            term: true,
            resource: self.name,
            command: self.command,
        }
    }
}

/// Show who leads NAME (`redquorum elect NAME`, `Election` in the
/// library), as a quorum of nodes says: its term, label, token prefix and
/// time left; or that no one leads.
///
/// Exit 0 when a quorum answered (leader or not), 69 when too few did.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct LeaderArgs {
    /// The name of the election.
    pub name: String,

    /// Print a line at every change of leader (woken by resignations;
    /// otherwise reading every 500ms), until interrupted.
    #[arg(long)]
    pub watch: bool,

    /// Print JSON objects (one per line with --watch) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Show every node: reachable or not (and why), the round trip of a PING,
/// the server and its version, and calls in flight.
///
/// Exit 0 when a quorum of nodes answered, 69 otherwise.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct NodesArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Change the deployment's members (docs/agreement.md, "Changing members").
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct MembersArgs {
    #[command(subcommand)]
    pub action: MembersAction,
}

#[derive(Debug, Subcommand)]
pub enum MembersAction {
    Change(ChangeArgs),
}

/// Move the deployment from --nodes to --to without a drain: declare the
/// change on both lists (every grant then needs a majority of each), wait
/// until no lock granted by the old members alone can be valid (max_ttl and
/// a few seconds), and record the new members. Clients of either list keep
/// working throughout; clients started later with the old list are refused.
///
/// Replace, add or remove a few members at a time: the lists must share a
/// majority of each. Run it again with the same --to to take up a change
/// that stopped. Exit 0 when done; 64 when the lists or the record do not
/// allow it; 69 when too few nodes answered.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ChangeArgs {
    /// The new members, comma-separated redis:// URLs (as --nodes).
    #[arg(long, value_delimiter = ',', required = true, value_name = "URLS")]
    pub to: Vec<String>,
}

/// Acquire RESOURCE, run CMD while keeping the lease alive, release.
///
/// The command runs in its own process group with REDQUORUM_RESOURCE,
/// REDQUORUM_TOKEN (and with --fence REDQUORUM_FENCE) set and stdio
/// inherited. If the lease cannot be kept, its process group gets SIGTERM
/// once less than --grace of the lock's validity is left (at once if the lock
/// is known to be gone), and SIGKILL when the validity ends or --grace has
/// passed, whichever comes first: the command never outlives the lock.
/// SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the command's process
/// group (a second one kills it); SIGTSTP is ignored.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ExecArgs {
    /// The lease's time to live (at least 100ms); it is extended every TTL/3
    /// while the command runs.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "D")]
    pub ttl: Duration,

    /// Wait up to D for the lock [default: one try]. 0s also means one try.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "D")]
    pub wait: Option<Duration>,

    /// How long the command has between SIGTERM and SIGKILL when the lease is
    /// lost or redquorum is signalled. At most TTL/3 [default: 5s, or TTL/4
    /// if shorter].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "D")]
    pub grace: Option<Duration>,

    /// Take a fencing token (REDQUORUM_FENCE): larger than every earlier
    /// holder's; pass it to the storage you write to.
    #[arg(long, conflicts_with = "permits")]
    pub fence: bool,

    /// Let N holders run at once: take one of N permits of RESOURCE (a
    /// semaphore; every exec of RESOURCE must give the same N). The command
    /// gets its slot in REDQUORUM_PERMIT.
    #[arg(short = 'n', long = "permits", value_name = "N")]
    pub permits: Option<u32>,

    /// Hold RESOURCE as one of its readers (a read/write lock): any number of
    /// `--read` commands run together, none while a `--write` one runs.
    #[arg(long, conflicts_with_all = ["fence", "permits", "write"])]
    pub read: bool,

    /// Hold RESOURCE as its writer (a read/write lock): alone, with no reader
    /// and no other writer. A waiting writer keeps new readers off, so
    /// readers cannot starve it.
    #[arg(long, conflicts_with_all = ["fence", "permits"])]
    pub write: bool,

    /// Who holds the lock, as `status` shows it (at most 256 bytes; not
    /// stored under --interop-keys or for --read) [default: HOST pid PID].
    #[arg(long, value_name = "L")]
    pub label: Option<String>,

    /// Keep the slot taken until D after the lock was taken, even when the
    /// command ends sooner or redquorum dies: for a job that must run once
    /// per period (a replica whose cron fires late finds it taken; a lock
    /// alone only keeps two runs from overlapping). Any length (23h for a
    /// nightly job), kept by a mark of its own: every replica must give
    /// --at-least. With it, a --ttl above --max-ttl is taken as --max-ttl.
    #[arg(long = "at-least", value_parser = humantime::parse_duration, value_name = "D",
          conflicts_with_all = ["permits", "read", "write"])]
    pub at_least: Option<Duration>,

    /// `elect`: the fence is the leader's term (REDQUORUM_TERM).
    #[arg(skip)]
    pub term: bool,

    /// The name of the lock.
    pub resource: String,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// List what is held now on a quorum of nodes: locks, leaderships,
/// read/write locks and semaphores whose name matches PATTERN — kind,
/// resource, holder label, token prefix, time left, nodes.
///
/// Each node's keys are scanned (SCAN, bounded), then each resource found
/// read on every node, as `status` reads it. Exit 0 when the list is
/// complete (enough nodes scanned, the limit not reached), 69 otherwise.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ListArgs {
    /// The names to list: `*` matches any run of characters.
    #[arg(default_value = "*")]
    pub pattern: String,

    /// At most this many entries (1 to 10000).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Show who holds RESOURCE on each node, and the quorum verdict.
///
/// Verdicts: HELD (one token on a quorum of nodes), FREE (a quorum of nodes
/// hold nothing), NOT_HELD (no token on a quorum, but fewer than a quorum
/// free: leftovers that expire at their PTTL), UNKNOWN (the unreachable nodes
/// could decide it). Exit 0, or 69 for UNKNOWN.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct StatusArgs {
    /// The name of the lock.
    pub resource: String,

    /// RESOURCE is a semaphore of N permits (`exec -n N`): show each slot,
    /// then how many permits are held.
    #[arg(short = 'n', long = "permits", value_name = "N")]
    pub permits: Option<u32>,

    /// RESOURCE is a read/write lock (`exec --read`/`--write`): show its
    /// writer, its live readers and a waiting writer's intent on each node,
    /// then the verdicts.
    #[arg(long, conflicts_with = "permits")]
    pub rw: bool,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print whole tokens instead of their first 8 characters (a token is
    /// what `release --token` needs).
    #[arg(long)]
    pub show_token: bool,
}

/// Release RESOURCE where it is held under TOKEN (compare-and-delete on every
/// node), for a holder that is gone or stuck.
///
/// Nodes where TOKEN does not hold the lock are left alone. Exit 0 once a
/// quorum confirmed RESOURCE is no longer held by TOKEN and TOKEN held it on
/// some node; 65 when TOKEN held it on no node that answered (mistyped,
/// already gone, or a lock of another kind: see --rw and -n); 69 when too
/// few nodes answered.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ReleaseArgs {
    /// The name of the lock.
    pub resource: String,

    /// RESOURCE is a read/write lock (`exec --read`/`--write`): TOKEN is
    /// its writer's (its writer key and intent go) or a reader's.
    #[arg(long, conflicts_with = "permits")]
    pub rw: bool,

    /// RESOURCE is a semaphore of N permits (`exec -n N`): TOKEN is a
    /// permit holder's, whichever slot it holds.
    #[arg(short = 'n', long = "permits", value_name = "N")]
    pub permits: Option<u32>,

    /// The holder's whole token (REDQUORUM_TOKEN of its command, or
    /// `status --show-token`).
    #[arg(long, value_name = "T")]
    pub token: String,
}
