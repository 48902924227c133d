use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::{self, Hour, Minute, Second};
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

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

pub(super) fn windows() -> Vec<Case> {
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
