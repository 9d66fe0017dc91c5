//! The library's connection events in the history: what its transport logs
//! (`redquorum::transport`, at debug and above: an attempt failed, a
//! connection lost or dropped for want of an answer, releases sent again on
//! a new connection, a node's settings found wrong) recorded as `link`
//! lines beside the client's own, so that a key left after a run can be
//! traced to its node's connections ([`crate::check`] prints the last ones
//! of each node a key was left on).

use std::fmt;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::history::Recorder;

/// Where the library's transport logs.
const TARGET: &str = "redquorum::transport";

/// A [`Layer`] that records the transport's events in the history.
#[derive(Debug)]
pub struct LinkLog {
    rec: Arc<Recorder>,
    /// The client's node URLs, in order: a `node` field names its node by
    /// number (1-based) in the history, as the nemesis does.
    nodes: Vec<String>,
}

impl LinkLog {
    /// Records into `rec`, naming the nodes of `nodes` by their numbers.
    pub fn new(rec: Arc<Recorder>, nodes: &[String]) -> LinkLog {
        LinkLog {
            rec,
            nodes: nodes.to_vec(),
        }
    }

    /// Installs it as the process's only subscriber: every other event and
    /// span of the library stays disabled (and costs nothing).
    pub fn install(self) {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(self);
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            eprintln!("chaos: a tracing subscriber was already set: link events not recorded");
        }
    }
}

impl<S: Subscriber> Layer<S> for LinkLog {
    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.is_event()
            && *metadata.level() <= Level::DEBUG
            && metadata.target().starts_with(TARGET)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields {
            nodes: &self.nodes,
            out: Vec::new(),
        };
        event.record(&mut fields);
        self.rec.record("link", &fields.out);
    }
}

/// An event's fields as the history's `key=value` words (`message` as
/// `what`), whitespace made `_`.
struct Fields<'a> {
    nodes: &'a [String],
    out: Vec<(&'static str, String)>,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}"));
    }
}

impl Fields<'_> {
    fn push(&mut self, field: &Field, value: String) {
        let name = match field.name() {
            "message" => "what",
            name => name,
        };
        let value = match self.nodes.iter().position(|n| *n == value) {
            Some(i) if name == "node" => (i + 1).to_string(),
            _ => value.replace(char::is_whitespace, "_"),
        };
        self.out.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Line;

    #[test]
    fn transport_events_are_recorded_with_their_node_by_number() {
        let dir = std::env::temp_dir().join(format!("chaos-link-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.log");
        let rec = Arc::new(Recorder::open(&path, "c1").unwrap());
        let nodes = vec![
            "redis://127.0.0.1:1".to_owned(),
            "redis://127.0.0.1:2".to_owned(),
        ];
        let layer = LinkLog::new(rec, &nodes);
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(
                target: "redquorum::transport::link::io",
                node = %nodes[1],
                error = %"refused by peer",
                "connection attempt failed"
            );
            // Not the transport's, or below debug: not recorded.
            tracing::debug!(target: "redquorum::engine::driver", "a round");
            tracing::trace!(target: "redquorum::transport::link", "a byte");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let lines: Vec<Line> = text.lines().filter_map(Line::parse).collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(lines[0].event, "link");
        assert_eq!(lines[0].get("node"), Some("2"));
        assert_eq!(lines[0].get("what"), Some("connection_attempt_failed"));
        assert_eq!(lines[0].get("error"), Some("refused_by_peer"));
    }
}
