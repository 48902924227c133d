use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::{Hour, Minute, Second};
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;
use tonic::Code as G;

const OVERRIDES: &str = r#"
domain: o
descriptors:
  - key: o
    rate_limit: {unit: minute, requests_per_unit: 10, name: cfg}
  - key: u
    rate_limit: {unlimited: true}
"#;

pub(super) fn overrides() -> Vec<Case> {
    vec![Case {
        name: "overrides: the request's limit replaces the configured one",
        config: Some(OVERRIDES),
        flags: &[],
        steps: vec![
            expect(
                req("o", vec![d(&[("o", "a")]).limit(2, Second)]),
                OK,
                vec![ok(2, Second, 1)],
            ),
            expect(
                req("o", vec![d(&[("o", "a")]).limit(2, Second)]),
                OK,
                vec![ok(2, Second, 0)],
            ),
            expect(
                req("o", vec![d(&[("o", "a")]).limit(2, Second)]),
                OVER,
                vec![over(2, Second)],
            ),
            // The configured limit (other window) is untouched.
            expect(
                req("o", vec![d(&[("o", "a")])]),
                OK,
                vec![ok(10, Minute, 9).named("cfg")],
            ),
            // An override applies even where no rule matches, and over an unlimited rule.
            expect(
                req("o", vec![d(&[("nothing", "a")]).limit(3, Hour)]),
                OK,
                vec![ok(3, Hour, 2)],
            ),
            expect(
                req("o", vec![d(&[("u", "a")]).limit(1, Hour)]),
                OK,
                vec![ok(1, Hour, 0)],
            ),
            // Not for an unknown domain (the domain check comes first, as upstream).
            expect(
                req("other", vec![d(&[("o", "a")]).limit(1, Hour)]),
                OK,
                vec![none()],
            ),
            fail(
                req("o", vec![d(&[("o", "a")]).limit_raw(5, 0)]),
                G::InvalidArgument,
                "descriptor 0: limit override has an unknown unit (0)",
            ),
            fail(
                req(
                    "o",
                    vec![d(&[("o", "a")]), d(&[("o", "b")]).limit_raw(5, 99)],
                ),
                G::InvalidArgument,
                "descriptor 1: limit override has an unknown unit (99)",
            ),
        ],
    }]
}
