//! Conformance of `ShouldRateLimit` over real gRPC: one table of cases, each a config, server
//! flags and a list of request/expected-answer steps, run by `support::check` on a fresh
//! server. The store is a parameter so the Redis store can run the same tables.
//!
//! Every expected `duration_until_reset` is checked too: by default it is the rest of the
//! epoch-aligned window at the test clock, rounded up to the millisecond (see `support::T0`).
//!
//! The same table runs on the in-memory store, on a standalone Redis and on a 6-node Redis
//! Cluster, each started once for its test on loopback ports.

use crate::support;
use crate::support::redis as redis_support;

use serde_json::json;
use sluice::proto::rate_limit_response::rate_limit::Unit::{self, Hour, Minute, Second};
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;
use tonic::Code as G;

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

fn matching() -> Vec<Case> {
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

const WINDOWS: &str = r#"
domain: w
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 1}
"#;

fn windows() -> Vec<Case> {
    let w = |k: &str| req("w", vec![d(&[(k, "x")])]);
    // T0 is 30.2505 s into a minute: 29.7495 s are left, reported as 29 750 ms.
    let to_minute_end = 29_749_500;
    vec![
        Case {
            name: "windows: exhaustion, then reset at the epoch-aligned boundary",
            config: Some(WINDOWS),
            flags: &[],
            steps: vec![
                expect(w("m"), OK, vec![ok(2, Minute, 1).reset_ms(29_750)]),
                expect(w("m"), OK, vec![ok(2, Minute, 0).reset_ms(29_750)]),
                expect(w("m"), OVER, vec![over(2, Minute).reset_ms(29_750)]),
                // One microsecond before the boundary: still over, 1 ms left (rounded up).
                advance(to_minute_end - 1),
                expect(w("m"), OVER, vec![over(2, Minute).reset_ms(1)]),
                // At the boundary: a fresh window of exactly one minute.
                advance(1),
                expect(w("m"), OK, vec![ok(2, Minute, 1).reset_ms(60_000)]),
                advance(59 * SEC + 999_999),
                expect(w("m"), OK, vec![ok(2, Minute, 0).reset_ms(1)]),
                expect(w("m"), OVER, vec![over(2, Minute).reset_ms(1)]),
            ],
        },
        Case {
            name: "windows: duration_until_reset has millisecond precision for every unit",
            config: Some(WINDOWS),
            flags: &[],
            steps: vec![
                expect(w("s"), OK, vec![ok(1, Second, 0).reset_ms(750)]),
                expect(w("h"), OK, vec![ok(1, Hour, 0).reset_ms(3_569_750)]),
                expect(w("day"), OK, vec![ok(1, Unit::Day, 0).reset_ms(86_369_750)]),
                // Weeks, months and years are fixed 7-, 30- and 365-day windows aligned to
                // the epoch, as envoyproxy/ratelimit (computed by `window_rest_ms`).
                expect(w("week"), OK, vec![ok(1, Unit::Week, 0)]),
                expect(w("month"), OK, vec![ok(1, Unit::Month, 0)]),
                expect(w("year"), OK, vec![ok(1, Unit::Year, 0)]),
                expect(w("s"), OVER, vec![over(1, Second).reset_ms(750)]),
                advance(749_500),
                expect(w("s"), OK, vec![ok(1, Second, 0).reset_ms(1_000)]),
            ],
        },
    ]
}

const REPLACES: &str = r#"
domain: repl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: premium
      replaces: [{name: per_user}]
  - key: vip
    rate_limit:
      unlimited: true
      name: vip
      replaces: [{name: per_user}]
"#;

