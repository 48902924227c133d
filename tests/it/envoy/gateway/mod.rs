//! sluice started exactly as Envoy Gateway starts envoyproxy/ratelimit (`/bin/ratelimit`, no
//! arguments, the environment of its `resource.go`), with rules in the shape its translator
//! writes them (`internal/xds/translator/testdata/out/ratelimit-config/`). Only the listen
//! addresses are moved to free loopback ports, and the xDS variables are left out (rules come
//! from RUNTIME_ROOT here).

mod envoy;
mod metrics;
mod rls;

use std::path::PathBuf;

use crate::support::certs::{Ca, Leaf, Usage};

/// The usage rule of Envoy Gateway's e2e `UsageRateLimit` (21 per hour on `x-user-id: one`),
/// as its translator writes a rule with one header match (its testdata prints a `name:` line
/// too, which is not part of envoyproxy/ratelimit's file format), and a CIDR rule on every
/// address.
pub const USAGE_CONFIG: &str = r#"domain: gateway-conformance-infra/same-namespace/http
descriptors:
  - key: httproute/gateway-conformance-infra/usage-rate-limit/rule/0/match/0/*
    value: httproute/gateway-conformance-infra/usage-rate-limit/rule/0/match/0/*
    rate_limit: null
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit:
          requests_per_unit: 21
          unit: HOUR
          unlimited: false
          name: ""
          replaces: []
        descriptors: []
        shadow_mode: false
        quota_mode: false
        detailed_metric: false
        value_to_metric: false
        share_threshold: false
    shadow_mode: false
    quota_mode: false
    detailed_metric: false
    value_to_metric: false
    share_threshold: false
  - key: httproute/gateway-conformance-infra/cidr-ratelimit/rule/0/match/0/*
    value: httproute/gateway-conformance-infra/cidr-ratelimit/rule/0/match/0/*
    rate_limit: null
    descriptors:
      - key: masked_remote_address
        value: 0.0.0.0/0
        rate_limit:
          requests_per_unit: 3
          unit: HOUR
          unlimited: false
          name: ""
          replaces: []
        descriptors: []
        shadow_mode: false
        quota_mode: false
        detailed_metric: false
        value_to_metric: false
        share_threshold: false
    shadow_mode: false
    quota_mode: false
    detailed_metric: false
    value_to_metric: false
    share_threshold: false
"#;

pub const DOMAIN: &str = "gateway-conformance-infra/same-namespace/http";
pub const ROUTE: &str = "httproute/gateway-conformance-infra/usage-rate-limit/rule/0/match/0/*";
pub const CIDR_ROUTE: &str = "httproute/gateway-conformance-infra/cidr-ratelimit/rule/0/match/0/*";

/// A directory laid out as Envoy Gateway's pod: `/data/ratelimit/config/` (the rules),
/// `/certs/{tls.crt,tls.key,ca.crt}` (sluice's server certificate and the CA of its clients),
/// `/etc/statsd-exporter/conf.yaml` (its statsd mapping), and the client certificate Envoy
/// presents.
pub struct Pod {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub envoy: Leaf,
}

impl Pod {
    pub fn new(config: &str) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("data/ratelimit/config");
        std::fs::create_dir_all(&rules).unwrap();
        std::fs::write(rules.join("gateway.yaml"), config).unwrap();
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let ca = Ca::new("envoy-gateway");
        ca.write(&certs, "ca");
        ca.issue(&["localhost", "127.0.0.1"], Usage::Server, false)
            .write(&certs, "tls");
        let envoy = ca.issue(&["envoy"], Usage::Client, false);
        let mapper = dir.path().join("etc/statsd-exporter");
        std::fs::create_dir_all(&mapper).unwrap();
        std::fs::write(
            mapper.join("conf.yaml"),
            include_str!("../../../fixtures/envoy-gateway-statsd-mapper.yaml"),
        )
        .unwrap();
        Pod { dir, ca, envoy }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Envoy Gateway's variables (resource.go, Prometheus on), with this pod's paths and free
    /// ports; JSON logs so the test can read the bound addresses.
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |s: &str| self.path(s).display().to_string();
        [
            ("RUNTIME_ROOT", p("data")),
            ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
            ("RUNTIME_IGNOREDOTFILES", "true".into()),
            ("RUNTIME_WATCH_ROOT", "false".into()),
            ("LOG_LEVEL", "info".into()),
            ("USE_STATSD", "false".into()),
            ("GRPC_SERVER_USE_TLS", "true".into()),
            ("GRPC_SERVER_TLS_CERT", p("certs/tls.crt")),
            ("GRPC_SERVER_TLS_KEY", p("certs/tls.key")),
            ("GRPC_SERVER_TLS_CA_CERT", p("certs/ca.crt")),
            ("USE_PROMETHEUS", "true".into()),
            ("PROMETHEUS_ADDR", "127.0.0.1:0".into()),
            ("PROMETHEUS_MAPPER_YAML", p("etc/statsd-exporter/conf.yaml")),
            // Test-only: free ports instead of 8081, 8080, 6070; JSON logs.
            ("GRPC_HOST", "127.0.0.1".into()),
            ("GRPC_PORT", "0".into()),
            ("HOST", "127.0.0.1".into()),
            ("PORT", "0".into()),
            ("DEBUG_HOST", "127.0.0.1".into()),
            ("DEBUG_PORT", "0".into()),
            ("LOG_FORMAT", "json".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// Borrowed pairs for `Command::envs`.
pub fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
