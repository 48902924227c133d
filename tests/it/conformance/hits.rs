use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

pub(super) const HITS: &str = r#"
domain: hits
descriptors:
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

pub(super) fn hits() -> Vec<Case> {
    let h = || d(&[("h", "x")]);
    let one = |desc: Desc| req("hits", vec![desc]);
    vec![Case {
        name: "hits_addend: per descriptor wins, 0 checks only, request level is max(1, n)",
        config: Some(HITS),
        flags: &[],
        steps: vec![
            // Request-level 0 counts as 1.
            expect(one(h()).addend(0), OK, vec![ok(10, Minute, 9)]),
            expect(one(h()).addend(3), OK, vec![ok(10, Minute, 6)]),
            // The descriptor's own value wins over the request's.
            expect(one(h().hits(2)).addend(5), OK, vec![ok(10, Minute, 4)]),
            // 0: check only, nothing consumed.
            expect(one(h().hits(0)).addend(5), OK, vec![ok(10, Minute, 4)]),
            // More than is left: over, nothing consumed.
            expect(one(h().hits(5)), OVER, vec![over(10, Minute)]),
            expect(one(h().hits(4)), OK, vec![ok(10, Minute, 0)]),
            expect(one(h().hits(0)), OK, vec![ok(10, Minute, 0)]),
            expect(one(h()), OVER, vec![over(10, Minute)]),
            // Per-descriptor and request-level values in one request.
            expect(
                req("hits", vec![d(&[("g", "x")]).hits(7), d(&[("g", "y")])]).addend(2),
                OK,
                vec![ok(10, Minute, 3), ok(10, Minute, 8)],
            ),
            // The same descriptor twice in one request counts twice.
            expect(
                req("hits", vec![d(&[("g", "y")]), d(&[("g", "y")])]),
                OK,
                vec![ok(10, Minute, 7), ok(10, Minute, 6)],
            ),
        ],
    }]
}