fn replaces() -> Vec<Case> {
    let r = |keys: &[&str]| req("repl", keys.iter().map(|k| d(&[(k, "a")])).collect());
    vec![Case {
        name: "replaces: a replaced limit is neither reported nor consumed",
        config: Some(REPLACES),
        flags: &[],
        steps: vec![
            expect(r(&["user"]), OK, vec![ok(10, Minute, 9).named("per_user")]),
            expect(
                r(&["user", "premium"]),
                OK,
                vec![none(), ok(100, Minute, 99).named("premium")],
            ),
            expect(
                r(&["premium", "user"]),
                OK,
                vec![ok(100, Minute, 98).named("premium"), none()],
            ),
            // Not consumed by the two requests above.
            expect(r(&["user"]), OK, vec![ok(10, Minute, 8).named("per_user")]),
            // An unlimited rule replaces too.
            expect(r(&["user", "vip"]), OK, vec![none(), unlimited()]),
            expect(r(&["user"]), OK, vec![ok(10, Minute, 7).named("per_user")]),
        ],
    }]
}

const SHADOW: &str = r#"
domain: shadow
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadowed}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

fn shadow() -> Vec<Case> {
    let r = |keys: &[&str]| req("shadow", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![
        Case {
            name: "shadow: a shadow-mode rule reports OK while counting",
            config: Some(SHADOW),
            flags: &[],
            steps: vec![
                expect(r(&["s"]), OK, vec![ok(1, Minute, 0).named("shadowed")]),
                expect(r(&["s"]), OK, vec![shadowed(1, Minute).named("shadowed")]),
                // Counting is that of enforcement (decided before the shadow conversion): the
                // request would have been rejected, so the other descriptor is not charged
                // and shows its unchanged remaining.
                expect(
                    r(&["s", "e"]),
                    OK,
                    vec![shadowed(1, Minute).named("shadowed"), ok(5, Minute, 5)],
                ),
                expect(r(&["e"]), OK, vec![ok(5, Minute, 4)]),
                advance(30 * SEC),
                expect(
                    r(&["s", "e"]),
                    OK,
                    vec![ok(1, Minute, 0).named("shadowed"), ok(5, Minute, 4)],
                ),
            ],
        },
        Case {
            name: "shadow: global --shadow-mode turns OVER_LIMIT overall into OK only",
            config: Some(SHADOW),
            flags: &["--shadow-mode"],
            steps: vec![
                expect(r(&["a", "e"]), OK, vec![ok(1, Minute, 0), ok(5, Minute, 4)]),
                expect(r(&["a", "e"]), OK, vec![over(1, Minute), ok(5, Minute, 4)]),
                expect(r(&["e"]), OK, vec![ok(5, Minute, 3)]),
                expect(r(&["a"]), OK, vec![over(1, Minute)]),
            ],
        },
    ]
}

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

fn quota() -> Vec<Case> {
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

const HITS: &str = r#"
domain: hits
descriptors:
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

fn hits() -> Vec<Case> {
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

const OVERRIDES: &str = r#"
domain: o
descriptors:
  - key: o
    rate_limit: {unit: minute, requests_per_unit: 10, name: cfg}
  - key: u
    rate_limit: {unlimited: true}
"#;

fn overrides() -> Vec<Case> {
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

fn charge() -> Vec<Case> {
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

const HEADERS: &str = r#"
domain: hd
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: z1
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: z2
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: qz
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: big
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
"#;

fn headers() -> Vec<Case> {
    let r = |keys: &[&str]| req("hd", keys.iter().map(|k| d(&[(k, "x")])).collect());
    let hdr = |l: &'static str, rem: &'static str, reset: &'static str| {
        [
            ("RateLimit-Limit", l),
            ("RateLimit-Remaining", rem),
            ("RateLimit-Reset", reset),
        ]
    };
    vec![
        Case {
            name: "headers: the tightest descriptor, first on a tie",
            config: Some(HEADERS),
            flags: &["--response-headers"],
            steps: vec![
                // Tie on remaining 4: the first (minute: 29.7495 s -> 30).
                expect(r(&["m", "h"]), OK, vec![ok(5, Minute, 4), ok(5, Hour, 4)])
                    .headers(&hdr("5", "4", "30")),
                expect(r(&["h", "m"]), OK, vec![ok(5, Hour, 3), ok(5, Minute, 3)])
                    .headers(&hdr("5", "3", "3570")),
                expect(
                    r(&["big", "h"]),
                    OK,
                    vec![ok(100, Second, 99), ok(5, Hour, 2)],
                )
                .headers(&hdr("5", "2", "3570")),
                // No limit or unlimited only: no headers.
                expect(r(&["nothing", "free"]), OK, vec![none(), unlimited()]),
            ],
        },
        Case {
            name: "headers: the last over-limit descriptor not in quota mode wins",
            config: Some(HEADERS),
            flags: &["--response-headers"],
            steps: vec![
                expect(
                    r(&["z1", "z2", "big"]),
                    OVER,
                    vec![over(0, Minute), over(0, Hour), ok(100, Second, 100)],
                )
                .headers(&hdr("0", "0", "3570")),
                expect(r(&["z2", "z1"]), OVER, vec![over(0, Hour), over(0, Minute)])
                    .headers(&hdr("0", "0", "30")),
                // A quota-mode descriptor over its limit is picked only by its remaining.
                expect(
                    r(&["big", "qz", "h"]),
                    OVER,
                    vec![ok(100, Second, 100), over(0, Second), ok(5, Hour, 5)],
                )
                .headers(&hdr("0", "0", "1")),
            ],
        },
        Case {
            name: "headers: names are configurable",
            config: Some(HEADERS),
            flags: &[
                "--response-headers",
                "--header-limit",
                "X-L",
                "--header-remaining",
                "X-R",
                "--header-reset",
                "X-Reset",
            ],
            steps: vec![expect(r(&["m"]), OK, vec![ok(5, Minute, 4)]).headers(&[
                ("X-L", "5"),
                ("X-R", "4"),
                ("X-Reset", "30"),
            ])],
        },
        Case {
            name: "headers: none without --response-headers",
            config: Some(HEADERS),
            flags: &[],
            steps: vec![expect(r(&["m"]), OK, vec![ok(5, Minute, 4)])],
        },
    ]
}

const METADATA: &str = r#"
domain: md
descriptors:
  - key: m1
    metadata: {tier: gold, nested: {a: 1}}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: m2
    metadata: {tier: silver, nested: {b: 2}, list: [1, 2]}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: m0
    metadata: {blocked: true}
    rate_limit: {unit: minute, requests_per_unit: 0}
"#;

fn metadata() -> Vec<Case> {
    let r = |keys: &[&str]| req("md", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![Case {
        name: "metadata: merged from descriptors within their limits, first wins",
        config: Some(METADATA),
        flags: &[],
        steps: vec![
            expect(r(&["m1", "m2"]), OK, vec![ok(10, Minute, 9), ok(10, Minute, 9)]).metadata(
                json!({"metadata": {"tier": "gold", "nested": {"a": 1.0, "b": 2.0}, "list": [1.0, 2.0]}}),
            ),
            expect(r(&["m0", "m1"]), OVER, vec![over(0, Minute), ok(10, Minute, 9)])
                .metadata(json!({"metadata": {"tier": "gold", "nested": {"a": 1.0}}})),
            expect(r(&["m0"]), OVER, vec![over(0, Minute)]),
        ],
    }]
}

fn request_errors() -> Vec<Case> {
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

fn all_cases() -> Vec<Case> {
    [
        matching(),
        windows(),
        replaces(),
        shadow(),
        quota(),
        hits(),
        overrides(),
        charge(),
        headers(),
        metadata(),
        request_errors(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    run_suite(StoreKind::Memory, all_cases()).await;
}

/// One standalone Redis for every case of this test (each case has its own key prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redis() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    run_suite(StoreKind::Redis(url), all_cases()).await;
    // The answers came from Redis (the cases leave their counters there).
    assert!(redis.command_calls("evalsha") > 100);
    assert!(redis.cli(&["DBSIZE"]).parse::<u64>().unwrap() > 50);
}

/// A 6-node Redis Cluster (3 primaries, 3 replicas) on loopback ports: the same answers, the
/// descriptors of a request spread over slots and nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(redis_support::RedisCluster::start)
        .await
        .expect("cluster starts");
    let url: &'static str = Box::leak(cluster.url().into_boxed_str());
    run_suite(StoreKind::Redis(url), all_cases()).await;
    assert!(cluster.command_calls("evalsha") > 100);
}
