use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

const QUOTA: &str = r#"
domain: quota
descriptors:
  - key: q0
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: q0b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: r0
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: r
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

pub(super) fn quota() -> Vec<Case> {
    let r = |keys: &[&str]| req("quota", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![
        Case {
            name: "quota: regular OVER + quota OK -> OVER",
            config: Some(QUOTA),
            flags: &[],
            steps: vec![expect(
                r(&["r0", "q"]),
                OVER,
                vec![over(0, Minute), ok(100, Minute, 100)],
            )],
        },
        Case {
            name: "quota: regular OK + the only quota descriptor OVER -> OVER",
            config: Some(QUOTA),
            flags: &[],
            steps: vec![expect(
                r(&["r", "q0"]),
                OVER,
                vec![ok(100, Minute, 100), over(0, Minute)],
            )],
        },
        Case {
            name: "quota: quota OVER + quota OK -> OK, the over one uncharged",
            config: Some(QUOTA),
            flags: &[],
            steps: vec![
                expect(
                    r(&["q0", "q"]),
                    OK,
                    vec![over(0, Minute), ok(100, Minute, 99)],
                ),
                // q2 asks for 3 of 2: over, and not charged (1 still fits afterwards).
                expect(
                    req("quota", vec![d(&[("q2", "x")]).hits(3), d(&[("q", "x")])]),
                    OK,
                    vec![over(2, Minute), ok(100, Minute, 98)],
                ),
                expect(r(&["q2"]), OK, vec![ok(2, Minute, 1)]),
            ],
        },
        Case {
            name: "quota: quota OVER + quota OVER -> OVER",
            config: Some(QUOTA),
            flags: &[],
            steps: vec![expect(
                r(&["q0", "q0b"]),
                OVER,
                vec![over(0, Minute), over(0, Minute)],
            )],
        },
        Case {
            name: "quota: global --quota-mode",
            config: Some(QUOTA),
            flags: &["--quota-mode"],
            steps: vec![
                expect(
                    r(&["r0", "q0"]),
                    OVER,
                    vec![over(0, Minute), over(0, Minute)],
                ),
                // Every descriptor is in quota mode now: one within its limit admits.
                expect(
                    r(&["r0", "r"]),
                    OK,
                    vec![over(0, Minute), ok(100, Minute, 99)],
                ),
                // Descriptors without a limit take no part in quota mode.
                expect(
                    req("quota", vec![d(&[("r0", "x")]), d(&[("nolimit", "x")])]),
                    OVER,
                    vec![over(0, Minute), none()],
                ),
            ],
        },
    ]
}
