//! A real Envoy 1.40 with the rate limit filter and route `rate_limits` Envoy Gateway
//! generates (its translator testdata `ratelimit-config/distinct-match`: a generic key per
//! route, then the `x-user-id` header per user), sluice taking the matching rules from the
//! control plane: 200s then 429s, per user, and a snapshot update taking effect.

use serde_json::json;

use super::control_plane::ControlPlane;
use super::{chain, domain, is_ack, sluice};
use crate::support::envoy::{bootstrap, http, route, Envoy, Filter, Upstream};
use sluice::proto::rls_conf::{RateLimitDescriptor, RateLimitUnit};

/// Envoy Gateway names a listener's domain after the listener.
const LISTENER: &str = "first-listener";

/// The rules Envoy Gateway sends for the route: the `x-user-id` value counted per user.
fn rules(per_hour: u32) -> Vec<RateLimitDescriptor> {
    vec![chain(
        &[("first-route", "first-route"), ("rule-0-match-0", "")],
        per_hour,
        RateLimitUnit::Hour,
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_with_envoy_gateway_routes_gets_429s_from_xds_rules() {
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), None).await;
    cp.set("1", vec![domain(LISTENER, rules(3))]);
    let url = cp.addr.to_string();
    let sluice = sluice(
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &url),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ],
        &[],
    )
    .await;
    assert!(is_ack(&cp.reply("1").await, "1"));

    let upstream = Upstream::start().await;
    // Envoy Gateway's route: rate_limits on the route, as its translator writes them.
    let routes = json!([route(
        "/",
        json!([{"actions": [
            {"generic_key": {"descriptor_key": "first-route", "descriptor_value": "first-route"}},
            {"request_headers": {"descriptor_key": "rule-0-match-0", "header_name": "x-user-id"}}
        ]}])
    )]);
    // Its filter: fail open (failure_mode_deny false), draft-03 headers, no
    // x-envoy-ratelimited header.
    let filter = Filter {
        failure_mode_deny: false,
        status_on_error: None,
    };
    let mut config = bootstrap(sluice.grpc, upstream.addr, filter, routes);
    let hcm = &mut config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"];
    let ratelimit = &mut hcm["http_filters"][1]["typed_config"];
    ratelimit["domain"] = json!(LISTENER);
    ratelimit["disable_x_envoy_ratelimited_header"] = json!(true);
    let envoy = Envoy::start(&config).await;
    let front = envoy.listener("front");
    let get = |user: &'static str| async move {
        http(front, "GET", "/", &[("x-user-id", user)])
            .await
            .expect("GET through Envoy")
            .status
    };

    let mut alice = Vec::new();
    for _ in 0..4 {
        alice.push(get("alice").await);
    }
    assert_eq!(alice, [200, 200, 200, 429], "{}", envoy.log());
    assert_eq!(get("bob").await, 200);

    // A raised limit arrives over xDS: alice passes again (a changed limit counts afresh).
    cp.set("2", vec![domain(LISTENER, rules(5))]);
    assert!(is_ack(&cp.reply("2").await, "2"));
    assert_eq!(get("alice").await, 200);
    drop(envoy);
    drop(sluice);
    cp.stop().await;
}
