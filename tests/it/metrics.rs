//! Metrics scraped over HTTP (`/metrics`, Prometheus text) after a known sequence of requests
//! carry exact values: the per-rule counters as envoyproxy/ratelimit computes them (with
//! `detailed_metric`, `value_to_metric`, shadow mode and the cardinality cap), request counts
//! and latency histograms per result code, config loads, generation and store size.

use crate::support;

use sluice::proto::rate_limit_response::Code;
use support::prom_text::{parse_prometheus, sample};
use support::*;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    value: alice
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: "/api/*"
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
"#;

async fn send(s: &Sluice, k: &str, v: &str, times: usize) -> Vec<Code> {
    let mut codes = Vec::new();
    for _ in 0..times {
        let r = s
            .call(req("edge", vec![d(&[(k, v)])]).to_proto())
            .await
            .expect("answer");
        codes.push(Code::try_from(r.overall_code).unwrap());
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrape_has_exact_counters() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--metrics-max-keys", "3"],
    )
    .await;
    let over = |codes: &[Code]| codes.iter().filter(|c| **c == Code::OverLimit).count();
    // 10 per minute: 10 allowed (the 9th and 10th above 80%), 2 rejected.
    assert_eq!(over(&send(&s, "client", "alice", 12).await), 2);
    // detailed_metric: one stats key per value.
    assert_eq!(over(&send(&s, "path", "/api/a", 3).await), 1);
    assert_eq!(over(&send(&s, "path", "/api/b", 1).await), 0);
    // Shadow mode: over the limit but answered OK.
    assert_eq!(over(&send(&s, "shadowed", "x", 3).await), 0);
    // value_to_metric on a default rule; the third per-value key (carol) is past the cap of
    // 3 and counts on the rule's own key.
    send(&s, "user", "bob", 1).await;
    send(&s, "user", "carol", 2).await;
    send(&s, "free", "x", 1).await;
    let bad = s
        .call(req("", vec![d(&[("client", "alice")])]).to_proto())
        .await;
    assert_eq!(bad.unwrap_err().code(), tonic::Code::InvalidArgument);

    let (status, text) = s.http_get("/metrics").await;
    assert_eq!(status, 200);
    let m = parse_prometheus(&text);
    let rule = |name: &str, key: &str| {
        sample(
            &m,
            &format!("sluice_rate_limit_{name}_total"),
            &[("domain", "edge"), ("key", key)],
        )
        .unwrap_or_else(|| panic!("no {name} for {key} in:\n{text}"))
    };
    // (key, total_hits, over_limit, near_limit, within_limit, shadow_mode)
    let want: [(&str, f64, f64, f64, f64, f64); 6] = [
        ("edge.client_alice", 12.0, 2.0, 2.0, 10.0, 0.0),
        ("edge.path_/api/a", 3.0, 1.0, 1.0, 2.0, 0.0),
        ("edge.path_/api/b", 1.0, 0.0, 0.0, 1.0, 0.0),
        ("edge.shadowed", 3.0, 2.0, 1.0, 1.0, 2.0),
        ("edge.user_bob", 1.0, 0.0, 0.0, 1.0, 0.0),
        ("edge.user", 2.0, 0.0, 0.0, 2.0, 0.0),
    ];
    for (key, hits, over, near, within, shadow) in want {
        assert_eq!(rule("total_hits", key), hits, "total_hits {key}");
        assert_eq!(rule("over_limit", key), over, "over_limit {key}");
        assert_eq!(rule("near_limit", key), near, "near_limit {key}");
        assert_eq!(rule("within_limit", key), within, "within_limit {key}");
        assert_eq!(rule("shadow_mode", key), shadow, "shadow_mode {key}");
        assert_eq!(rule("over_limit_with_local_cache", key), 0.0);
    }
    // Nothing else: no per-value key past the cap, none for the unlimited rule.
    let keys = m
        .keys()
        .filter(|(n, _)| n == "sluice_rate_limit_total_hits_total")
        .count();
    assert_eq!(keys, want.len(), "{text}");
    assert_eq!(
        sample(&m, "sluice_stats_keys_overflow_total", &[]),
        Some(2.0)
    );

    let rpc =
        |name: &str, code: &str| sample(&m, name, &[("code", code), ("method", "ShouldRateLimit")]);
    assert_eq!(rpc("sluice_rpc_requests_total", "OK"), Some(20.0));
    assert_eq!(rpc("sluice_rpc_requests_total", "OVER_LIMIT"), Some(3.0));
    assert_eq!(
        rpc("sluice_rpc_requests_total", "INVALID_ARGUMENT"),
        Some(1.0)
    );
    assert_eq!(rpc("sluice_rpc_duration_seconds_count", "OK"), Some(20.0));
    assert_eq!(
        sample(
            &m,
            "sluice_rpc_duration_seconds_bucket",
            &[
                ("code", "OVER_LIMIT"),
                ("method", "ShouldRateLimit"),
                ("le", "+Inf")
            ]
        ),
        Some(3.0)
    );
    // One store decision per request with a limit (not the unlimited one, not the invalid one).
    assert_eq!(
        sample(
            &m,
            "sluice_store_duration_seconds_count",
            &[("backend", "memory")]
        ),
        Some(22.0)
    );
    assert_eq!(
        sample(&m, "sluice_config_loads_total", &[("result", "success")]),
        Some(1.0)
    );
    assert_eq!(sample(&m, "sluice_config_generation", &[]), Some(1.0));
    // alice, /api/a, /api/b, shadowed, bob, carol.
    assert_eq!(
        sample(&m, "sluice_store_memory_entries", &[("store", "primary")]),
        Some(6.0)
    );
    assert!(!text.contains("otel_scope"), "{text}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_ratio_is_configurable() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--near-limit-ratio", "0.5"],
    )
    .await;
    send(&s, "client", "alice", 7).await;
    let m = parse_prometheus(&s.http_get("/metrics").await.1);
    // Threshold 5 of 10: the 6th and 7th hits are near the limit.
    assert_eq!(
        sample(
            &m,
            "sluice_rate_limit_near_limit_total",
            &[("domain", "edge"), ("key", "edge.client_alice")]
        ),
        Some(2.0)
    );
    s.stop().await;
}

/// The sample Grafana dashboard queries only metrics a server exports (and README documents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grafana_dashboard_uses_exported_metrics() {
    let dashboard = include_str!("../../dashboards/sluice-grafana.json");
    let readme = include_str!("../../README.md");
    let v: serde_json::Value = serde_json::from_str(dashboard).expect("dashboard is JSON");
    let mut names = std::collections::BTreeSet::new();
    for p in v["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(i) = rest.find("sluice_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + name.len()..];
                names.insert(name);
            }
        }
    }
    assert!(names.len() >= 10, "{names:?}");

    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    send(&s, "client", "alice", 11).await;
    let m = parse_prometheus(&s.http_get("/metrics").await.1);
    let exported: std::collections::BTreeSet<&str> = m.keys().map(|(n, _)| n.as_str()).collect();
    for name in &names {
        let base = name.trim_end_matches("_bucket");
        assert!(readme.contains(base), "{base} is not in README.md");
        // Redis and store-error series exist only with Redis, or after an error.
        if base.starts_with("sluice_store_redis_") || base == "sluice_store_errors_total" {
            continue;
        }
        assert!(
            exported.contains(name.as_str()),
            "{name} is not exported: {exported:?}"
        );
    }
    s.stop().await;
}
