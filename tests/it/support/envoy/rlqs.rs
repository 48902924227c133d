//! Envoy's bootstrap with the `rate_limit_quota` filter (RLQS) instead of the RLS filter: one
//! listener, `front`, whose requests carrying `x-user` fall into the bucket
//! `{name: api, user: <x-user>}` of domain [`DOMAIN`]; sluice is the cluster `sluice`.

use std::net::SocketAddr;

use serde_json::{json, Value as Json};

use super::config::{cluster, front_listener};
use super::DOMAIN;

/// Envoy's log line (component `rate_limit_quota` at debug) once an assignment from the RLQS
/// server is in force on the worker threads.
pub const RLQS_APPLIED: &str = "RLQS buckets cache written to TLS";

/// The bootstrap: requests without `x-user` match no bucket and pass; a new bucket's first
/// request passes (`no_assignment_behavior`), an expired assignment falls back to allowing
/// everything for a minute, and a denied request is answered 429.
pub fn bootstrap_rlqs(rlqs: &[SocketAddr], upstream: SocketAddr) -> Json {
    let header = |name: &str| {
        json!({"name": name, "typed_config": {
            "@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
            "header_name": name
        }})
    };
    let settings = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
        "bucket_id_builder": {"bucket_id_builder": {
            "name": {"string_value": "api"},
            "user": {"custom_value": header("x-user")}
        }},
        "reporting_interval": "1s",
        "deny_response_settings": {"http_status": {"code": 429}},
        "no_assignment_behavior": {"fallback_rate_limit": {"blanket_rule": "ALLOW_ALL"}},
        "expired_assignment_behavior": {
            "fallback_rate_limit": {"blanket_rule": "ALLOW_ALL"},
            "expired_assignment_behavior_timeout": "60s"
        }
    });
    let filter = json!({
        "name": "envoy.filters.http.rate_limit_quota",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig",
            "rlqs_server": {"envoy_grpc": {"cluster_name": "sluice"}},
            "domain": DOMAIN,
            "bucket_matchers": {"matcher_list": {"matchers": [{
                "predicate": {"single_predicate": {
                    "input": header("x-user"),
                    "value_match": {"safe_regex": {"google_re2": {}, "regex": ".+"}}
                }},
                "on_match": {"action": {"name": "rate_limit_quota", "typed_config": settings}}
            }]}}
        }
    });
    front_listener(
        vec![filter],
        json!([{"match": {"prefix": "/"}, "route": {"cluster": "upstream"}}]),
        vec![
            cluster("upstream", &[upstream], false),
            cluster("sluice", rlqs, true),
        ],
    )
}
