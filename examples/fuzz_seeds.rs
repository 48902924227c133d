//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/<target>/` (committed;
//! `cargo test --test it fuzz_replay` replays them). Run from the repository root:
//!
//! ```sh
//! cargo run --example fuzz_seeds
//! ```
//!
//! Seeds are meaningful inputs the fuzzers mutate from: the sample configs and the config
//! error fixtures, requests with odd bytes and every request field, and limits of every
//! algorithm with a few timelines. Files the fuzzers add later sit beside them.

use std::path::Path;

use prost::Message;
use sluice::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).expect("create corpus dir");
    std::fs::write(dir.join(name), bytes).expect("write seed");
}

fn config_seeds() {
    for dir in ["config", "tests/fixtures/config_errors"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "yaml") {
                let name = format!(
                    "{}-{}",
                    dir.replace('/', "_"),
                    path.file_name().unwrap().to_string_lossy()
                );
                write("config", &name, &std::fs::read(&path).unwrap());
            }
        }
    }
    let hand: &[(&str, &str)] = &[
        ("empty", ""),
        ("domain-only", "domain: d\n"),
        ("nested-deep", &nested(40)),
        (
            "aliases",
            "domain: d\nx: &a [1, 2]\ndescriptors:\n  - key: k\n    metadata: {a: *a, b: *a}\n",
        ),
        (
            "odd-values",
            "domain: \"\\u0000\\xff\"\ndescriptors:\n  - key: \"{}:*_|%\"\n    value: \"*\\t*\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        ),
        (
            "every-algorithm",
            "domain: a\ndescriptors:\n  - key: a\n    rate_limits:\n      - {name: a, window: 500ms, requests_per_unit: 3, algorithm: sliding_window, precision: 5}\n      - {name: b, unit: hour, requests_per_unit: 4294967295, algorithm: gcra, burst: 7}\n      - {name: c, unit: day, requests_per_unit: 10, algorithm: distinct, align: calendar, timezone: Asia/Kolkata}\n",
        ),
        (
            "overrides-and-refunds",
            "domain: t\nallow_overrides: false\nallow_refunds: true\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, charge: always}\n",
        ),
        (
            "replaces",
            "domain: r\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, name: x, replaces: [{name: y}, {name: x}]}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1, name: y}\n",
        ),
        ("tabs-and-bom", "\u{feff}domain:\td\n\tdescriptors: []\n"),
        ("huge-number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 99999999999999999999999}\n"),
    ];
    for (name, text) in hand {
        write("config", name, text.as_bytes());
    }
}

fn nested(depth: usize) -> String {
    let mut s = String::from("domain: d\ndescriptors:\n");
    for i in 0..depth {
        let pad = "  ".repeat(2 * i);
        s.push_str(&format!("{pad}  - key: k{i}\n{pad}    descriptors:\n"));
    }
    s
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

fn desc(entries: &[(&[u8], &[u8])]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_vec(),
                value: v.to_vec(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request_seeds() {
    let mut seeds: Vec<(&str, RateLimitRequest)> = vec![
        ("k", req("f", vec![desc(&[(b"k", b"v")])])),
        (
            "k-twice",
            req("f", vec![desc(&[(b"k", b"v")]), desc(&[(b"k", b"v")])]),
        ),
        (
            "path-shared",
            req("f", vec![desc(&[(b"path", b"/api/users")])]),
        ),
        ("path-colon", req("f", vec![desc(&[(b"path", b"a:b")])])),
        (
            "user-ip",
            req(
                "f",
                vec![desc(&[(b"user", b"alice"), (b"ip", b"10.0.0.1")])],
            ),
        ),
        ("user-only", req("f", vec![desc(&[(b"user", b"bob")])])),
        (
            "log-quota",
            req("f", vec![desc(&[(b"log", b"x")]), desc(&[(b"k", b"x")])]),
        ),
        (
            "leak-vip",
            req("f", vec![desc(&[(b"leak", b"x")]), desc(&[(b"vip", b"y")])]),
        ),
        ("blocked", req("f", vec![desc(&[(b"blocked", b"x")])])),
        ("unknown-domain", req("nope", vec![desc(&[(b"k", b"v")])])),
        ("empty-domain", req("", vec![desc(&[(b"k", b"v")])])),
        ("no-descriptors", req("f", vec![])),
        ("empty-descriptor", req("f", vec![desc(&[])])),
        ("empty-key", req("f", vec![desc(&[(b"", b"v")])])),
        ("not-utf8", req("f", vec![desc(&[(b"k", b"\xff\xfe\x00")])])),
        ("control", req("f", vec![desc(&[(b"k", b"\r\n\x1b[0m")])])),
        (
            "separators",
            req("f", vec![desc(&[(b"k", b"{a}|b=c:%_*")])]),
        ),
        (
            "injection-pair",
            req(
                "f",
                vec![
                    desc(&[(b"user", b"a|ip=b")]),
                    desc(&[(b"user", b"a"), (b"ip", b"b")]),
                ],
            ),
        ),
        ("long-value", req("f", vec![desc(&[(b"k", &[b'x'; 4096])])])),
    ];
    let mut with_override = req("f", vec![desc(&[(b"k", b"v")])]);
    with_override.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 7,
        unit: 2,
    });
    seeds.push(("override", with_override.clone()));
    with_override.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 99,
    });
    seeds.push(("override-bad-unit", with_override));
    let mut sliding_override = req("f", vec![desc(&[(b"path", b"x:y")])]);
    sliding_override.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 1,
    });
    seeds.push(("override-sliding", sliding_override));
    let mut refund = req("f", vec![desc(&[(b"k", b"v")])]);
    refund.descriptors[0].is_negative_hits = true;
    refund.descriptors[0].hits_addend = Some(3);
    seeds.push(("refund", refund));
    let mut hits = req("f", vec![desc(&[(b"k", b"v")]), desc(&[(b"user", b"u")])]);
    hits.hits_addend = 5;
    hits.descriptors[1].hits_addend = Some(0);
    seeds.push(("hits-addend", hits));
    let mut huge = req("f", vec![desc(&[(b"k", b"v")])]);
    huge.descriptors[0].hits_addend = Some(u64::MAX);
    seeds.push(("hits-too-many", huge));
    seeds.push((
        "many-descriptors",
        req("f", (0..64).map(|_| desc(&[(b"k", b"v")])).collect()),
    ));
    for (name, r) in seeds {
        write("request", name, &r.encode_to_vec());
    }
    write("request", "garbage-varint", &[0x12, 0xff, 0xff, 0xff, 0xff]);
    write("request", "domain-not-utf8", &[0x0a, 0x02, 0xff, 0xfe]);
}

