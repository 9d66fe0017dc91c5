//! Every repository path the README and docs/ name exists: a file moved or
//! renamed without its mentions fails here. A path is a `code span` that
//! starts with one of the repository's top folders (or is a root file);
//! globs, placeholders and `file::function` test names are not paths.
//! And no Rust file is longer than [`MAX_LINES`]: one idea per module.

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

/// The longest a Rust source file may be: a longer one holds more than one
/// idea, and is split (a module of its own, its tests beside it).
const MAX_LINES: usize = 600;

/// The Rust files under `dir` (`target` and hidden folders skipped).
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_rust_file_is_longer_than_max_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(
        files.len() > 100,
        "the walk found the sources: {}",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines})", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "longer than {MAX_LINES} lines: {long:?}");
}
