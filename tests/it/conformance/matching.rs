use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::{Hour, Minute, Second};
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

const MATCHING: &str = r#"
domain: match
descriptors:
  - key: k
    value: exact
    rate_limit: {unit: minute, requests_per_unit: 1, name: exact}
  - key: k
    value: "ex*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: prefix}
  - key: k
    value: "*ct"
    rate_limit: {unit: minute, requests_per_unit: 3, name: suffix}
  - key: k
    value: "a*b*c"
    rate_limit: {unit: minute, requests_per_unit: 4, name: multi}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, name: default}
  - key: path
    value: "/api/*/users"
    rate_limit: {unit: hour, requests_per_unit: 6, name: mid}
  - key: nested
    value: a
    descriptors:
      - key: inner
        rate_limit: {unit: second, requests_per_unit: 7, name: inner}
  - key: files
    value: "f/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3, name: shared}
  - key: white
    rate_limit: {unlimited: true}
  - key: black
    rate_limit: {unit: minute, requests_per_unit: 0, name: black}
"#;

pub(super) fn matching() -> Vec<Case> {
    let m = |entries: &[(&str, &str)]| req("match", vec![d(entries)]);
    vec![
        Case {
            name: "matching: exact beats wildcard and default",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![expect(
                m(&[("k", "exact")]),
                OK,
                vec![ok(1, Minute, 0).named("exact")],
            )],
        },
        Case {
            name: "matching: trailing wildcard",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![expect(
                m(&[("k", "example")]),
                OK,
                vec![ok(2, Minute, 1).named("prefix")],
            )],
        },
        Case {
            name: "matching: leading wildcard",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![expect(
                m(&[("k", "direct")]),
                OK,
                vec![ok(3, Minute, 2).named("suffix")],
            )],
        },
        Case {
            name: "matching: overlapping wildcards resolve in file order",
            config: Some(MATCHING),
            flags: &[],
            // "exct" matches both "ex*" and "*ct": the first declared wins.
            steps: vec![expect(
                m(&[("k", "exct")]),
                OK,
                vec![ok(2, Minute, 1).named("prefix")],
            )],
        },
        Case {
            name: "matching: several stars, anchored at both ends",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(
                    m(&[("k", "aXbYc")]),
                    OK,
                    vec![ok(4, Minute, 3).named("multi")],
                ),
                expect(
                    m(&[("k", "aXbYc")]),
                    OK,
                    vec![ok(4, Minute, 2).named("multi")],
                ),
                // Without share_threshold every value has its own counter.
                expect(
                    m(&[("k", "abc")]),
                    OK,
                    vec![ok(4, Minute, 3).named("multi")],
                ),
                // Not anchored at the end: falls back to the default.
                expect(
                    m(&[("k", "abcd")]),
                    OK,
                    vec![ok(5, Minute, 4).named("default")],
                ),
                // A default match counts per value too (the key holds the request's value).
                expect(
                    m(&[("k", "acb")]),
                    OK,
                    vec![ok(5, Minute, 4).named("default")],
                ),
            ],
        },
        Case {
            name: "matching: mid-string wildcard",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(
                    m(&[("path", "/api/v1/users")]),
                    OK,
                    vec![ok(6, Hour, 5).named("mid")],
                ),
                // The star may match nothing.
                expect(
                    m(&[("path", "/api//users")]),
                    OK,
                    vec![ok(6, Hour, 5).named("mid")],
                ),
                // No default for `path`: no limit.
                expect(m(&[("path", "/api/v1/users/1")]), OK, vec![none()]),
                expect(m(&[("path", "/apx/v1/users")]), OK, vec![none()]),
            ],
        },
        Case {
            name: "matching: share_threshold gives every matching value one counter",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(
                    m(&[("files", "f/a")]),
                    OK,
                    vec![ok(3, Minute, 2).named("shared")],
                ),
                expect(
                    m(&[("files", "f/b")]),
                    OK,
                    vec![ok(3, Minute, 1).named("shared")],
                ),
                expect(
                    m(&[("files", "f/")]),
                    OK,
                    vec![ok(3, Minute, 0).named("shared")],
                ),
                expect(
                    m(&[("files", "f/c")]),
                    OVER,
                    vec![over(3, Minute).named("shared")],
                ),
                expect(m(&[("files", "g/a")]), OK, vec![none()]),
            ],
        },
        Case {
            name: "matching: key-only default, including an empty value",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(
                    m(&[("k", "zzz")]),
                    OK,
                    vec![ok(5, Minute, 4).named("default")],
                ),
                expect(
                    m(&[("k", "zzz")]),
                    OK,
                    vec![ok(5, Minute, 3).named("default")],
                ),
                expect(m(&[("k", "")]), OK, vec![ok(5, Minute, 4).named("default")]),
            ],
        },
        Case {
            name: "matching: nested descriptors and depth mismatch both ways",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(
                    m(&[("nested", "a"), ("inner", "x")]),
                    OK,
                    vec![ok(7, Second, 6).named("inner")],
                ),
                // Shallower than the config: the matched node has no limit.
                expect(m(&[("nested", "a")]), OK, vec![none()]),
                // Deeper than the config.
                expect(
                    m(&[("nested", "a"), ("inner", "x"), ("extra", "y")]),
                    OK,
                    vec![none()],
                ),
                expect(m(&[("k", "exact"), ("extra", "y")]), OK, vec![none()]),
                // Unmatched first level.
                expect(m(&[("nested", "b"), ("inner", "x")]), OK, vec![none()]),
                expect(m(&[("unknown", "x")]), OK, vec![none()]),
            ],
        },
        Case {
            name: "matching: whitelist (unlimited) and blacklist (limit 0)",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![
                expect(m(&[("white", "1.2.3.4")]), OK, vec![unlimited()]),
                expect(
                    m(&[("black", "x")]),
                    OVER,
                    vec![over(0, Minute).named("black")],
                ),
                expect(
                    req("match", vec![d(&[("white", "x")]), d(&[("black", "x")])]),
                    OVER,
                    vec![unlimited(), over(0, Minute).named("black")],
                ),
                // Unlimited never counts, however much is asked.
                expect(
                    req("match", vec![d(&[("white", "x")]).hits(1_000_000)]),
                    OK,
                    vec![unlimited()],
                ),
            ],
        },
        Case {
            name: "matching: unknown domain answers OK without limits",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![expect(
                req("nope", vec![d(&[("k", "exact")]), d(&[("black", "x")])]),
                OK,
                vec![none(), none()],
            )],
        },
        Case {
            name: "matching: statuses come back in request order",
            config: Some(MATCHING),
            flags: &[],
            steps: vec![expect(
                req(
                    "match",
                    vec![
                        d(&[("unknown", "x")]),
                        d(&[("k", "exact")]),
                        d(&[("white", "x")]),
                        d(&[("k", "direct")]),
                    ],
                ),
                OK,
                vec![
                    none(),
                    ok(1, Minute, 0).named("exact"),
                    unlimited(),
                    ok(3, Minute, 2).named("suffix"),
                ],
            )],
        },
    ]
}
