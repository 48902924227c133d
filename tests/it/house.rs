//! The map's structural invariants, checked on the source itself (ARCHITECTURE.md, "Invariants"):
//! no import circles between the library's files, and no arrow pointing up between its
//! top-level modules. A file's imports are every `crate::` and `super::` path it names outside
//! its `#[cfg(test)]` part; a module's own descendants (which it declares and may re-export) are
//! not arrows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// The library's top-level modules, lowest first: a module may import only modules of a lower
/// rank. A new top-level module must be placed here.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    ("proto", 0),
    ("secret", 0),
    ("excerpt", 0),
    ("clock", 1),
    ("client", 1),
    ("background", 1),
    ("algorithm", 2),
    ("quiet", 2),
    ("rules", 3),
    ("stats", 4),
    ("config", 5),
    ("store", 5),
    ("limiter", 6),
    ("metrics", 7),
    ("statsd", 8),
    ("service", 9),
    ("dry_run", 10),
    ("fuzzing", 10),
    ("grpc_threads", 10),
    ("settings", 10),
    ("tasks", 10),
    ("watch", 10),
    ("app", 11),
];

#[test]
fn no_import_circles_between_files() {
    let graph = Graph::read(&src_dir());
    let circles = graph.circles();
    assert!(
        circles.is_empty(),
        "import circles between files (break each by moving the shared item down): {circles:#?}"
    );
}

