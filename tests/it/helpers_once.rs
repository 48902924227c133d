//! Each thing a test builds is built in one place, `support/` (ARCHITECTURE.md, `tests/it/`):
//! outside it, no module writes a server argv, a request builder, an Envoy bootstrap skeleton or
//! a TLS client by hand. A copy drifts (a flag added to one argv and not the others), so this
//! names the helper to use instead.

use std::path::{Path, PathBuf};

/// `(what a hand-made copy contains, the helper to use)`.
const ONCE: &[(&str, &str)] = &[
    (
        "\"--grpc-addr\"",
        "support::serve_argv / parse_serve / serve_args, or process::spawn_serve",
    ),
    (
        "fn request(",
        "support::dsl (req, req_k, raw_request, d, d_raw)",
    ),
    (
        "\"static_resources\": {",
        "support::envoy::front_listener (or bootstrap / bootstrap_rls / bootstrap_rlqs)",
    ),
    ("ClientTlsConfig::new", "support::certs::tls_channel"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read tests/it") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn each_helper_exists_once_in_support() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let own = root.join("helpers_once.rs");
    let mut copies = Vec::new();
    for file in files {
        if file.starts_with(root.join("support")) || file == own {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in text.lines().enumerate() {
            for (pattern, helper) in ONCE {
                if line.contains(pattern) {
                    let at = file.strip_prefix(&root).unwrap().display();
                    copies.push(format!("{at}:{}: `{pattern}`: use {helper}", n + 1));
                }
            }
        }
    }
    assert!(copies.is_empty(), "{}", copies.join("\n"));
    // The patterns are live: support/ holds each once (`fn request(` is support/http.rs's).
    let mut support = Vec::new();
    rust_files(&root.join("support"), &mut support);
    let text: String = support
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect();
    for (pattern, _) in ONCE {
        assert_eq!(text.matches(pattern).count(), 1, "support/ and `{pattern}`");
    }
}
