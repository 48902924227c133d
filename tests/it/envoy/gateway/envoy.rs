//! A real Envoy 1.40 with the filters and route `rate_limits` Envoy Gateway generates (its
//! `req-and-resp-cost` route: a request cost of 0, and a response cost read at stream end from
//! dynamic metadata), connecting to sluice over TLS with a client certificate, sluice
//! configured only through Envoy Gateway's environment: e2e `UsageRateLimit` gives 200, 200,
//! 200, 429. Then Envoy AI Gateway's QuotaPolicy shape: a second rate limit filter on domain
//! `ai-gateway-quota`, `quota_mode` leaves, descriptors from dynamic metadata, and the
//! stream-end charge from `%DYNAMIC_METADATA(io.envoy.ai_gateway:quota_cost)%`. The metadata
//! that Envoy Gateway's ext_proc and AI Gateway's ext_proc set is set here by
//! header_to_metadata from the upstream's response headers.

use serde_json::{json, Value as Json};

use super::{pairs, Pod, DOMAIN, ROUTE, USAGE_CONFIG};
use crate::support::envoy::{cluster, front_listener, http, Envoy, Upstream};
use crate::support::process::spawn_as_ratelimit;

const AI_CONFIG: &str = r#"
domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: ai-gateway/backend-a
    descriptors:
      - key: model_name_override
        value: model-x
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 100}
"#;

/// Envoy Gateway's ratelimit filter (ratelimit.go), and AI Gateway's second one.
fn ratelimit_filter(name: &str, domain: &str) -> Json {
    json!({
        "name": name,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": domain,
            "disable_x_envoy_ratelimited_header": true,
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            // Fail closed, so a TLS failure is a visible 500, never a silent 200.
            "failure_mode_deny": true,
            "timeout": "5s",
            "rate_limit_service": {
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": "ratelimit_cluster"}}
            }
        }
    })
}

/// header_to_metadata: what the ext_proc servers would set, from headers.
fn metadata_filter() -> Json {
    let rule = |header: &str, ns: &str, key: &str| json!({"header": header, "on_header_present": {"metadata_namespace": ns, "key": key}});
    json!({
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [
                rule("x-backend", "io.envoy.ai_gateway", "ai_service_backend_name"),
                rule("x-model", "io.envoy.ai_gateway", "model_name_override"),
            ],
            "response_rules": [
                rule("x-cost", "io.envoyproxy.gateway.e2e", "request_cost_set_by_ext_proc"),
                rule("x-quota-cost", "io.envoy.ai_gateway", "quota_cost"),
            ]
        }
    })
}

/// Envoy Gateway's route rate limits for a rule with a header match and both costs
/// (testdata/out/xds-ir/ratelimit.routes.yaml, `req-and-resp-cost`).
fn usage_route() -> Json {
    let actions = json!([
        {"generic_key": {"descriptor_key": ROUTE, "descriptor_value": ROUTE}},
        {"header_value_match": {
            "descriptor_key": "rule-0-match-0",
            "descriptor_value": "rule-0-match-0",
            "expect_match": true,
            "headers": [{"name": "x-user-id", "string_match": {"exact": "one"}}]
        }}
    ]);
    json!({
        "match": {"prefix": "/get"},
        "route": {"cluster": "upstream"},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
            "domain": DOMAIN,
            "rate_limits": [
                {"actions": actions, "hits_addend": {"number": 0}},
                {"actions": actions, "apply_on_stream_done": true,
                 "hits_addend": {"format": "%DYNAMIC_METADATA(io.envoyproxy.gateway.e2e:request_cost_set_by_ext_proc)%"}}
            ]
        }}
    })
}

/// AI Gateway's QuotaPolicy route (proposal 009): static descriptors at request time, the
/// selected backend and model from metadata at stream end, charged `quota_cost`.
fn ai_route() -> Json {
    let from_metadata = |descriptor_key: &str, key: &str| {
        json!({"metadata": {
            "descriptor_key": descriptor_key,
            "source": "DYNAMIC",
            "metadata_key": {"key": "io.envoy.ai_gateway", "path": [{"key": key}]}
        }})
    };
    json!({
        "match": {"prefix": "/v1/chat/completions"},
        "route": {"cluster": "upstream"},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit/ai-gateway-quota": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
            "domain": "ai-gateway-quota",
            "rate_limits": [
                {"actions": [
                    {"generic_key": {"descriptor_key": "backend_name", "descriptor_value": "ai-gateway/backend-a"}},
                    {"generic_key": {"descriptor_key": "model_name_override", "descriptor_value": "model-x"}}
                ]},
                {"apply_on_stream_done": true,
                 "hits_addend": {"format": "%DYNAMIC_METADATA(io.envoy.ai_gateway:quota_cost)%"},
                 "actions": [
                    from_metadata("backend_name", "ai_service_backend_name"),
                    from_metadata("model_name_override", "model_name_override")
                 ]}
            ]
        }}
    })
}

