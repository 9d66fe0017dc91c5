//! Freezing and slowing a node for a scenario, and undoing it.

use super::*;

pub(crate) fn nodes_script() -> String {
    std::env::var("REDQUORUM_SCRIPTS_NODES")
        .unwrap_or_else(|_| redquorum_bench::repo("scripts/nodes"))
}

pub(crate) fn run_nodes(action: &str, node: usize) -> bool {
    matches!(
        Command::new(nodes_script()).args([action, &node.to_string()]).status(),
        Ok(s) if s.success()
    )
}

/// Node `n` frozen (SIGSTOP of its server) until dropped, also on panic.
pub(crate) struct Frozen(usize);

/// The node currently frozen, for the Ctrl-C handler (0: none).
pub(crate) static FROZEN_NOW: AtomicUsize = AtomicUsize::new(0);

impl Frozen {
    pub(crate) fn new(n: usize) -> Frozen {
        FROZEN_NOW.store(n, Ordering::SeqCst);
        let guard = Frozen(n);
        assert!(run_nodes("freeze", n), "scripts/nodes freeze {n} failed");
        guard
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !run_nodes("thaw", self.0) {
            eprintln!(
                "!! could not thaw node {}: run `{} thaw {}`",
                self.0,
                nodes_script(),
                self.0
            );
        }
        FROZEN_NOW.store(0, Ordering::SeqCst);
    }
}

/// Whether `scripts/nodes` manages exactly the nodes in `REDQUORUM_NODES`:
/// never freeze someone else's cluster.
pub(crate) fn script_matches(urls: &[String]) -> Result<(), String> {
    let out = Command::new(nodes_script())
        .arg("urls")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nodes_script()))?;
    let listed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if listed == urls.join(",") {
        Ok(())
    } else {
        Err(format!(
            "`{} urls` prints {listed:?}, not REDQUORUM_NODES {:?} \
             (export REDQUORUM_BASE_PORT / REDQUORUM_STATE_DIR as for `scripts/nodes up`)",
            nodes_script(),
            urls.join(",")
        ))
    }
}
