//! Every repository path the README and docs/ name exists: a file moved or
//! renamed without its mentions fails here. A path is a `code span` that
//! starts with one of the repository's top folders (or is a root file);
//! globs, placeholders and `file::function` test names are not paths.

use std::path::Path;

const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "docs/",
    "scripts/",
    "benches/",
    "chaos/",
    "redquorum-cli/",
    "test-support/",
    "examples/",
    "deploy/",
    ".ci/",
];

/// The code spans of `text` that name a repository path.
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 0 || span.contains(char::is_whitespace) {
            continue;
        }
        let span = span.trim_end_matches([',', '.', ':', ';', ')']);
        let placeholder = ['*', '{', '<', '…', '$', '?', '[', '|'];
        if span.contains(placeholder) || span.contains("::") || span.contains("..") {
            continue;
        }
        if ROOTS.iter().any(|root| span.starts_with(root)) {
            // `path:line` names a line of a file.
            let path = span.split(':').next().unwrap_or(span);
            out.push(path.to_owned());
        }
    }
    out
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for path in paths(&text) {
            if !root.join(&path).exists() {
                let name = doc.strip_prefix(root).unwrap().display().to_string();
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn what_counts_as_a_path() {
    let text = "see `tests/a.rs`, `src/x.rs:12`, `tests/*.rs`, `redis_nodes::f`, `README`, \
                `scripts/nodes up`, `docs/`";
    assert_eq!(paths(text), ["tests/a.rs", "src/x.rs", "docs/"]);
}
