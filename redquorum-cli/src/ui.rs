//! What redquorum itself prints: messages, logs and the wait spinner, all
//! on stderr (stdout belongs to the command and to `status`).

use std::fmt;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing_subscriber::EnvFilter;

/// Sets up tracing on stderr: RUST_LOG if set, else by `-v` count.
pub fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "off",
        // Degraded and recovered nodes, lost leases: without asking.
        (false, 0) => "redquorum=warn,redquorum::telemetry=info",
        // Each round's per-node answers and the nodes heard after it.
        (false, 1) => {
            "redquorum=info,redquorum::engine::driver=debug,redquorum::engine::ballot=debug"
        }
        (false, 2) => "redquorum=debug",
        (false, _) => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("redquorum: ignoring RUST_LOG={spec:?}: {e}");
            EnvFilter::new(default)
        }),
        _ => EnvFilter::new(default),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose >= 2)
        .try_init();
}

/// redquorum's own messages.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    quiet: bool,
}

impl Ui {
    pub fn new(quiet: bool) -> Self {
        Ui { quiet }
    }

    /// Something the operator should know (not printed with --quiet).
    pub fn note(&self, message: fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("redquorum: {message}");
        }
    }

    /// A command's result, on stdout (not printed with --quiet).
    pub fn out(&self, message: fmt::Arguments<'_>) {
        if !self.quiet {
            println!("{message}");
        }
    }

    /// An error (not printed with --quiet: the exit code says it).
    pub fn error(&self, message: fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("redquorum: error: {message}");
        }
    }

    /// A usage or configuration error: printed even with --quiet, since the
    /// invocation itself is wrong.
    pub fn usage(&self, message: &str) {
        eprintln!("redquorum: error: {message}\n\nFor more information, try '--help'.");
    }

    /// A spinner showing the time waited, drawn only on a terminal and not
    /// with --quiet; hidden until [`Spinner::show`].
    pub fn spinner(&self, what: String) -> Spinner {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(what);
        Spinner {
            bar,
            enabled: !self.quiet && std::io::stderr().is_terminal(),
        }
    }
}

/// See [`Ui::spinner`].
pub struct Spinner {
    bar: ProgressBar,
    enabled: bool,
}

impl Spinner {
    /// Starts drawing (once the wait has passed a second).
    pub fn show(&self) {
        if self.enabled {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(100));
        }
    }

    /// Clears the line, before the command writes to the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// `text` (a holder's label, as stored on the nodes) safe to print on a
/// terminal line: control characters — a newline, an ANSI escape — are
/// shown escaped (`\n`, `\u{1b}`), so a label cannot forge or recolour
/// output lines.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::printable("worker-7"), "worker-7");
        assert_eq!(super::printable("a\nFREE\u{1b}[31m"), "a\\nFREE\\u{1b}[31m");
    }
}
