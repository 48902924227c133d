//! USE_PROMETHEUS with Envoy Gateway's PROMETHEUS_MAPPER_YAML: the Prometheus listener serves
//! the names and labels its dashboards and e2e tests read, stats keys sanitised as
//! envoyproxy/ratelimit sanitises them; the HTTP port keeps sluice's names. A mapping file that
//! cannot be honoured stops start-up.

use super::{pairs, Pod, CIDR_ROUTE, DOMAIN, USAGE_CONFIG};
use crate::support::certs::tls_channel;
use crate::support::http::http_get;
use crate::support::process::spawn_as_ratelimit;
use crate::support::prom_text::{parse_prometheus, sample};
use crate::support::*;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_serves_envoy_gateways_names() {
    let pod = Pod::new(USAGE_CONFIG);
    let env = pod.env();
    let mut sluice = spawn_as_ratelimit(pod.dir.path(), &pairs(&env));
    let ch = tls_channel(sluice.grpc, &pod.ca.pem, Some(&pod.envoy))
        .await
        .expect("mTLS connect");
    let mut client = RateLimitServiceClient::new(ch);
    // Every client address falls in 0.0.0.0/0: limit 3, so the fourth call is over.
    let r = req(
        DOMAIN,
        vec![d(&[
            (CIDR_ROUTE, CIDR_ROUTE),
            ("masked_remote_address", "0.0.0.0/0"),
        ])],
    )
    .to_proto();
    for _ in 0..4 {
        client.should_rate_limit(r.clone()).await.expect("answer");
    }

    let (code, text) = http_get(sluice.prometheus.expect("prometheus"), "/metrics").await;
    assert_eq!(code, 200);
    let m = parse_prometheus(&text);
    let key1 = format!("{CIDR_ROUTE}_{CIDR_ROUTE}");
    let cidr = |name: &str| {
        sample(
            &m,
            name,
            &[
                ("domain", DOMAIN),
                ("key1", &key1),
                ("key2", "masked_remote_address_0_0_0_0/0"),
            ],
        )
    };
    assert_eq!(
        cidr("ratelimit_service_rate_limit_over_limit"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(cidr("ratelimit_service_rate_limit_total_hits"), Some(4.0));
    assert_eq!(cidr("ratelimit_service_rate_limit_within_limit"), Some(3.0));
    assert_eq!(
        sample(
            &m,
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")]
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(&m, "ratelimit_service_config_load_success", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "ratelimit_service_config_load_error", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &m,
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "service_error")]
        ),
        Some(0.0)
    );
    assert!(!text.contains("sluice_"), "{text}");

    // The HTTP port keeps sluice's own names.
    let (_, own) = http_get(sluice.http, "/metrics").await;
    let own = parse_prometheus(&own);
    assert_eq!(
        sample(
            &own,
            "sluice_rate_limit_over_limit_total",
            &[
                ("domain", DOMAIN),
                (
                    "key",
                    &format!("{DOMAIN}.{key1}.masked_remote_address_0.0.0.0/0")
                )
            ]
        ),
        Some(1.0)
    );
    assert_eq!(sluice.terminate_and_wait(), Some(0));
}

#[test]
fn a_mapping_file_that_cannot_be_honoured_stops_start_up() {
    let pod = Pod::new(USAGE_CONFIG);
    std::fs::write(
        pod.path("etc/statsd-exporter/conf.yaml"),
        "mappings:\n  - match: ratelimit.*\n    name: x\n    action: keep\n",
    )
    .unwrap();
    let env = pod.env();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .env_clear()
        .envs(pairs(&env))
        .output()
        .expect("run sluice");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("conf.yaml") && err.contains("action keep"),
        "{err}"
    );
}