fn bootstrap(pod: &Pod, rls: std::net::SocketAddr, upstream: std::net::SocketAddr) -> Json {
    let file = |p: &str| json!({"filename": pod.path(p).display().to_string()});
    let mut rls_cluster = cluster("ratelimit_cluster", &[rls], true);
    // Envoy Gateway's ratelimit_cluster: TLS 1.3 at most, its client certificate, the CA.
    rls_cluster["transport_socket"] = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "tls_params": {"tls_maximum_protocol_version": "TLSv1_3"},
                "tls_certificates": [{
                    "certificate_chain": file("envoy.crt"),
                    "private_key": file("envoy.key")
                }],
                "validation_context": {"trusted_ca": file("certs/ca.crt")}
            }
        }
    });
    front_listener(
        vec![
            metadata_filter(),
            ratelimit_filter("envoy.filters.http.ratelimit", DOMAIN),
            ratelimit_filter(
                "envoy.filters.http.ratelimit/ai-gateway-quota",
                "ai-gateway-quota",
            ),
        ],
        json!([usage_route(), ai_route()]),
        vec![cluster("upstream", &[upstream], false), rls_cluster],
    )
}

/// Waits (bounded) until Envoy has seen `want` calls to sluice answered: the stream-end call
/// happens after the client has its response.
async fn wait_for_rls_calls(envoy: &Envoy, want: u64) {
    let name = "cluster.ratelimit_cluster.upstream_rq_completed";
    crate::support::poll::eventually("the stream-end charges", || async {
        (envoy.stat(name).await >= want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_mtls_with_envoy_gateways_usage_and_ai_gateways_quota() {
    let pod = Pod::new(USAGE_CONFIG);
    std::fs::write(pod.path("data/ratelimit/config/ai.yaml"), AI_CONFIG).unwrap();
    pod.envoy.write(pod.dir.path(), "envoy");
    let env = pod.env();
    let mut sluice = spawn_as_ratelimit(pod.dir.path(), &pairs(&env));
    let upstream = Upstream::start().await;
    let envoy = Envoy::start(&bootstrap(&pod, sluice.grpc, upstream.addr)).await;
    let front = envoy.listener("front");

    // e2e UsageRateLimit: the upstream's answer costs 10 (what its ext_proc sets).
    let mut codes = Vec::new();
    for i in 0..4u64 {
        let r = http(
            front,
            "GET",
            "/get",
            &[("x-user-id", "one"), ("x-echo-x-cost", "10")],
        )
        .await
        .expect("request");
        codes.push(r.status);
        // Two calls per admitted request (before, and at stream end), one per refused one.
        wait_for_rls_calls(&envoy, 2 * (i + 1).min(3) + i.saturating_sub(2)).await;
    }
    assert_eq!(codes, vec![200, 200, 200, 429], "{}", envoy.log());
    assert!(envoy.stat("cluster.ratelimit_cluster.ssl.handshake").await > 0);

    // AI Gateway: request-time hits 1, then 40 tokens at stream end; limit 100 tokens.
    let before = envoy
        .stat("cluster.ratelimit_cluster.upstream_rq_completed")
        .await;
    let mut codes = Vec::new();
    for i in 0..4u64 {
        let r = http(
            front,
            "POST",
            "/v1/chat/completions",
            &[
                ("x-backend", "ai-gateway/backend-a"),
                ("x-model", "model-x"),
                ("x-echo-x-quota-cost", "40"),
            ],
        )
        .await
        .expect("request");
        codes.push(r.status);
        wait_for_rls_calls(&envoy, before + 2 * (i + 1).min(3) + i.saturating_sub(2)).await;
    }
    // 1+40, 1+40, 1+40 (123, past 100 by less than one request's usage), then refused.
    assert_eq!(codes, vec![200, 200, 200, 429], "{}", envoy.log());
    assert_eq!(
        tokio::task::spawn_blocking(move || sluice.terminate_and_wait())
            .await
            .unwrap(),
        Some(0)
    );
}
