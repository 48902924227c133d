//! Tests: every validation error of the algorithm keys, with its file:line:column.

use std::sync::Arc;

use super::{compile, ConfigFile, LoadOptions};

/// Compiles `yaml` as `t.yaml`; the errors as `line:column: message`.
fn errors(yaml: &str) -> Vec<String> {
    let file = ConfigFile {
        path: Arc::from("t.yaml"),
        content: yaml.to_string(),
    };
    match compile(&[file], LoadOptions::default()) {
        Ok(_) => Vec::new(),
        Err(e) => {
            e.0.iter()
                .map(|e| format!("{}:{}: {}", e.position.line, e.position.column, e.message))
                .collect()
        }
    }
}

fn one_limit(fields: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{fields}}}\n")
}

#[test]
fn each_algorithm_loads() {
    for fields in [
        "requests_per_unit: 5, unit: second",
        "requests_per_unit: 5, window: 1500ms, algorithm: sliding_window, precision: 3",
        "requests_per_unit: 5, window: 7d, algorithm: sliding_log",
        "requests_per_unit: 5, unit: minute, algorithm: token_bucket, burst: 9",
        "requests_per_unit: 5, unit: minute, algorithm: leaky_bucket",
        "requests_per_unit: 5, unit: minute, algorithm: gcra, burst: 1",
        "requests_per_unit: 5, unit: week, algorithm: distinct, align: calendar",
        "requests_per_unit: 5, unit: month, align: calendar, timezone: Europe/Paris",
        "requests_per_unit: 100000, unit: day, algorithm: token_bucket",
        "algorithm: concurrency, max_in_flight: 5",
        "algorithm: concurrency, max_in_flight: 0, lease_time: 1.5s",
    ] {
        assert_eq!(errors(&one_limit(fields)), Vec::<String>::new(), "{fields}");
    }
}

#[test]
fn what_cannot_work_is_rejected_where_it_is_written() {
    // (fields of the rate_limit at line 4, column 17 onwards; expected error)
    let cases = [
        (
            "requests_per_unit: 5, unit: second, burst: 3",
            "4:61: burst applies to token_bucket, leaky_bucket and gcra, not to fixed_window",
        ),
        (
            "requests_per_unit: 5, unit: second, algorithm: sliding_log, precision: 3",
            "4:89: precision applies to sliding_window only, not to sliding_log",
        ),
        (
            "requests_per_unit: 50000, unit: hour, algorithm: sliding_log",
            "4:37: sliding_log keeps one timestamp per request, and 50000 is more than the 10000 it keeps per key; use algorithm: sliding_window for large limits",
        ),
        (
            "requests_per_unit: 5, unit: day, align: calendar, timezone: Mars/Olympus",
            "4:78: unknown time zone 'Mars/Olympus' (expected an IANA name such as Asia/Shanghai or UTC)",
        ),
        (
            "requests_per_unit: 5, unit: day, timezone: UTC",
            "4:61: timezone applies only with align: calendar",
        ),
        (
            "requests_per_unit: 5, window: 1d, align: calendar",
            "4:59: align: calendar needs a unit of hour, day, week, month or year (not a window or a shorter unit)",
        ),
        (
            "requests_per_unit: 5, unit: day, algorithm: gcra, align: calendar",
            "4:75: align: calendar applies to fixed_window and distinct, not to gcra",
        ),
        (
            "requests_per_unit: 5, unit: second, window: 1s",
            "4:62: use either unit or window, not both",
        ),
        (
            "requests_per_unit: 5, window: 3 seconds",
            "4:48: invalid window '3 seconds' (expected a number and us, ms, s, m, h or d, e.g. 250ms, 1.5s, 2h, 7d)",
        ),
        (
            "requests_per_unit: 5, unit: second, algorithm: lottery",
            "4:65: invalid algorithm 'lottery' (expected fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra, distinct or concurrency)",
        ),
        (
            "requests_per_unit: 5, unit: second, algorithm: sliding_window, precision: 3",
            "4:37: a window of 1000000 µs cannot be split into 3 sub-windows of whole microseconds; choose a precision that divides it",
        ),
        (
            "requests_per_unit: 4294967291, unit: year, algorithm: gcra",
            "4:37: burst 4294967291 with 4294967291 requests per 31536000000000 µs needs more than 2^51 units of exact arithmetic (burst × window / gcd(window, requests_per_unit)); lower burst, or pick a requests_per_unit that divides the window more evenly",
        ),
        (
            "requests_per_unit: 0, unit: second, algorithm: token_bucket, burst: 3",
            "4:37: burst needs requests_per_unit above zero (nothing would refill the bucket)",
        ),
    ];
    for (fields, want) in cases {
        assert_eq!(errors(&one_limit(fields)), [want], "{fields}");
    }
}

