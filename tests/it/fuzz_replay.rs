//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`: the seeds of
//! `examples/fuzz_seeds.rs` and whatever the fuzzers kept) through the target functions,
//! with plain `cargo test`: no fuzzer build needed. A panic or failed invariant in any input
//! fails the test and names the file.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "{}: only {} inputs; regenerate with `cargo run --example fuzz_seeds`",
        dir.display(),
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        let data = std::fs::read(f).expect("read corpus file");
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            failures.push(f.display().to_string());
        }
    }
    assert!(failures.is_empty(), "inputs that fail: {failures:#?}");
}

#[test]
fn config_corpus() {
    replay("config", sluice::fuzzing::config);
}

#[test]
fn request_corpus() {
    replay("request", sluice::fuzzing::request);
}

#[test]
fn decide_corpus() {
    replay("decide", sluice::fuzzing::decide);
}

/// The corpora are read the same way the fuzzers read them: a truncated input (as libFuzzer
/// produces by the million) is just another input.
#[test]
fn truncations_of_every_seed_are_harmless() {
    for (target, run) in [
        ("config", sluice::fuzzing::config as fn(&[u8])),
        ("request", sluice::fuzzing::request),
        ("decide", sluice::fuzzing::decide),
    ] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        for e in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            for cut in [1, 2, 3, 5, 8, 13, 21] {
                if data.len() > cut {
                    run(&data[..data.len() - cut]);
                }
            }
        }
    }
}
