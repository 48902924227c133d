//! Descriptor matching against 10 to 100,000 rules (exact values, trailing-`*` and infix
//! wildcards, and the file-order scan the wildcard index replaced), and whole decisions in
//! process (limiter + memory store, no gRPC) with 1 and 5 descriptors; the hostile case of
//! issue 14 (10,000 rules `*mNNNNN*`, a request of three 64 KiB values) and what the wildcard
//! automaton adds to loading those rules. Prints figures; asserts nothing about time.
//!
//! ```sh
//! cargo bench --bench matching            # everything (a few minutes)
//! cargo bench --bench matching -- match/  # one group
//! ```

use std::fmt::Write;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice::clock::SystemClock;
use sluice::config::{compile, synthetic, ConfigFile, LoadOptions};
use sluice::limiter::{Limiter, LimiterOptions};
use sluice::model::{Descriptor, Entry, Request};
use sluice::rules::RuleSet;
use sluice::store::memory::MemoryStore;
use sluice::store::Deadline;

const SIZES: [usize; 4] = [10, 1_000, 10_000, 100_000];

#[derive(Clone, Copy, Debug)]
enum Shape {
    Exact,
    Trailing,
    Infix,
}

impl Shape {
    fn pattern(self, i: usize) -> String {
        match self {
            Shape::Exact => format!("v{i}"),
            Shape::Trailing => format!("/svc{i}/*"),
            Shape::Infix => format!("/svc{i}/*/items"),
        }
    }

    fn value(self, i: usize) -> String {
        match self {
            Shape::Exact => format!("v{i}"),
            Shape::Trailing => format!("/svc{i}/orders/42"),
            Shape::Infix => format!("/svc{i}/cart-7/items"),
        }
    }
}

fn load(files: Vec<(String, String)>) -> RuleSet {
    let files: Vec<ConfigFile> = files
        .into_iter()
        .map(|(path, content)| ConfigFile {
            path: path.into(),
            content,
        })
        .collect();
    compile(&files, LoadOptions::default()).expect("the generated config loads")
}

/// `n` rules of one shape under one key `k` of domain `d`.
fn rules(shape: Shape, n: usize) -> RuleSet {
    let mut y = String::from("domain: d\ndescriptors:\n");
    for i in 0..n {
        let _ = write!(
            y,
            "  - key: k\n    value: \"{}\"\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n",
            shape.pattern(i)
        );
    }
    load(vec![("d.yaml".into(), y)])
}

fn entry(k: &str, v: &str) -> Entry {
    Entry {
        key: k.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
    }
}

fn matching(c: &mut Criterion) {
    let mut g = c.benchmark_group("match");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for shape in [Shape::Exact, Shape::Trailing, Shape::Infix] {
        for n in SIZES {
            let set = rules(shape, n);
            let domain = set.domain("d").unwrap();
            // The last rule in file order: the worst case of a scan.
            let entries = [entry("k", &shape.value(n - 1))];
            assert!(domain.find(&entries).is_some());
            g.bench_with_input(BenchmarkId::new(format!("{shape:?}"), n), &n, |b, _| {
                b.iter(|| black_box(domain.find(black_box(&entries))).is_some())
            });
            if !matches!(shape, Shape::Exact) && n <= 10_000 {
                let branch = &domain.root.children[&b"k"[..]];
                let value = entries[0].value.clone();
                g.bench_with_input(
                    BenchmarkId::new(format!("{shape:?}-file-order-scan"), n),
                    &n,
                    |b, _| b.iter(|| black_box(branch.wildcards.scan(black_box(&value))).is_some()),
                );
            }
        }
    }
    g.finish();
}

/// One request of `descriptors` descriptors, each matching a rule of the synthetic config.
fn request(descriptors: usize, rules: usize, salt: usize) -> Request {
    let per_file = rules / 4;
    Request {
        domain: "bench0".into(),
        descriptors: (0..descriptors)
            .map(|d| {
                let i = (salt * 7 + d * 13) % per_file;
                Descriptor {
                    entries: synthetic::request_entries(i)
                        .iter()
                        .map(|(k, v)| entry(k, v))
                        .collect(),
                    limit_override: None,
                    hits: 1,
                    refund: false,
                }
            })
            .collect(),
    }
}

