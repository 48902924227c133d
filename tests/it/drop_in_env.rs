//! envoyproxy/ratelimit's environment variables alone start a working server: config from
//! RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, ports from GRPC_HOST/GRPC_PORT and
//! HOST/PORT, response headers, the Prometheus listener (in envoyproxy/ratelimit's names), the near-limit ratio, JSON logs, and
//! a note for each variable that is ignored.

use crate::support;

use serde_json::Value;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::prom_text::{parse_prometheus, sample};
use support::*;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 4}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_environment_starts_a_working_server() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ratelimit").join("config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), CONFIG).unwrap();

    let root_path = root.path().display().to_string();
    let envs = [
        ("RUNTIME_ROOT", root_path.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_APPDIRECTORY", "config"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        // The debug port (on by default here, 6070) on a free port too.
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("BACKEND_TYPE", ""),
        ("LOG_FORMAT", "json"),
        ("LOG_LEVEL", "INFO"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("NEAR_LIMIT_RATIO", "0.5"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
    ];
    // Blocks this test's thread until the child serves; nothing else runs meanwhile.
    let mut sluice = support::process::spawn_sluice(&["serve"], &envs);
    let (grpc, http, prom) = (
        sluice.grpc,
        sluice.http,
        sluice.prometheus.expect("prometheus"),
    );
    let log = sluice.log.clone();
    assert!(grpc.ip().is_loopback() && http.ip().is_loopback() && prom.ip().is_loopback());

    let mut client = RateLimitServiceClient::new(channel(grpc).await);
    let r = req("edge", vec![d(&[("client", "a")])]).to_proto();
    let mut last = None;
    for _ in 0..5 {
        last = Some(
            client
                .should_rate_limit(r.clone())
                .await
                .expect("answer")
                .into_inner(),
        );
    }
    let last = last.unwrap();
    assert_eq!(last.overall_code, Code::OverLimit as i32);
    let headers: Vec<(&str, &str)> = last
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit", "4"));
    assert_eq!(headers[1], ("RateLimit-Remaining", "0"));
    assert_eq!(http_get(http, "/healthcheck").await, (200, "OK".into()));

    // PROMETHEUS_ADDR serves /metrics in envoyproxy/ratelimit's names (its built-in statsd
    // mapping); NEAR_LIMIT_RATIO=0.5 puts hits 3 and 4 near the limit.
    let (code, text) = http_get(prom, "/metrics").await;
    assert_eq!(code, 200);
    let m = parse_prometheus(&text);
    let rule = |name: &str| sample(&m, name, &[("domain", "edge"), ("key1", "client")]);
    assert_eq!(rule("ratelimit_service_rate_limit_near_limit"), Some(2.0));
    assert_eq!(rule("ratelimit_service_rate_limit_over_limit"), Some(1.0));
    // The HTTP port keeps sluice's names.
    let m = parse_prometheus(&http_get(http, "/metrics").await.1);
    let rule = |name: &str| sample(&m, name, &[("domain", "edge"), ("key", "edge.client")]);
    assert_eq!(rule("sluice_rate_limit_near_limit_total"), Some(2.0));

    let lines = log.lock().unwrap().clone();
    let noted = |what: &str| lines.iter().any(|l| l.contains(what));
    assert!(noted("LOCAL_CACHE_SIZE_IN_BYTES: ignored"), "{lines:#?}");
    assert!(noted("config loaded"), "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "LOG_FORMAT=json: {lines:#?}"
    );
    assert_eq!(sluice.terminate_and_wait(), Some(0));
}

#[test]
fn unsupported_upstream_settings_stop_start_up() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .env_clear()
        .env("RUNTIME_ROOT", "/nonexistent")
        .env("BACKEND_TYPE", "memcache")
        .output()
        .expect("run sluice");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("BACKEND_TYPE=memcache"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
