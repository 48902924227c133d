use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::{Hour, Minute, Second};
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

// The partition key of every descriptor below (value "x"): base64 of the first 16 bytes of
// SHA-256(b"\0\0\0\x01x"), computed with Python's hashlib: 50Krx8hlHULbnWVyy6FLHA==.

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

pub(super) fn headers() -> Vec<Case> {
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
            name: "headers: ietf: one policy and one service limit item per limit",
            config: Some(HEADERS),
            flags: &["--response-headers-format", "ietf"],
            steps: vec![
                expect(r(&["m", "h"]), OK, vec![ok(5, Minute, 4), ok(5, Hour, 4)]).headers(&[
                    (
                        "RateLimit-Policy",
                        r#""hd.m";q=5;w=60;pk=:50Krx8hlHULbnWVyy6FLHA==:, "hd.h";q=5;w=3600;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                    ),
                    (
                        "RateLimit",
                        r#""hd.m";r=4;t=30;pk=:50Krx8hlHULbnWVyy6FLHA==:, "hd.h";r=4;t=3570;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                    ),
                ]),
                // Over the limit: r=0, whatever the store counted; unlimited and unmatched
                // descriptors have no item.
                expect(
                    r(&["z1", "free", "nothing"]),
                    OVER,
                    vec![over(0, Minute), unlimited(), none()],
                )
                .headers(&[
                    (
                        "RateLimit-Policy",
                        r#""hd.z1";q=0;w=60;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                    ),
                    (
                        "RateLimit",
                        r#""hd.z1";r=0;t=30;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                    ),
                ]),
                expect(r(&["nothing", "free"]), OK, vec![none(), unlimited()]),
            ],
        },
        Case {
            name: "headers: both: the draft-03 headers, then the draft-10 fields",
            config: Some(HEADERS),
            flags: &["--response-headers", "--response-headers-format", "both"],
            steps: vec![expect(r(&["big"]), OK, vec![ok(100, Second, 99)]).headers(&[
                ("RateLimit-Limit", "100"),
                ("RateLimit-Remaining", "99"),
                ("RateLimit-Reset", "1"),
                (
                    "RateLimit-Policy",
                    r#""hd.big";q=100;w=1;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                ),
                (
                    "RateLimit",
                    r#""hd.big";r=99;t=1;pk=:50Krx8hlHULbnWVyy6FLHA==:"#,
                ),
            ])],
        },
        Case {
            name: "headers: --response-headers-format legacy is the bare flag",
            config: Some(HEADERS),
            flags: &["--response-headers-format", "legacy"],
            steps: vec![expect(r(&["m"]), OK, vec![ok(5, Minute, 4)]).headers(&hdr("5", "4", "30"))],
        },
        Case {
            name: "headers: none without --response-headers",
            config: Some(HEADERS),
            flags: &[],
            steps: vec![expect(r(&["m"]), OK, vec![ok(5, Minute, 4)])],
        },
    ]
}
