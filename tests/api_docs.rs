//! Every public `async fn` of the library says what dropping it does
//! (`# Cancel safety`) and, where it returns a `Result`, when it fails
//! (`# Errors`): read from the sources, so that a new one without them
//! fails here.

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
