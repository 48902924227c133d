//! A Redis outage is handled by the failure policy and shown in metrics, not by failing health
//! (which would unready every replica at once), unless `--health-requires-store` asks for it.

use crate::support;
use crate::support::redis as redis_support;

use std::sync::Arc;

use redis_support::RedisNode;
use sluice::clock::ManualClock;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::poll::eventually;
use support::prom_text::{parse_prometheus, sample};
use support::*;

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";

async fn start(config: &std::path::Path, redis: &RedisNode, extra: &[&str]) -> sluice::app::Server {
    let url = redis.url();
    let mut flags = vec![
        "--redis-url",
        url.as_str(),
        "--on-store-error",
        "allow",
        "--clock",
        "local",
        "--redis-breaker-failures",
        "1",
    ];
    flags.extend(extra);
    let mut args = serve_args(config, StoreKind::Memory, &flags);
    args.backend = sluice::settings::Backend::Redis;
    sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("server starts")
}

async fn metric(server: &sluice::app::Server, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (_, text) = http_get(server.http_addr, "/metrics").await;
    sample(&parse_prometheus(&text), name, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_shows_in_metrics_and_only_opt_in_health() {
    let mut redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let plain = start(&config, &redis, &[]).await;
    let strict = start(&config, &redis, &["--health-requires-store"]).await;
    for s in [&plain, &strict] {
        eventually("redis connected and serving", || async {
            let up = metric(s, "sluice_store_redis_connected", &[]).await == Some(1.0);
            (up && http_get(s.http_addr, "/healthcheck").await.0 == 200).then_some(())
        })
        .await;
        assert_eq!(
            metric(s, "sluice_store_redis_breaker_open", &[]).await,
            Some(0.0)
        );
    }

    redis.kill();
    let r = req("d", vec![d(&[("k", "x")])]).to_proto();
    for s in [&plain, &strict] {
        let mut client = RateLimitServiceClient::new(channel(s.grpc_addr).await);
        // The failure policy (allow) answers; the error and the open breaker show in metrics.
        let answer = client
            .should_rate_limit(r.clone())
            .await
            .expect("answered by the policy");
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
        eventually("breaker open and redis down in metrics", || async {
            let open = metric(s, "sluice_store_redis_breaker_open", &[]).await == Some(1.0);
            let down = metric(s, "sluice_store_redis_connected", &[]).await == Some(0.0);
            (open && down).then_some(())
        })
        .await;
        let (_, text) = http_get(s.http_addr, "/metrics").await;
        let errors: f64 = parse_prometheus(&text)
            .iter()
            .filter(|((n, l), _)| {
                n == "sluice_store_errors_total"
                    && l.get("backend").map(String::as_str) == Some("redis")
                    && l.get("policy").map(String::as_str) == Some("allow")
            })
            .map(|(_, v)| v)
            .sum();
        assert!(errors >= 1.0, "{text}");
    }
    assert_eq!(http_get(plain.http_addr, "/healthcheck").await.0, 200);
    eventually("opt-in health NOT SERVING", || async {
        (http_get(strict.http_addr, "/healthcheck").await == (503, "NOT SERVING".into()))
            .then_some(())
    })
    .await;

    redis.restart();
    eventually("opt-in health back", || async {
        (http_get(strict.http_addr, "/healthcheck").await.0 == 200).then_some(())
    })
    .await;
    for s in [plain, strict] {
        s.shutdown();
        s.wait().await.unwrap();
    }
}
