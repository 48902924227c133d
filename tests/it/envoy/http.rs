//! End to end through a real Envoy: an HTTP client talks to Envoy, whose rate limit filter asks
//! an in-process sluice (ManualClock, so windows are under the test's control), in front of an
//! in-process upstream. Every assertion is on what the HTTP client sees, plus, where the
//! descriptors Envoy built matter, a look at sluice's counters over gRPC with `hits_addend: 0`.

use crate::support;

use serde_json::json;
use sluice::proto::rate_limit_response::rate_limit::Unit;
use support::envoy::{assert_limited, route, route_per_filter, Filter, Stack, DOMAIN};
use support::*;

/// Envoy's `x-ratelimit-reset` is the whole seconds of sluice's `duration_until_reset`
/// (truncated), here for a `unit` window at the test clock.
fn envoy_reset(s: &Stack, unit: Unit) -> String {
    let now = sluice::clock::Clock::now(&s.sluice.clock);
    (window_rest_ms(unit, now) / 1000).to_string()
}

const BASIC: &str = r#"
domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_limit_200_then_429_and_the_window_resets() {
    let routes = json!([route(
        "/",
        json!([{"actions": [{"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]}])
    )]);
    let s = Stack::start(BASIC, &["--response-headers"], Filter::default(), routes).await;
    let alice = [("x-user", "alice")];
    let policy = "3, 3;w=60;name=\"per-user\"";
    // 29.750 s are left of the minute at T0: Envoy's x-ratelimit-reset truncates them, sluice's
    // own RateLimit-Reset (--response-headers) rounds them up.
    let reset = envoy_reset(&s, Unit::Minute);
    assert_eq!(reset, "29");
    let sluice_reset = (window_rest_ms(Unit::Minute, T0) + 999) / 1000;
    assert_eq!(sluice_reset, 30);

    for remaining in [2, 1, 0] {
        let r = s.get("/", &alice).await;
        assert_limited(&r, 200, policy, remaining, &reset);
        assert_eq!(r.header("ratelimit-limit"), Some("3"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some(&*remaining.to_string())
        );
        assert_eq!(
            r.header("ratelimit-reset"),
            Some(&*sluice_reset.to_string())
        );
    }
    for _ in 0..2 {
        let r = s.get("/", &alice).await;
        assert_limited(&r, 429, policy, 0, &reset);
        assert_eq!(r.header("ratelimit-remaining"), Some("0"));
    }
    // Another user has a counter of its own.
    assert_limited(
        &s.get("/", &[("x-user", "bob")]).await,
        200,
        policy,
        2,
        &reset,
    );
    // No x-user header: no descriptor, so no call to sluice and no headers.
    let r = s.get("/", &[]).await;
    assert_eq!(
        (r.status, r.header("x-ratelimit-limit")),
        (200, None),
        "{r:?}"
    );

    // Into the next minute: alice's count starts again.
    s.sluice.clock.advance(30 * SEC);
    let reset = envoy_reset(&s, Unit::Minute);
    assert_eq!(reset, "59");
    assert_limited(&s.get("/", &alice).await, 200, policy, 2, &reset);
    s.stop().await;
}

const MULTI: &str = r#"
domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: generic_key
    value: shop
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

/// One route, four `rate_limits` entries, one action each: every entry becomes one descriptor
/// (when its action applies), and each descriptor is held to its own rule. The limits differ
/// (user 2, shop 5, client address 3, gold plan 1), so `x-ratelimit-limit` names the tightest
/// descriptor first and then lists the limit of every descriptor Envoy sent, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rate_limits_entry_is_one_descriptor_with_its_own_rule() {
    let routes = json!([route(
        "/",
        json!([
            {"actions": [{"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]},
            {"actions": [{"generic_key": {"descriptor_value": "shop"}}]},
            {"actions": [{"remote_address": {}}]},
            {"actions": [{"header_value_match": {
                "descriptor_key": "plan",
                "descriptor_value": "gold",
                "headers": [{"name": "x-plan", "string_match": {"exact": "gold"}}]
            }}]}
        ])
    )]);
    let s = Stack::start(MULTI, &[], Filter::default(), routes).await;
    let reset = envoy_reset(&s, Unit::Minute);
    // (client address, x-user, x-plan: gold?, status, tightest limit, its remaining)
    let steps: &[(&str, &str, bool, u16, u32, u32)] = &[
        ("10.0.0.1", "alice", true, 200, 1, 0),
        ("10.0.0.1", "bob", true, 429, 1, 0), // the gold plan's 1
        ("10.0.0.1", "alice", false, 200, 2, 0),
        ("10.0.0.2", "alice", false, 429, 2, 0), // alice's 2
        ("10.0.0.1", "bob", false, 200, 3, 0),
        ("10.0.0.1", "carol", false, 429, 3, 0), // 10.0.0.1's 3
        ("10.0.0.2", "carol", false, 200, 2, 1),
        ("10.0.0.3", "dave", false, 200, 5, 0),
        ("10.0.0.4", "erin", false, 429, 5, 0), // the shop's 5
    ];
    for (n, &(addr, user, gold, status, tightest, remaining)) in steps.iter().enumerate() {
        let mut headers = vec![("x-forwarded-for", addr), ("x-user", user)];
        let mut limit = format!("{tightest}, 2;w=60, 5;w=60, 3;w=60");
        if gold {
            headers.push(("x-plan", "gold"));
            limit.push_str(", 1;w=60");
        }
        let r = s.get("/", &headers).await;
        eprintln!("step {n}: {headers:?}"); // shown if the assertion fails
        assert_limited(&r, status, &limit, remaining, &reset);
    }

    // The counters behind those answers, keyed exactly as Envoy built the descriptors.
    let looks = [
        (("user", "alice"), 0),
        (("user", "bob"), 1),
        (("user", "carol"), 1),
        (("user", "erin"), 2),
        (("generic_key", "shop"), 0),
        (("remote_address", "10.0.0.1"), 0),
        (("remote_address", "10.0.0.2"), 2),
        (("remote_address", "10.0.0.4"), 3),
        (("plan", "gold"), 0),
    ];
    let r = s
        .sluice
        .call(
            req(
                DOMAIN,
                looks.iter().map(|&(e, _)| d(&[e]).hits(0)).collect(),
            )
            .to_proto(),
        )
        .await
        .expect("look at the counters");
    let got: Vec<u32> = r.statuses.iter().map(|st| st.limit_remaining).collect();
    let want: Vec<u32> = looks.iter().map(|&(_, rem)| rem).collect();
    assert_eq!(got, want, "remaining of {looks:?}");
    s.stop().await;
}

const ADDEND: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: generic_key
    value: priced
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

/// `hits_addend` set by Envoy per descriptor (in `RateLimitPerRoute.rate_limits`): a number in
/// the route config, or a number taken from a request header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_from_the_route_and_from_a_request_header() {
    let routes = json!([
        route_per_filter(
            "/fixed",
            json!([{"actions": [{"generic_key": {"descriptor_value": "fixed"}}],
                    "hits_addend": {"number": 4}}])
        ),
        route_per_filter(
            "/priced",
            json!([{"actions": [{"generic_key": {"descriptor_value": "priced"}}],
                    "hits_addend": {"format": "%REQ(x-cost)%"}}])
        ),
    ]);
    let s = Stack::start(ADDEND, &[], Filter::default(), routes).await;
    let reset = envoy_reset(&s, Unit::Minute);
    let policy = "10, 10;w=60";

    // 4 hits a request: 4, 8, then 12 > 10 is rejected (and not charged, so 2 stay left).
    assert_limited(&s.get("/fixed", &[]).await, 200, policy, 6, &reset);
    assert_limited(&s.get("/fixed", &[]).await, 200, policy, 2, &reset);
    assert_limited(&s.get("/fixed", &[]).await, 429, policy, 0, &reset);

    // The client states its cost.
    let cost = |n: &'static str| [("x-cost", n)];
    assert_limited(&s.get("/priced", &cost("3")).await, 200, policy, 7, &reset);
    assert_limited(&s.get("/priced", &cost("8")).await, 429, policy, 0, &reset);
    assert_limited(&s.get("/priced", &cost("7")).await, 200, policy, 0, &reset);
    assert_limited(&s.get("/priced", &cost("1")).await, 429, policy, 0, &reset);

    let r = s
        .sluice
        .call(req(DOMAIN, vec![d(&[("generic_key", "fixed")]).hits(0)]).to_proto())
        .await
        .expect("look");
    assert_eq!(r.statuses[0].limit_remaining, 2);
    s.stop().await;
}

const OVERRIDE: &str = r#"
domain: e2e
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

/// The `x-limit-override` header value: base64 of a serialized `google.protobuf.Value` holding
/// Envoy's limit override struct, which header_to_metadata puts into dynamic metadata.
fn override_header(requests_per_unit: u32, unit: &str) -> String {
    use prost::Message;
    use prost_types::value::Kind;
    let field = |k: Kind| prost_types::Value { kind: Some(k) };
    let value = field(Kind::StructValue(prost_types::Struct {
        fields: [
            (
                "requests_per_unit".to_string(),
                field(Kind::NumberValue(f64::from(requests_per_unit))),
            ),
            ("unit".to_string(), field(Kind::StringValue(unit.into()))),
        ]
        .into_iter()
        .collect(),
    }));
    support::envoy::base64(&value.encode_to_vec())
}

/// A per-descriptor limit from dynamic metadata (`limit: {dynamic_metadata: ...}` in a
/// `rate_limits` entry) replaces the configured limit for that request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_override_from_dynamic_metadata() {
    let routes = json!([route(
        "/",
        json!([{
            "actions": [{"request_headers": {"header_name": "x-tenant", "descriptor_key": "tenant"}}],
            "limit": {"dynamic_metadata": {"metadata_key": {
                "key": "sluice.override",
                "path": [{"key": "limit"}]
            }}}
        }])
    )]);
    let s = Stack::start(OVERRIDE, &[], Filter::default(), routes).await;
    let minute = envoy_reset(&s, Unit::Minute);

    let two_a_minute = override_header(2, "MINUTE");
    let acme = [
        ("x-tenant", "acme"),
        ("x-limit-override", two_a_minute.as_str()),
    ];
    assert_limited(&s.get("/", &acme).await, 200, "2, 2;w=60", 1, &minute);
    assert_limited(&s.get("/", &acme).await, 200, "2, 2;w=60", 0, &minute);
    assert_limited(&s.get("/", &acme).await, 429, "2, 2;w=60", 0, &minute);

    // Without the metadata the configured 100 per minute applies.
    let globex = [("x-tenant", "globex")];
    assert_limited(
        &s.get("/", &globex).await,
        200,
        "100, 100;w=60",
        99,
        &minute,
    );

    // The override brings its own unit, and so its own window.
    let five_an_hour = override_header(5, "HOUR");
    let initech = [
        ("x-tenant", "initech"),
        ("x-limit-override", five_an_hour.as_str()),
    ];
    let hour = envoy_reset(&s, Unit::Hour);
    assert_limited(&s.get("/", &initech).await, 200, "5, 5;w=3600", 4, &hour);
    s.stop().await;
}

const AFTER_RESPONSE: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: llm
    rate_limit: {unit: minute, requests_per_unit: 10, charge: always}
  - key: generic_key
    value: llm-if-admitted
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

/// Envoy's charge-after-response pattern: before the request, a look (`hits_addend: 0`) that
/// rejects only once the budget is spent; when the stream is done, a charge of what the
/// response cost (`apply_on_stream_done`, `hits_addend` from the upstream's `x-tokens` header).
/// The charge must go through even past the limit: that is what `charge: always` does. With
/// the default `if_admitted` a charge that does not fit is refused, so the budget never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_after_the_response_needs_charge_always() {
    let entries = |value: &str| {
        json!([
            {"actions": [{"generic_key": {"descriptor_value": value}}],
             "hits_addend": {"number": 0}},
            {"actions": [{"generic_key": {"descriptor_value": value}}],
             "apply_on_stream_done": true,
             "hits_addend": {"format": "%RESP(x-tokens)%"}}
        ])
    };
    let routes = json!([
        route_per_filter("/llm-if-admitted", entries("llm-if-admitted")),
        route_per_filter("/llm", entries("llm")),
    ]);
    let s = Stack::start(AFTER_RESPONSE, &[], Filter::default(), routes).await;
    let reset = envoy_reset(&s, Unit::Minute);
    let policy = "10, 10;w=60";
    // The upstream answers `x-tokens: 6`.
    let six = [("x-echo-x-tokens", "6")];
    // Calls to sluice that Envoy has seen answered (so sluice has decided them).
    let calls = "cluster.sluice.upstream_rq_completed";

    for (path, last) in [("/llm", 429), ("/llm-if-admitted", 200)] {
        let before = s.envoy.stat(calls).await;
        assert_limited(&s.get(path, &six).await, 200, policy, 10, &reset);
        wait_for_stat(&s, calls, before + 2).await;
        assert_limited(&s.get(path, &six).await, 200, policy, 4, &reset);
        wait_for_stat(&s, calls, before + 4).await;
        // `always`: 6 + 6 = 12 was charged, so the look now rejects. `if_admitted`: the second
        // charge did not fit and was refused, so 4 are left.
        let r = s.get(path, &six).await;
        if last == 429 {
            assert_limited(&r, 429, policy, 0, &reset);
        } else {
            assert_limited(&r, 200, policy, 4, &reset);
        }
    }
    s.stop().await;
}

/// Waits (bounded) until an Envoy counter reaches `want`: the stream-done call to sluice happens
/// after the client already has its response.
async fn wait_for_stat(s: &Stack, name: &str, want: u64) {
    let mut got = 0;
    for _ in 0..1_000 {
        got = s.envoy.stat(name).await;
        if got >= want {
            assert_eq!(got, want, "{name}");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{name} stayed at {got}, want {want}\n{}", s.envoy.log());
}

#[test]
fn base64_matches_rfc4648_vectors() {
    let cases = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];
    for (plain, encoded) in cases {
        assert_eq!(support::envoy::base64(plain.as_bytes()), encoded);
    }
}