#[test]
fn no_arrow_points_up_between_top_level_modules() {
    let graph = Graph::read(&src_dir());
    let rank: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (from, tos) in &graph.edges {
        let Some(top) = from.first() else { continue };
        let Some(&r) = rank.get(top.as_str()) else {
            wrong.push(format!("{top}: not placed in house.rs's LAYERS"));
            continue;
        };
        for to in tos {
            let Some(to_top) = to.first() else { continue };
            if to_top == top {
                continue;
            }
            match rank.get(to_top.as_str()) {
                Some(&t) if t < r => {}
                _ => wrong.push(format!("{} -> {}", from.join("::"), to.join("::"))),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "arrows that point up or sideways: {wrong:#?}"
    );
}

/// What a folder must not name, outside its tests: (folder, forbidden tokens or paths, why).
const MUST_NOT_KNOW: &[(&str, &[&str], &str)] = &[
    (
        "algorithm/",
        &[
            "tokio",
            "async",
            "std::fs",
            "std::net",
            "std::io",
            "crate::clock",
            "crate::store",
        ],
        "algorithms are pure: no I/O, nothing async, time passed in",
    ),
    (
        "limiter/",
        &["tonic", "prost", "crate::proto", "crate::service"],
        "the limiter holds the policy and no protobuf",
    ),
    (
        "rules/",
        &["crate::config", "crate::store", "crate::limiter"],
        "the rule tree is built by config/ and read by the limiter, not the reverse",
    ),
];

/// The one file outside algorithm/ that names `Algorithm` variants: the Lua ports' codes.
const LUA_CODE_TABLE: &str = "store/redis/script/mod.rs";

/// `Algorithm::Gcra` or `Algorithm::*` (not `Algorithm::ALL`, a constant).
fn names_an_algorithm(token: &str) -> bool {
    token.split("Algorithm::").skip(1).any(|rest| {
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
        rest.starts_with(['*', '{'])
            || (name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.contains(|c: char| c.is_ascii_lowercase()))
    })
}

#[test]
fn the_algorithm_check_sees_a_variant() {
    assert!(names_an_algorithm("Algorithm::Concurrency"));
    assert!(names_an_algorithm("crate::algorithm::Algorithm::Distinct"));
    assert!(names_an_algorithm("Algorithm::*"));
    assert!(!names_an_algorithm("Algorithm::ALL"));
    assert!(!names_an_algorithm("Algorithm::DEFAULT"));
    assert!(!names_an_algorithm("algorithm::Limit"));
}

#[test]
fn folders_do_not_know_what_the_map_says_they_must_not() {
    let src = src_dir();
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let source = std::fs::read_to_string(f).unwrap();
        let text = code_of(&source);
        let tokens = tokenize(&text).join(" ").replace(" :: ", "::");
        for (folder, words, why) in MUST_NOT_KNOW {
            if !rel.starts_with(folder) {
                continue;
            }
            for w in *words {
                let hit = tokens
                    .split(' ')
                    .any(|t| t == *w || t.starts_with(&format!("{w}::")));
                if hit {
                    wrong.push(format!("{rel} names `{w}` ({why})"));
                }
            }
        }
        // One error enum per layer: anyhow only where a failure ends the process.
        let ends_process = rel == "main.rs" || rel.starts_with("app/") || rel.starts_with("bin/");
        if !ends_process
            && tokens
                .split(' ')
                .any(|t| t == "anyhow" || t.starts_with("anyhow::"))
        {
            wrong.push(format!(
                "{rel} names anyhow (only main.rs, app/ and bin/ may)"
            ));
        }
        // Config types are not model types: the serde layer stays inside config/.
        if !rel.starts_with("config/") && tokens.contains("config::raw") {
            wrong.push(format!(
                "{rel} names config::raw (serde types never leave config/)"
            ));
        }
        // An algorithm's traits are answered by the algorithm (ALGORITHMS.md, "Adding an
        // algorithm"): only algorithm/ and the Lua ports' code table name a variant.
        if !rel.starts_with("algorithm/") && rel != LUA_CODE_TABLE {
            for v in tokens.split(' ').filter(|t| names_an_algorithm(t)) {
                wrong.push(format!(
                    "{rel} asks which algorithm it holds ({v}): ask a capability of Algorithm"
                ));
            }
        }
        // Storage keys are built in one place.
        let literals = source.split("#[cfg(test)]").next().unwrap_or_default();
        let spelt = literals
            .lines()
            .any(|l| !l.trim_start().starts_with("//") && l.contains("sluice:v"));
        if rel != "store/key.rs" && !rel.starts_with("bin/") && spelt {
            wrong.push(format!(
                "{rel} spells a storage key (keys are built in store/key.rs)"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_checker_sees_a_circle_and_an_upward_arrow() {
    // The checks above pass vacuously if the parser finds no imports: prove it finds them.
    let dir = tempdir();
    let write = |rel: &str, body: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    write("lib.rs", "pub mod a; pub mod b;");
    write("a/mod.rs", "pub mod x;\nuse crate::b::{y::Thing, Other};");
    write("a/x.rs", "use super::super::b;");
    write(
        "b/mod.rs",
        "pub mod y; pub struct Other; pub use crate::a::x as ax;",
    );
    write(
        "b/y.rs",
        "// use crate::a::ignored;\npub fn f() { crate::a::x::g(); }\n#[cfg(test)]\nmod t { use crate::a::ignored_too; }",
    );
    let graph = Graph::read(&dir);
    let edges: BTreeSet<(String, String)> = graph
        .edges
        .iter()
        .flat_map(|(f, ts)| ts.iter().map(move |t| (f.join("::"), t.join("::"))))
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("a", "b::y"),
        ("a", "b"),
        ("a::x", "b"),
        ("b", "a::x"),
        ("b::y", "a::x"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(edges, want);
    assert_eq!(
        graph.circles(),
        vec![vec!["a::x".to_string(), "b".to_string()]]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-house-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

struct Graph {
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    /// Reads every library file under `src` (not the binaries).
    fn read(src: &Path) -> Graph {
        let mut files = Vec::new();
        walk(src, &mut files);
        let mut modules: BTreeMap<Module, PathBuf> = BTreeMap::new();
        for f in files {
            let rel = f
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel.starts_with("bin/") || rel == "main.rs" || !rel.ends_with(".rs") {
                continue;
            }
            let mut parts: Module = rel[..rel.len() - 3].split('/').map(String::from).collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            modules.insert(parts, f);
        }
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (module, file) in &modules {
            let text = code_of(&std::fs::read_to_string(file).unwrap());
            let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
            for path in paths(&text, &parent) {
                let Some(target) = resolve(&modules, &path) else {
                    continue;
                };
                // A module owns its descendants: declaring or re-exporting them is no arrow.
                if target.starts_with(module) {
                    continue;
                }
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
        Graph { edges }
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<Vec<String>> {
        struct T<'g> {
            g: &'g Graph,
            index: BTreeMap<&'g Module, (usize, usize)>,
            stack: Vec<&'g Module>,
            on: BTreeSet<&'g Module>,
            next: usize,
            out: Vec<Vec<String>>,
        }
        fn visit<'g>(t: &mut T<'g>, v: &'g Module) {
            t.index.insert(v, (t.next, t.next));
            t.next += 1;
            t.stack.push(v);
            t.on.insert(v);
            if let Some(ws) = t.g.edges.get(v) {
                for w in ws {
                    if !t.index.contains_key(w) {
                        visit(t, w);
                        let lw = t.index[w].1;
                        t.index.get_mut(v).unwrap().1 = t.index[v].1.min(lw);
                    } else if t.on.contains(w) {
                        let iw = t.index[w].0;
                        t.index.get_mut(v).unwrap().1 = t.index[v].1.min(iw);
                    }
                }
            }
            if t.index[v].0 == t.index[v].1 {
                let mut comp = Vec::new();
                while let Some(w) = t.stack.pop() {
                    t.on.remove(w);
                    comp.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    t.out.push(comp);
                }
            }
        }
        let mut t = T {
            g: self,
            index: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in self.edges.keys() {
            if !t.index.contains_key(v) {
                visit(&mut t, v);
            }
        }
        t.out
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.file_name().is_some_and(|n| n != "tests.rs") {
            // A `tests.rs` is a module's `#[cfg(test)] mod tests;`: its test part, which may
            // reach anywhere (as the `#[cfg(test)]` tail of a file may).
            out.push(p);
        }
    }
}

/// The file without comments, string literals and its `#[cfg(test)]` tail (tests may reach
/// anywhere).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal ('"', '\n'), not a lifetime.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if b[i..].starts_with(b"r#\"") {
            i += 3;
            while i < b.len() && !b[i..].starts_with(b"\"#") {
                i += 1;
            }
            i += 2;
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    match out.find("#[cfg(test)]") {
        Some(cut) => out[..cut].to_string(),
        None => out,
    }
}

/// Every path that starts with `crate::` or `super::`, use-trees expanded.
fn paths(text: &str, parent: &Module) -> Vec<Module> {
    let tokens = tokenize(text);
    let mut out = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        let base = match tok.as_str() {
            "crate" => Vec::new(),
            "super" => parent.clone(),
            _ => continue,
        };
        // Only a path's first segment: `a::super` and `pub(super)` are not paths from here.
        if i > 0 && (tokens[i - 1] == "::" || tokens[i - 1] == "(") {
            continue;
        }
        if tokens.get(i + 1).map(String::as_str) != Some("::") {
            continue;
        }
        let mut j = i + 2;
        use_tree(&tokens, &mut j, base, &mut out);
    }
    out
}

fn use_tree(t: &[String], j: &mut usize, prefix: Module, out: &mut Vec<Module>) {
    match t.get(*j).map(String::as_str) {
        Some("{") => {
            *j += 1;
            while let Some(tok) = t.get(*j) {
                match tok.as_str() {
                    "}" => {
                        *j += 1;
                        return;
                    }
                    "," => *j += 1,
                    _ => {
                        let before = *j;
                        use_tree(t, j, prefix.clone(), out);
                        if *j == before {
                            *j += 1;
                        }
                    }
                }
            }
        }
        Some("*") => {
            *j += 1;
            out.push(prefix);
        }
        Some(seg)
            if seg
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_') =>
        {
            let mut p = prefix;
            if seg == "super" {
                p.pop();
            } else if seg != "self" {
                p.push(seg.to_string());
            }
            *j += 1;
            if t.get(*j).map(String::as_str) == Some("::") {
                *j += 1;
                use_tree(t, j, p, out);
            } else {
                out.push(p);
            }
        }
        _ => out.push(prefix),
    }
}

fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let c: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphanumeric() || c[i] == '_' {
            let s = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[s..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c[i].is_whitespace() {
                out.push(c[i].to_string());
            }
            i += 1;
        }
    }
    out
}

/// The longest prefix of `path` that is a module.
fn resolve(modules: &BTreeMap<Module, PathBuf>, path: &Module) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
}
