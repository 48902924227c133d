use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

const CHARGE: &str = r#"
domain: c
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: always
    rate_limit: {unit: minute, requests_per_unit: 10, charge: always}
  - key: debt
    rate_limit: {unit: minute, requests_per_unit: 1, charge: always}
  - key: admitted
    rate_limit: {unit: minute, requests_per_unit: 10, charge: if_admitted}
"#;

pub(super) fn charge() -> Vec<Case> {
    let r = |keys: &[&str]| req("c", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![
        Case {
            name: "charge: a rejected request consumes nothing but charge: always rules",
            config: Some(CHARGE),
            flags: &[],
            steps: vec![
                expect(
                    r(&["small", "big", "always"]),
                    OK,
                    vec![ok(1, Minute, 0), ok(10, Minute, 9), ok(10, Minute, 9)],
                ),
                expect(
                    r(&["big", "small", "always"]),
                    OVER,
                    vec![ok(10, Minute, 9), over(1, Minute), ok(10, Minute, 8)],
                ),
                expect(r(&["big"]), OK, vec![ok(10, Minute, 8)]),
                expect(r(&["always"]), OK, vec![ok(10, Minute, 7)]),
            ],
        },
        Case {
            name: "charge: always runs into debt that lasts until the window ends",
            config: Some(CHARGE),
            flags: &[],
            steps: vec![
                expect(r(&["debt"]), OK, vec![ok(1, Minute, 0)]),
                expect(r(&["debt"]), OVER, vec![over(1, Minute)]),
                // In debt: even a check of 0 hits is over.
                expect(
                    req("c", vec![d(&[("debt", "x")]).hits(0)]),
                    OVER,
                    vec![over(1, Minute)],
                ),
                advance(29_749_500),
                expect(r(&["debt"]), OK, vec![ok(1, Minute, 0)]),
            ],
        },
        Case {
            name: "charge: --charge-rejected makes always the default",
            config: Some(CHARGE),
            flags: &["--charge-rejected"],
            steps: vec![
                expect(
                    r(&["small", "big", "admitted"]),
                    OK,
                    vec![ok(1, Minute, 0), ok(10, Minute, 9), ok(10, Minute, 9)],
                ),
                expect(
                    r(&["small", "big", "admitted"]),
                    OVER,
                    vec![over(1, Minute), ok(10, Minute, 8), ok(10, Minute, 9)],
                ),
                expect(
                    r(&["big", "admitted"]),
                    OK,
                    vec![ok(10, Minute, 7), ok(10, Minute, 8)],
                ),
                // small was charged while over: 0 hits are over too.
                expect(
                    req("c", vec![d(&[("small", "x")]).hits(0)]),
                    OVER,
                    vec![over(1, Minute)],
                ),
            ],
        },
        Case {
            name: "charge: a request rejected by one of several descriptors charges none",
            config: Some(CHARGE),
            flags: &[],
            steps: vec![
                expect(
                    req(
                        "c",
                        vec![d(&[("big", "x")]).hits(4), d(&[("big", "y")]).hits(11)],
                    ),
                    OVER,
                    vec![ok(10, Minute, 10), over(10, Minute)],
                ),
                expect(
                    req(
                        "c",
                        vec![d(&[("big", "x")]).hits(10), d(&[("big", "y")]).hits(10)],
                    ),
                    OK,
                    vec![ok(10, Minute, 0), ok(10, Minute, 0)],
                ),
            ],
        },
    ]
}
