//! Every algorithm of ALGORITHMS.md once through a real Envoy, as an HTTP client sees it: the
//! status and the x-ratelimit-* headers (DRAFT_VERSION_03) Envoy derives from sluice's answer.
//! sluice runs in process on a ManualClock, and each step sets the clock to an exact instant,
//! so the cases cross window boundaries to the microsecond.
//!
//! What a client should know from these: Envoy's `x-ratelimit-reset` is the whole seconds of
//! `duration_until_reset` (truncated: "0" can mean "retry in 1 ms"), and its `w=` comes from
//! the reported unit, so a `window: 30s` limit (reported per SECOND, ALGORITHMS.md) reads
//! `w=1` although it counts per 30 s.

use crate::support;

use serde_json::{json, Value as Json};
use sluice::model::Micros;
use support::envoy::{assert_limited, route, Filter, Stack};
use support::SEC;

const MS: Micros = 1_000;

/// The instant every case starts from: a UTC day, hour and minute plus 60 s, so aligned to the
/// minute (and to 5 s and 30 s), 60 s into an hour, and after the tests' T0.
const BASE: Micros = 1_699_920_060 * SEC;
const _: () = assert!(support::T0 < BASE, "the clock only moves forward");

/// One request: when (µs after [`BASE`]), its extra headers, and what the client must see:
/// status, `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`.
type Step<'a> = (Micros, &'a [(&'a str, &'a str)], u16, &'a str, u32, &'a str);

/// Starts sluice with one rule (`rule`, YAML under `descriptors:`) and Envoy with one route on
/// `/` whose `rate_limits` are `rate_limits`, then runs `steps` in order.
async fn run(rule: &str, rate_limits: Json, steps: &[Step<'_>]) {
    let config = format!("domain: e2e\ndescriptors:\n{rule}");
    let routes = json!([route("/", rate_limits)]);
    let s = Stack::start(&config, &[], Filter::default(), routes).await;

    for (n, &(at, headers, status, limit, remaining, reset)) in steps.iter().enumerate() {
        s.sluice.clock.set(BASE + at);
        let r = s.get("/", headers).await;
        eprintln!("step {n}: {} s {headers:?}", at as f64 / SEC as f64); // shown on failure
        assert_limited(&r, status, limit, remaining, reset);
    }
    s.stop().await;
}

/// The route's one descriptor: `generic_key` with `value`.
fn generic(value: &str) -> Json {
    json!([{"actions": [{"generic_key": {"descriptor_value": value}}]}])
}

/// fixed_window: 3 a minute; 3 in the last half second of a minute and 3 more at the start of
/// the next: twice the limit within half a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    let rule = "  - key: generic_key\n    value: fixed\n    \
                rate_limit: {unit: minute, requests_per_unit: 3}\n";
    let l = "3, 3;w=60";
    let late = 59_500 * MS;
    let next = 60 * SEC;
    run(
        rule,
        generic("fixed"),
        &[
            (late, &[], 200, l, 2, "0"),
            (late, &[], 200, l, 1, "0"),
            (late, &[], 200, l, 0, "0"),
            (late, &[], 429, l, 0, "0"),
            (next, &[], 200, l, 2, "60"),
            (next, &[], 200, l, 1, "60"),
            (next, &[], 200, l, 0, "60"),
            (next, &[], 429, l, 0, "60"),
        ],
    )
    .await;
}

