use super::hits::HITS;
use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::Ok as OK;
use support::*;
use tonic::Code as G;

pub(super) fn request_errors() -> Vec<Case> {
    let cfg = Some(HITS);
    let ia = G::InvalidArgument;
    vec![
        Case {
            name: "errors: invalid requests",
            config: cfg,
            flags: &[],
            steps: vec![
                fail(
                    req("", vec![d(&[("h", "x")])]),
                    ia,
                    "rate limit domain must not be empty",
                ),
                fail(
                    req("hits", vec![]),
                    ia,
                    "rate limit descriptor list must not be empty",
                ),
                fail(
                    req("hits", vec![d(&[("h", "x")]), d(&[])]),
                    ia,
                    "descriptor 1 has no entries",
                ),
                fail(
                    req("hits", vec![d(&[("h", "x"), ("", "v")])]),
                    ia,
                    "descriptor 0 entry 1 has an empty key",
                ),
                // None of them consumed anything.
                expect(
                    req("hits", vec![d(&[("h", "x")])]),
                    OK,
                    vec![ok(10, Minute, 9)],
                ),
            ],
        },
        Case {
            name: "errors: no configuration loaded",
            config: None,
            flags: &[],
            steps: vec![
                fail(
                    req("hits", vec![d(&[("h", "x")])]),
                    G::Unavailable,
                    "no rate limit configuration loaded",
                ),
                // Request validation still comes first.
                fail(
                    req("", vec![d(&[("h", "x")])]),
                    ia,
                    "rate limit domain must not be empty",
                ),
            ],
        },
    ]
}