#[test]
fn concurrency_keys_are_checked() {
    // (fields of the rate_limit at line 4, column 17 onwards; expected errors)
    let cases: [(&str, &[&str]); 7] = [
        (
            "algorithm: concurrency",
            &["4:17: concurrency needs max_in_flight (the most requests in flight; 0 blocks every request)"],
        ),
        (
            "algorithm: concurrency, max_in_flight: 5, requests_per_unit: 5, unit: second",
            &[
                "4:79: concurrency limits requests in flight, not a rate: use max_in_flight instead of requests_per_unit",
                "4:88: concurrency has no unit: a lease lasts until it is released, or at most lease_time",
            ],
        ),
        (
            "algorithm: concurrency, max_in_flight: 5, window: 1s",
            &["4:68: concurrency has no window: a lease lasts until it is released, or at most lease_time"],
        ),
        (
            "algorithm: concurrency, max_in_flight: -1",
            &["4:57: invalid u32: expected a whole number from 0 to 4294967295"],
        ),
        (
            "algorithm: concurrency, max_in_flight: 5, lease_time: forever",
            &["4:72: invalid lease_time 'forever' (expected a number and us, ms, s, m, h or d, e.g. 250ms, 1.5s, 2h, 7d)"],
        ),
        (
            "algorithm: concurrency, max_in_flight: 5, burst: 2",
            &["4:67: burst applies to token_bucket, leaky_bucket and gcra, not to concurrency"],
        ),
        (
            "requests_per_unit: 5, unit: second, max_in_flight: 5, lease_time: 1s",
            &[
                "4:69: max_in_flight applies to concurrency only, not to fixed_window",
                "4:84: lease_time applies to concurrency only, not to fixed_window",
            ],
        ),
    ];
    for (fields, want) in cases {
        assert_eq!(errors(&one_limit(fields)), want, "{fields}");
    }
}

#[test]
fn rate_limits_lists_are_checked() {
    let both = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1, unit: second}\n    rate_limits:\n      - {name: a, requests_per_unit: 1, unit: second}\n";
    assert_eq!(
        errors(both),
        ["6:7: a descriptor has either rate_limit or rate_limits, not both (put every limit in rate_limits)"]
    );
    let dup = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, requests_per_unit: 1, unit: second}\n      - {name: a, requests_per_unit: 9, unit: minute}\n";
    assert_eq!(
        errors(dup),
        ["6:16: duplicate limit name 'a' in rate_limits (first at t.yaml:5:16)"]
    );
    let unnamed = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {requests_per_unit: 1, unit: second}\n";
    assert_eq!(
        errors(unnamed),
        ["5:9: each limit in rate_limits needs a name (it tells the limits apart in statuses, replaces and storage keys)"]
    );
    let unlimited = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, unlimited: true}\n";
    assert_eq!(
        errors(unlimited),
        ["5:9: unlimited cannot be used inside rate_limits; write `rate_limit: {unlimited: true}` to make the descriptor unlimited"]
    );
    let sibling = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, requests_per_unit: 1, unit: second}\n      - {name: b, requests_per_unit: 1, unit: second, replaces: [{name: a}]}\n";
    assert_eq!(
        errors(sibling),
        ["6:73: rate limit 'a' is on this same descriptor and cannot be replaced by it"]
    );
    let empty = "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n";
    assert_eq!(
        errors(empty),
        ["4:18: rate_limits needs at least one limit"]
    );
}
