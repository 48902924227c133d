//! envoyproxy/ratelimit's environment variables alone start a working server: config from
//! RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, ports from GRPC_HOST/GRPC_PORT and
//! HOST/PORT, response headers, the Prometheus listener, the near-limit ratio, JSON logs, and
//! a note for each variable that is ignored.

mod support;
#[path = "support/ops.rs"]
mod ops;

use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use ops::{parse_prometheus, sample};
use serde_json::Value;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
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

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .env_clear()
        .env("RUNTIME_ROOT", root.path())
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("RUNTIME_APPDIRECTORY", "config")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", "0")
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("BACKEND_TYPE", "")
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "INFO")
        .env("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
        .env("USE_PROMETHEUS", "true")
        .env("PROMETHEUS_ADDR", "127.0.0.1:0")
        .env("NEAR_LIMIT_RATIO", "0.5")
        .env("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
        .env("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let f = &v["fields"];
                    if f["message"] == "sluice serving" {
                        let addr = |k: &str| f[k].as_str().and_then(|s| s.parse::<SocketAddr>().ok());
                        let _ = tx.send((addr("grpc"), addr("http"), addr("prometheus")));
                    }
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    let (grpc, http, prom) = tokio::task::spawn_blocking(move || {
        rx.recv_timeout(std::time::Duration::from_secs(60))
    })
    .await
    .unwrap()
    .unwrap_or_else(|_| panic!("sluice did not start; log: {:?}", log.lock().unwrap()));
    let (grpc, http, prom) = (grpc.unwrap(), http.unwrap(), prom.unwrap());
    assert!(grpc.ip().is_loopback() && http.ip().is_loopback() && prom.ip().is_loopback());

    let mut client = RateLimitServiceClient::new(channel(grpc).await);
    let r = req("edge", vec![d(&[("client", "a")])]).to_proto();
    let mut last = None;
    for _ in 0..5 {
        last = Some(client.should_rate_limit(r.clone()).await.expect("answer").into_inner());
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

    // PROMETHEUS_ADDR serves /metrics; NEAR_LIMIT_RATIO=0.5 puts hits 3 and 4 near the limit.
    let (code, text) = http_get(prom, "/metrics").await;
    assert_eq!(code, 200);
    let m = parse_prometheus(&text);
    let rule = |name: &str| {
        sample(&m, name, &[("domain", "edge"), ("key", "edge.client")])
    };
    assert_eq!(rule("sluice_rate_limit_near_limit_total"), Some(2.0));
    assert_eq!(rule("sluice_rate_limit_over_limit_total"), Some(1.0));

    let lines = log.lock().unwrap().clone();
    let noted = |what: &str| lines.iter().any(|l| l.contains(what));
    assert!(noted("LOCAL_CACHE_SIZE_IN_BYTES: ignored"), "{lines:#?}");
    assert!(noted("config loaded"), "{lines:#?}");
    assert!(
        lines.iter().all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "LOG_FORMAT=json: {lines:#?}"
    );
    let _ = child.kill();
    let _ = child.wait();
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
