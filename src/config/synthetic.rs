//! Realistic synthetic configurations of any size, for benchmarks, load tests and the reload
//! measurements of BENCHMARKS.md (`cargo run --release --example gen_rules`). Built only with
//! the `synthetic` feature (tests, benches and examples enable it).
//!
//! Rule `i` of a file takes one of these shapes, in turn, so that every size has the same mix:
//! nested exact values (tenant -> method), a trailing wildcard (`/svc{i}/*`), an infix
//! wildcard (`/svc{i}/*/items`), a leading wildcard (`*.h{i}.example.com`), an exact value
//! with another algorithm and a name, and `rate_limits` with two limits. Each file is one
//! domain (`bench{f}`); every rule is reachable by [`request_entries`].

use std::fmt::Write;

/// How many rule shapes [`file`] cycles through.
pub const SHAPES: usize = 6;

/// The YAML of file `f` holding `rules` rules (each shape counts as one rule).
pub fn file(f: usize, rules: usize) -> String {
    let mut y = String::with_capacity(rules * 160);
    let _ = writeln!(y, "domain: bench{f}\ndescriptors:");
    for i in 0..rules {
        match i % SHAPES {
            0 => {
                let _ = write!(
                    y,
                    "  - key: tenant\n    value: \"t{i}\"\n    descriptors:\n      - key: method\n        value: GET\n        rate_limit: {{unit: second, requests_per_unit: {}}}\n",
                    100 + i % 50
                );
            }
            1 => {
                let _ = write!(
                    y,
                    "  - key: path\n    value: \"/svc{i}/*\"\n    rate_limit: {{unit: minute, requests_per_unit: 600}}\n"
                );
            }
            2 => {
                let _ = write!(
                    y,
                    "  - key: path\n    value: \"/svc{i}/*/items\"\n    share_threshold: true\n    rate_limit: {{unit: minute, requests_per_unit: 60}}\n"
                );
            }
            3 => {
                let _ = write!(
                    y,
                    "  - key: host\n    value: \"*.h{i}.example.com\"\n    rate_limit: {{unit: hour, requests_per_unit: 10000}}\n"
                );
            }
            4 => {
                let _ = write!(
                    y,
                    "  - key: user\n    value: \"u{i}\"\n    shadow_mode: true\n    rate_limit: {{name: user{i}, unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40}}\n"
                );
            }
            _ => {
                let _ = write!(
                    y,
                    "  - key: api_key\n    value: \"k{i}\"\n    rate_limits:\n      - {{name: per_second, unit: second, requests_per_unit: 10}}\n      - {{name: per_day, unit: day, requests_per_unit: 100000}}\n"
                );
            }
        }
    }
    y
}

/// `(name, yaml)` of `files` files holding `rules` rules in all.
pub fn files(rules: usize, files: usize) -> Vec<(String, String)> {
    let files = files.max(1);
    (0..files)
        .map(|f| {
            let n = rules / files + usize::from(f < rules % files);
            (format!("bench{f}.yaml"), file(f, n))
        })
        .collect()
}

/// The entries (key, value) of a request matching rule `i` of a file.
pub fn request_entries(i: usize) -> Vec<(String, String)> {
    let e = |k: &str, v: String| (k.to_string(), v);
    match i % SHAPES {
        0 => vec![e("tenant", format!("t{i}")), e("method", "GET".into())],
        1 => vec![e("path", format!("/svc{i}/orders/42"))],
        2 => vec![e("path", format!("/svc{i}/cart-7/items"))],
        3 => vec![e("host", format!("www.h{i}.example.com"))],
        4 => vec![e("user", format!("u{i}"))],
        _ => vec![e("api_key", format!("k{i}"))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{compile, ConfigFile, LoadOptions};

    #[test]
    fn every_generated_rule_loads_and_is_reachable() {
        let files: Vec<ConfigFile> = files(60, 2)
            .into_iter()
            .map(|(path, content)| ConfigFile {
                path: path.into(),
                content,
            })
            .collect();
        let set = compile(&files, LoadOptions::default()).expect("generated config loads");
        assert_eq!(set.all_rules().len(), 60);
        let domain = set.domain("bench1").unwrap();
        for i in 0..30 {
            let entries: Vec<crate::model::Entry> = request_entries(i)
                .into_iter()
                .map(|(k, v)| crate::model::Entry {
                    key: k.into_bytes(),
                    value: v.into_bytes(),
                })
                .collect();
            let m = domain
                .find(&entries)
                .unwrap_or_else(|| panic!("rule {i} does not match"));
            assert!(
                m.rule.full_key.contains(&format!("{i}")),
                "{i}: {}",
                m.rule.full_key
            );
        }
    }
}