fn decisions(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for n in [10, 10_000] {
        let limiter = Limiter::new(
            MemoryStore::new(1_000_000),
            Arc::new(SystemClock),
            LimiterOptions::default(),
        );
        limiter.set_rules(Arc::new(load(synthetic::files(n.max(40), 4))));
        for descriptors in [1, 5] {
            let requests: Vec<Request> = (0..64)
                .map(|s| request(descriptors, n.max(40), s))
                .collect();
            let mut next = 0;
            g.bench_function(format!("rules={n}/descriptors={descriptors}"), |b| {
                b.iter(|| {
                    next = (next + 1) % requests.len();
                    futures::executor::block_on(
                        limiter.should_rate_limit(&requests[next], Deadline::NONE),
                    )
                    .expect("decided")
                })
            });
        }
    }
    // What the response headers add to a decision of 5 descriptors: none, the draft-03 three
    // (one pick), the draft-10 fields (a SHA-256 and two items per limit).
    let rules = Arc::new(load(synthetic::files(40, 4)));
    let requests: Vec<Request> = (0..64).map(|s| request(5, 40, s)).collect();
    for (format, legacy, ietf) in [
        ("none", false, false),
        ("legacy", true, false),
        ("ietf", false, true),
    ] {
        let limiter = Limiter::new(
            MemoryStore::new(1_000_000),
            Arc::new(SystemClock),
            LimiterOptions {
                response_headers: legacy.then(Default::default),
                ietf_headers: ietf,
                ..LimiterOptions::default()
            },
        );
        limiter.set_rules(rules.clone());
        let mut next = 0;
        g.bench_function(format!("headers={format}/descriptors=5"), |b| {
            b.iter(|| {
                next = (next + 1) % requests.len();
                futures::executor::block_on(
                    limiter.should_rate_limit(&requests[next], Deadline::NONE),
                )
                .expect("decided")
            })
        });
    }
    g.finish();
}

/// 10,000 infix rules `*m0NNNN*` under key `k`, as YAML.
fn infix_yaml(n: usize) -> String {
    let mut y = String::from("domain: d\ndescriptors:\n");
    for i in 0..n {
        let _ = write!(
            y,
            "  - key: k\n    value: \"*m{i:05}*\"\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n"
        );
    }
    y
}

/// A 64 KiB value of near misses (`m0NNNx`: five bytes into a piece, then no match), ending
/// with `tail`.
fn near_misses(tail: &str) -> String {
    let mut v = String::with_capacity(64 * 1024);
    let mut i = 0;
    while v.len() + 6 + tail.len() <= 64 * 1024 {
        let _ = write!(v, "m0{:03}x", i % 1000);
        i += 1;
    }
    v.push_str(tail);
    v
}

fn hostile(c: &mut Criterion) {
    let mut g = c.benchmark_group("hostile");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let n = 10_000;
    let set = load(vec![("d.yaml".into(), infix_yaml(n))]);
    let domain = set.domain("d").unwrap();
    // Three values: two match nothing, the third only the last rule in file order.
    let values = [near_misses(""), near_misses(""), near_misses("m09999")];
    let descriptors: Vec<[Entry; 1]> = values.iter().map(|v| [entry("k", v)]).collect();
    assert!(domain.find(&descriptors[0]).is_none());
    assert!(domain.find(&descriptors[2]).is_some());
    g.bench_function("infix10k/3x64KiB", |b| {
        b.iter(|| {
            descriptors
                .iter()
                .filter(|d| black_box(domain.find(black_box(&d[..]))).is_some())
                .count()
        })
    });
    // Loading: the same number of rules, infix (automaton built) against trailing-`*`
    // wildcards (no automaton) and exact values.
    let infix = infix_yaml(n);
    let affix = infix.replace("\"*m", "\"m");
    let exact = affix.replace("*\"", "\"");
    for (name, yaml) in [
        ("infix10k", infix),
        ("affix10k", affix),
        ("exact10k", exact),
    ] {
        g.bench_function(format!("load/{name}"), |b| {
            b.iter(|| {
                black_box(load(vec![("d.yaml".into(), yaml.clone())]))
                    .domains
                    .len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, matching, decisions, hostile);
criterion_main!(benches);