/// sliding_window: 3 per 5 s in sub-windows of 1 s (ALGORITHMS.md's worked example): where a
/// fixed window would open at 5 s, the hits at 3.5, 4 and 4.5 s still count; the first leaves
/// with its sub-window at 9 s. A `window:` of 5 s is reported per SECOND, so `w=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_holds_the_limit_across_a_boundary() {
    let rule = "  - key: generic_key\n    value: sliding\n    rate_limit: \
                {requests_per_unit: 3, window: 5s, algorithm: sliding_window, precision: 5}\n";
    let l = "3, 3;w=1";
    run(
        rule,
        generic("sliding"),
        &[
            // Reset: until the newest non-empty sub-window leaves ((k + 1) s + 5 s).
            (3_500 * MS, &[], 200, l, 2, "5"), // 9 s - 3.5 s
            (4_000 * MS, &[], 200, l, 1, "6"), // 10 s - 4 s
            (4_500 * MS, &[], 200, l, 0, "5"), // 10 s - 4.5 s
            // Retry-after: until sub-window 3 (the hit at 3.5 s) leaves at 9 s.
            (5 * SEC, &[], 429, l, 0, "4"),
            (8_500 * MS, &[], 429, l, 0, "0"),
            (9 * SEC, &[], 200, l, 0, "6"),
        ],
    )
    .await;
}

/// sliding_log: 3 a minute, exact: the hit at 0 s leaves the log at 60 s, not a microsecond
/// earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_frees_a_hit_exactly_a_window_later() {
    let rule = "  - key: generic_key\n    value: log\n    \
                rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}\n";
    let l = "3, 3;w=60";
    run(
        rule,
        generic("log"),
        &[
            (0, &[], 200, l, 2, "60"),
            (10 * SEC, &[], 200, l, 1, "60"),
            (20 * SEC, &[], 200, l, 0, "60"),
            // Retry-after: the oldest entry (0 s) leaves at 60 s.
            (30 * SEC, &[], 429, l, 0, "30"),
            // 1 µs before: rounded up to 1 ms, which Envoy truncates to 0 s.
            (60 * SEC - 1, &[], 429, l, 0, "0"),
            (60 * SEC, &[], 200, l, 0, "60"),
            // Full again; next out is the entry of 10 s.
            (60 * SEC, &[], 429, l, 0, "10"),
        ],
    )
    .await;
}

/// token_bucket: 1 a minute with a burst of 3: three back to back from idle, then one a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_burst_then_the_rate() {
    let rule = "  - key: generic_key\n    value: tokens\n    rate_limit: \
                {unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 3}\n";
    let l = "1, 1;w=60";
    run(
        rule,
        generic("tokens"),
        &[
            // Remaining counts tokens (up to the burst); reset is until the bucket is full.
            (0, &[], 200, l, 2, "60"),
            (0, &[], 200, l, 1, "120"),
            (0, &[], 200, l, 0, "180"),
            (0, &[], 429, l, 0, "60"),
            (60 * SEC, &[], 200, l, 0, "180"),
            (60 * SEC, &[], 429, l, 0, "60"),
            (90 * SEC, &[], 429, l, 0, "30"),
        ],
    )
    .await;
}

/// leaky_bucket: a meter of 2 draining 2 a minute (one every 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_drains_at_the_rate() {
    let rule = "  - key: generic_key\n    value: leaky\n    rate_limit: \
                {unit: minute, requests_per_unit: 2, algorithm: leaky_bucket, burst: 2}\n";
    let l = "2, 2;w=60";
    run(
        rule,
        generic("leaky"),
        &[
            (0, &[], 200, l, 1, "30"),
            (0, &[], 200, l, 0, "60"),
            (0, &[], 429, l, 0, "30"),
            // Half a request has drained: the other half takes 15 s.
            (15 * SEC, &[], 429, l, 0, "15"),
            (30 * SEC, &[], 200, l, 0, "60"),
        ],
    )
    .await;
}

/// gcra with `burst: 1`: strict pacing, one request per emission interval (60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_paces_one_per_interval() {
    let rule = "  - key: generic_key\n    value: gcra\n    rate_limit: \
                {unit: minute, requests_per_unit: 1, algorithm: gcra, burst: 1}\n";
    let l = "1, 1;w=60";
    run(
        rule,
        generic("gcra"),
        &[
            (0, &[], 200, l, 0, "60"),
            (0, &[], 429, l, 0, "60"),
            (59_999 * MS, &[], 429, l, 0, "0"),
            (60 * SEC, &[], 200, l, 0, "60"),
            (60 * SEC, &[], 429, l, 0, "60"),
        ],
    )
    .await;
}