/// `alg requests window_ms burst precision` then `(step_ms hits flags)*`, as
/// `sluice::fuzzing::decide` reads them.
fn decide_seed(
    alg: u8,
    requests: u32,
    window_ms: u32,
    burst: u32,
    precision: u8,
    steps: &[(u32, u8, u8)],
) -> Vec<u8> {
    let mut out = vec![alg];
    out.extend_from_slice(&requests.to_le_bytes());
    out.extend_from_slice(&window_ms.to_le_bytes());
    out.extend_from_slice(&burst.to_le_bytes());
    out.push(precision);
    for (step, hits, flags) in steps {
        out.extend_from_slice(&step.to_le_bytes());
        out.push(*hits);
        out.push(*flags);
    }
    out
}

fn decide_seeds() {
    let names = [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "leaky_bucket",
        "gcra",
        "distinct",
    ];
    let burst: Vec<(u32, u8, u8)> = (0..8).map(|_| (0, 1, 0)).collect();
    let spread: Vec<(u32, u8, u8)> = (0..12).map(|i| (250 * (i % 3), 1, 0)).collect();
    let refunds: Vec<(u32, u8, u8)> =
        vec![(0, 3, 0), (10, 2, 1), (10, 4, 2), (5_000, 1, 0), (0, 0, 0)];
    let distinct_values: Vec<(u32, u8, u8)> = (0..10).map(|i| (100, 1, (i as u8) << 2)).collect();
    let expiry: Vec<(u32, u8, u8)> =
        vec![(0, 5, 2), (1_000, 1, 0), (60_000, 1, 0), (3_600_000, 1, 0)];
    for (alg, name) in names.iter().enumerate() {
        let alg = alg as u8;
        write(
            "decide",
            &format!("{name}-burst"),
            &decide_seed(alg, 3, 1_000, 0, 0, &burst),
        );
        write(
            "decide",
            &format!("{name}-spread"),
            &decide_seed(alg, 5, 1_000, 2, 4, &spread),
        );
        write(
            "decide",
            &format!("{name}-refunds"),
            &decide_seed(alg, 4, 60_000, 6, 10, &refunds),
        );
        write(
            "decide",
            &format!("{name}-values"),
            &decide_seed(alg, 3, 3_600_000, 0, 0, &distinct_values),
        );
        write(
            "decide",
            &format!("{name}-expiry"),
            &decide_seed(alg, 2, 1_000, 0, 0, &expiry),
        );
        write(
            "decide",
            &format!("{name}-zero"),
            &decide_seed(alg, 0, 1_000, 0, 0, &burst),
        );
        write(
            "decide",
            &format!("{name}-max"),
            &decide_seed(alg, u32::MAX, u32::MAX, u32::MAX, 100, &refunds),
        );
    }
}

fn main() {
    config_seeds();
    request_seeds();
    decide_seeds();
    for t in ["config", "request", "decide"] {
        let n = std::fs::read_dir(Path::new("fuzz/corpus").join(t))
            .map(|d| d.count())
            .unwrap_or(0);
        println!("fuzz/corpus/{t}: {n} files");
    }
}
