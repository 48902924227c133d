//! The RLS side of Envoy Gateway's environment: mutual TLS from GRPC_SERVER_*, `/rlconfig` on
//! the debug port, and usage costs (`cost.response`) counted as envoyproxy/ratelimit counts
//! them, so the e2e `UsageRateLimit` sequence comes out 200, 200, 200, 429.

use super::{pairs, Pod, DOMAIN, ROUTE, USAGE_CONFIG};
use crate::support::certs::tls_channel;
use crate::support::http::http_get;
use crate::support::process::{spawn_as_ratelimit, spawn_serve};
use crate::support::*;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;

/// The descriptor of the usage rule as Envoy sends it, with its `hits_addend`: the request
/// cost (0) before the request, the response cost at stream end.
fn usage(hits: u64) -> sluice::proto::RateLimitRequest {
    req(
        DOMAIN,
        vec![d(&[(ROUTE, ROUTE), ("rule-0-match-0", "rule-0-match-0")]).hits(hits)],
    )
    .to_proto()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_costs_count_under_envoy_gateways_environment() {
    let pod = Pod::new(USAGE_CONFIG);
    let env = pod.env();
    let mut sluice = spawn_as_ratelimit(pod.dir.path(), &pairs(&env));

    // GRPC_SERVER_TLS_CA_CERT: a client certificate of that CA is required.
    let plain = RateLimitServiceClient::new(channel(sluice.grpc).await)
        .should_rate_limit(usage(0))
        .await;
    assert!(plain.is_err(), "plaintext gRPC answered");
    // Without a client certificate: refused (at the first call under TLS 1.3).
    let anonymous = async {
        let ch = tls_channel(sluice.grpc, &pod.ca.pem, None).await?;
        RateLimitServiceClient::new(ch)
            .should_rate_limit(usage(0))
            .await
            .map_err(|e| format!("{e:?}"))
    }
    .await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate was answered"
    );
    let ch = tls_channel(sluice.grpc, &pod.ca.pem, Some(&pod.envoy))
        .await
        .expect("mTLS connect");
    let mut client = RateLimitServiceClient::new(ch);

    // e2e UsageRateLimit: limit 21, request cost 0, response cost 10. Each admitted request
    // is charged 10 at stream end, answer ignored; the third charge takes the count to 30,
    // past the limit, and still counts, so the fourth request is refused.
    let mut codes = Vec::new();
    for _ in 0..4 {
        let r = client.should_rate_limit(usage(0)).await.expect("answer");
        let code = r.into_inner().overall_code;
        codes.push(code);
        if code == Code::Ok as i32 {
            client
                .should_rate_limit(usage(10))
                .await
                .expect("stream-end charge");
        }
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;
    assert_eq!(codes, vec![ok, ok, ok, over]);

    // The debug port serves /rlconfig (what `egctl x config ratelimit` reads).
    let debug = sluice.debug.expect("debug listener");
    let (code, body) = http_get(debug, "/rlconfig").await;
    assert_eq!(code, 200);
    assert!(body.contains("rule-0-match-0"), "{body}");
    assert_eq!(
        http_get(sluice.http, "/healthcheck").await,
        (200, "OK".into())
    );
    assert_eq!(sluice.terminate_and_wait(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluices_own_default_drops_a_charge_past_the_limit() {
    // The same rules under sluice's own --config: a rejected request consumes nothing, so the
    // third stream-end charge (20 + 10 > 21) is dropped and the fourth request passes. This is
    // why standing in for envoyproxy/ratelimit turns --charge-rejected on.
    let pod = Pod::new(USAGE_CONFIG);
    let config = pod.path("data/ratelimit/config");
    let mut sluice = spawn_serve(&config, &["--log-format", "json"], &[]);
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);
    let mut codes = Vec::new();
    for _ in 0..4 {
        let code = client
            .should_rate_limit(usage(0))
            .await
            .expect("answer")
            .into_inner()
            .overall_code;
        codes.push(code);
        client.should_rate_limit(usage(10)).await.expect("charge");
    }
    assert_eq!(codes, vec![Code::Ok as i32; 4]);
    assert_eq!(sluice.terminate_and_wait(), Some(0));
}