/// distinct: at most 2 IPs per user an hour, the descriptor `(user, ip)` built by Envoy from two
/// request headers. A seen IP always passes; the window ends with the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_counts_values_per_parent() {
    let rule = "  - key: user\n    descriptors:\n      - key: ip\n        rate_limit: \
                {unit: hour, requests_per_unit: 2, algorithm: distinct}\n";
    let rate_limits = json!([{"actions": [
        {"request_headers": {"header_name": "x-user", "descriptor_key": "user"}},
        {"request_headers": {"header_name": "x-ip", "descriptor_key": "ip"}}
    ]}]);
    let l = "2, 2;w=3600";
    // BASE is 60 s into an hour.
    let rest = "3540";
    let next_hour = 3_540 * SEC;
    run(
        rule,
        rate_limits,
        &[
            (
                0,
                &[("x-user", "alice"), ("x-ip", "10.0.0.1")],
                200,
                l,
                1,
                rest,
            ),
            (
                0,
                &[("x-user", "alice"), ("x-ip", "10.0.0.2")],
                200,
                l,
                0,
                rest,
            ),
            (
                0,
                &[("x-user", "alice"), ("x-ip", "10.0.0.1")],
                200,
                l,
                0,
                rest,
            ),
            (
                0,
                &[("x-user", "alice"), ("x-ip", "10.0.0.3")],
                429,
                l,
                0,
                rest,
            ),
            (
                0,
                &[("x-user", "bob"), ("x-ip", "10.0.0.3")],
                200,
                l,
                1,
                rest,
            ),
            (
                next_hour,
                &[("x-user", "alice"), ("x-ip", "10.0.0.3")],
                200,
                l,
                1,
                "3600",
            ),
        ],
    )
    .await;
}

/// `rate_limits`: 2 a second (sliding_log) and 3 a minute on one descriptor. Envoy sees one
/// status: the limit that rejects, or when allowed the one with the least remaining, by name.
/// A request rejected by one limit is charged to neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_on_one_descriptor() {
    let rule = "  - key: generic_key\n    value: login\n    rate_limits:\n      \
                - {name: per-second, requests_per_unit: 2, unit: second, algorithm: sliding_log}\n      \
                - {name: per-minute, requests_per_unit: 3, unit: minute}\n";
    let second = "2, 2;w=1;name=\"per-second\"";
    let minute = "3, 3;w=60;name=\"per-minute\"";
    let (t1, t2) = (500 * MS, 1_500 * MS);
    run(
        rule,
        generic("login"),
        &[
            (t1, &[], 200, second, 1, "1"),
            (t1, &[], 200, second, 0, "1"),
            // per-second rejects; per-minute (1 left) is not charged...
            (t1, &[], 429, second, 0, "1"),
            // ...so a second later it admits one more (58.5 s left of the minute).
            (t2, &[], 200, minute, 0, "58"),
            (t2, &[], 429, minute, 0, "58"),
            (60 * SEC, &[], 200, second, 1, "1"),
        ],
    )
    .await;
}

/// A `window: 30s` fixed window: windows of 30 s aligned to the epoch, reported per SECOND, so
/// Envoy's `w=1` (the quota is per 30 s; the reset header tells the truth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thirty_second_window() {
    let rule = "  - key: generic_key\n    value: half-minute\n    \
                rate_limit: {requests_per_unit: 2, window: 30s}\n";
    let l = "2, 2;w=1";
    run(
        rule,
        generic("half-minute"),
        &[
            (250 * MS, &[], 200, l, 1, "29"),
            (250 * MS, &[], 200, l, 0, "29"),
            (250 * MS, &[], 429, l, 0, "29"),
            (29_999 * MS, &[], 429, l, 0, "0"),
            (30 * SEC, &[], 200, l, 1, "30"),
        ],
    )
    .await;
}
