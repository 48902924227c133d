//! Envoy's bootstrap as the tests write it: one listener in front of the upstream, the rate
//! limit filter with the settings a test varies ([`Filter`]), its routes, and the clusters of
//! the upstream and of sluice (the RLS).

use std::net::SocketAddr;

use serde_json::{json, Value as Json};

use super::DOMAIN;

/// The settings of Envoy's rate limit filter that the tests vary.
#[derive(Clone, Copy, Debug)]
pub struct Filter {
    pub failure_mode_deny: bool,
    /// `status_on_error`: the HTTP status Envoy answers when the RLS call fails and
    /// `failure_mode_deny` is set (Envoy's default is 500).
    pub status_on_error: Option<u16>,
}

impl Default for Filter {
    /// Fail closed: an RLS error is a visible 500 in a test, never a silent pass.
    fn default() -> Self {
        Filter {
            failure_mode_deny: true,
            status_on_error: None,
        }
    }
}

/// A bootstrap with one listener, `front`, whose HTTP filters are header_to_metadata (request
/// header `x-limit-override`, base64 of a serialized `google.protobuf.Value`, into dynamic
/// metadata `sluice.override/limit`), the rate limit filter (domain [`DOMAIN`], x-ratelimit
/// headers DRAFT_VERSION_03) and the router; `routes` are the routes of its one virtual host,
/// sent to the cluster `upstream`. The cluster `sluice` is the RLS.
pub fn bootstrap(rls: SocketAddr, upstream: SocketAddr, filter: Filter, routes: Json) -> Json {
    bootstrap_rls(&[rls], upstream, filter, routes)
}

/// [`bootstrap`] with several sluice instances as the endpoints of the RLS cluster `sluice`
/// (Envoy's default load balancing: round robin).
pub fn bootstrap_rls(
    rls: &[SocketAddr],
    upstream: SocketAddr,
    filter: Filter,
    routes: Json,
) -> Json {
    let mut ratelimit = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        "domain": DOMAIN,
        // Generous, so a loaded CI machine cannot turn a slow answer into an RLS error.
        "timeout": "5s",
        "failure_mode_deny": filter.failure_mode_deny,
        "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
        "rate_limit_service": {
            "transport_api_version": "V3",
            "grpc_service": {"envoy_grpc": {"cluster_name": "sluice"}}
        }
    });
    if let Some(code) = filter.status_on_error {
        ratelimit["status_on_error"] = json!({ "code": code });
    }
    let filters = vec![
        json!({
            "name": "envoy.filters.http.header_to_metadata",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
                "request_rules": [{
                    "header": "x-limit-override",
                    "on_header_present": {
                        "metadata_namespace": "sluice.override",
                        "key": "limit",
                        "type": "PROTOBUF_VALUE",
                        "encode": "BASE64"
                    },
                    "remove": true
                }]
            }
        }),
        json!({"name": "envoy.filters.http.ratelimit", "typed_config": ratelimit}),
    ];
    let mut config = front_listener(
        filters,
        routes,
        vec![
            cluster("upstream", &[upstream], false),
            cluster("sluice", rls, true),
        ],
    );
    // The client address is the last x-forwarded-for entry, so a test can play several
    // clients from 127.0.0.1.
    config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["use_remote_address"] = json!(false);
    config
}

/// The skeleton of every bootstrap the tests write: the admin port and one listener, `front`,
/// on free loopback ports; its HTTP connection manager runs `http_filters` then the router over
/// one virtual host of `routes`; the static `clusters`.
pub fn front_listener(http_filters: Vec<Json>, routes: Json, clusters: Vec<Json>) -> Json {
    let mut http_filters = http_filters;
    http_filters.push(json!({
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
    }));
    json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [{
                "name": "front",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "front",
                        "route_config": {"virtual_hosts": [{
                            "name": "all",
                            "domains": ["*"],
                            "routes": routes
                        }]},
                        "http_filters": http_filters
                    }
                }]}]
            }],
            "clusters": clusters
        }
    })
}

/// A static cluster of `addrs` (HTTP/2 for gRPC).
pub fn cluster(name: &str, addrs: &[SocketAddr], http2: bool) -> Json {
    let endpoints: Vec<Json> = addrs
        .iter()
        .map(|a| {
            json!({"endpoint": {"address": {"socket_address": {
                "address": a.ip().to_string(),
                "port_value": a.port()
            }}}})
        })
        .collect();
    let mut c = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": endpoints}]
        }
    });
    if http2 {
        c["typed_extension_protocol_options"] = json!({
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}}
            }
        });
    }
    c
}

/// A route on `prefix` to the upstream whose descriptors come from the route's own
/// `rate_limits` (Envoy's classic place; it ignores `hits_addend` there in 1.40).
pub fn route(prefix: &str, rate_limits: Json) -> Json {
    json!({
        "match": {"prefix": prefix},
        "route": {"cluster": "upstream", "rate_limits": rate_limits}
    })
}

/// A route on `prefix` to the upstream whose descriptors come from the rate limit filter's
/// per-route config (`RateLimitPerRoute.rate_limits`), where `hits_addend` and
/// `apply_on_stream_done` take effect.
pub fn route_per_filter(prefix: &str, rate_limits: Json) -> Json {
    json!({
        "match": {"prefix": prefix},
        "route": {"cluster": "upstream"},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
            "rate_limits": rate_limits
        }}
    })
}
