//! One name, one thing (ARCHITECTURE.md, "Invariants"): no two types of the library's public
//! surface share a name, so a name read anywhere (a doc, a log, an error) means one thing.
//! Only `pub` items count: `unreachable_pub` (lib.rs) keeps `pub` for what is reachable from
//! outside, so everything else is `pub(crate)` or narrower and may reuse a local name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Names still shared, each in an area another piece of work owns (issue 36, item 3); remove
/// an entry when its rename lands.
const SHARED_FOR_NOW: &[(&str, &str)] = &[
    // The per-algorithm state of each algorithm module (`algorithm/`, issue 36 item 2's work).
    ("State", "algorithm/"),
    // One thing, not two: a descriptor as `sluice::client` builds it and as the model holds it.
    ("Descriptor", "client/ and model.rs"),
];

#[test]
fn no_two_public_types_share_a_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        for name in public_types(&text) {
            seen.entry(name).or_default().push(rel.clone());
        }
    }
    let shared: Vec<String> = seen
        .into_iter()
        .filter(|(name, at)| at.len() > 1 && !SHARED_FOR_NOW.iter().any(|(n, _)| n == name))
        .map(|(name, at)| format!("{name}: {}", at.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "public types of one name (rename one): {shared:#?}"
    );
}

#[test]
fn the_name_scan_sees_public_types_only() {
    let text = "pub struct A;\npub(crate) struct B;\nstruct C;\npub enum D {}\n    pub trait E {}\n\
                pub type F = u8;\npub(super) enum G {}\n#[cfg(test)]\nmod tests {\n    pub struct H;\n}\n";
    assert_eq!(public_types(text), ["A", "D", "E", "F"]);
}

/// The `pub` (not `pub(...)`) structs, enums, traits and type aliases of a file, before its
/// `#[cfg(test)] mod` tail.
fn public_types(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim_start).peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|l| l.starts_with("mod ")) {
            break;
        }
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        for kind in ["struct ", "enum ", "trait ", "type "] {
            if let Some(name) = rest.strip_prefix(kind) {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        }
    }
    out
}

/// The library's files: everything under `src` but the binaries and their tests.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("bin") {
                walk(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && !p.ends_with("main.rs")
            && !p.ends_with("tests.rs")
        {
            out.push(p);
        }
    }
}
