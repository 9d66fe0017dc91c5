//! The public API, read from the sources:
//!
//! - every public `async fn` says what dropping it does (`# Cancel safety`)
//!   and, where it returns a `Result`, when it fails (`# Errors`);
//! - the public surface is pinned: every `pub` item of the library (with
//!   `internals` on, `unreachable_pub` makes `pub` mean public), listed in
//!   `tests/api_surface.txt`. A new public item fails here until it is added
//!   to the list on purpose, which is when its docs and example are
//!   reviewed; a removed one fails until the list drops it. And the client
//!   type stays small: at most 15 public methods on `Redlock`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each public `async fn` in `text`: its name, its doc comment and its
/// signature.
fn public_async_fns(text: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("pub async fn ") else {
            continue;
        };
        let name = rest.split(['(', '<']).next().unwrap_or(rest).to_owned();
        let mut doc = Vec::new();
        for above in lines[..i].iter().rev() {
            let above = above.trim_start();
            if let Some(d) = above.strip_prefix("///") {
                doc.push(d.trim().to_owned());
            } else if above.starts_with("#[") || above.starts_with("//") {
                continue;
            } else {
                break;
            }
        }
        doc.reverse();
        let signature: String = lines[i..]
            .iter()
            .take_while(|l| !l.trim_end().ends_with('{'))
            .chain(lines[i..].iter().find(|l| l.trim_end().ends_with('{')))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        out.push((name, doc.join("\n"), signature));
    }
    out
}

#[test]
fn every_public_async_fn_says_how_it_fails_and_what_dropping_it_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (name, doc, signature) in public_async_fns(&text) {
            seen += 1;
            let at = file.strip_prefix(&root).unwrap().display();
            if !doc.contains("# Cancel safety") {
                missing.push(format!("{at}: {name}: no `# Cancel safety`"));
            }
            if signature.contains("Result<") && !doc.contains("# Errors") {
                missing.push(format!("{at}: {name}: no `# Errors`"));
            }
        }
    }
    assert!(
        seen > 40,
        "only {seen} public async fns found: the scan is broken"
    );
    assert!(
        missing.is_empty(),
        "{} missing sections:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

/// Each public item in `text` as `Owner::name` (methods) or `kind name`,
/// with the `impl` it sits in where there is one.
fn public_items(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut owner: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break; // unit tests below
        }
        if let Some(rest) = line.strip_prefix("impl") {
            // `impl Foo {`, `impl<'a> Foo<'a> {`, but not trait impls.
            let rest = rest.trim_start_matches(|c| c != ' ').trim();
            owner = (!rest.contains(" for "))
                .then(|| rest.split(['<', ' ', '{']).next().unwrap_or("").to_owned());
            continue;
        }
        if line == "}" {
            owner = None;
            continue;
        }
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("pub ") else {
            continue;
        };
        let rest = rest.strip_prefix("const fn ").map_or(rest, |r| r);
        let (kind, rest) = match rest.split_once(' ') {
            Some((k @ ("fn" | "struct" | "enum" | "trait" | "const" | "type" | "mod"), r)) => {
                (k, r)
            }
            Some(("async", r)) => ("fn", r.strip_prefix("fn ").unwrap_or(r)),
            _ => continue,
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indented = line.starts_with("    ");
        match (&owner, indented, kind) {
            (Some(owner), true, "fn" | "const") => out.push(format!("{owner}::{name}")),
            (_, false, _) => out.push(format!("{kind} {name}")),
            _ => {}
        }
    }
    out
}

fn surface() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut all = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let at = file.strip_prefix(&root).unwrap().display().to_string();
        for item in public_items(&text) {
            all.insert(format!("{at}: {item}"));
        }
    }
    all
}

#[test]
fn the_public_surface_is_the_pinned_one() {
    let pinned_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api_surface.txt");
    let pinned: BTreeSet<String> = std::fs::read_to_string(&pinned_path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let now = surface();
    assert!(
        now.len() > 100,
        "only {} items found: the scan is broken",
        now.len()
    );
    let added: Vec<_> = now.difference(&pinned).collect();
    let removed: Vec<_> = pinned.difference(&now).collect();
    if std::env::var_os("REDQUORUM_PIN_SURFACE").is_some() {
        let mut text = String::from(
            "# Every public item of the library (tests/api_docs.rs).\n\
             # Regenerate: REDQUORUM_PIN_SURFACE=1 cargo test --test api_docs\n",
        );
        for item in &now {
            text.push_str(item);
            text.push('\n');
        }
        std::fs::write(&pinned_path, text).unwrap();
        return;
    }
    assert!(
        added.is_empty() && removed.is_empty(),
        "the public surface changed (a new item needs docs and an example; then \
         REDQUORUM_PIN_SURFACE=1 cargo test --test api_docs pins it)\n  added: {added:#?}\n  removed: {removed:#?}"
    );
}

#[test]
fn the_client_keeps_at_most_fifteen_public_methods() {
    let methods: Vec<String> = surface()
        .into_iter()
        .filter_map(|item| item.split_once(": Redlock::").map(|(_, m)| m.to_owned()))
        .collect();
    assert!(methods.len() >= 10, "{methods:?}: the scan is broken");
    assert!(
        methods.len() <= 15,
        "{} public methods on Redlock: {methods:?}",
        methods.len()
    );
}

/// The scan itself, on a sample: a method, a free item, a trait impl's
/// method (not counted), a crate-private item (not counted).
#[test]
fn the_scan_reads_items_and_owners() {
    let sample = "pub struct Foo;\nimpl Foo {\n    pub fn a(&self) {}\n    pub(crate) fn b(&self) {}\n}\nimpl Clone for Foo {\n    pub fn clone(&self) -> Self { Foo }\n}\npub async fn free() {}\n";
    assert_eq!(public_items(sample), ["struct Foo", "Foo::a", "fn free"]);
}
