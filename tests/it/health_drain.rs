//! Readiness and shutdown: gRPC health and `/healthcheck` follow the config and the drain;
//! `/rlconfig` shows the loaded rules; the real binary drains on SIGTERM and exits 0.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice::proto::rate_limit_response::Code;
use sluice::service::ServiceState;
use support::*;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000, name: big}
"#;

async fn health(client: &mut HealthClient<tonic::transport::Channel>, service: &str) -> i32 {
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status
}

/// gRPC health is published asynchronously after a reload: wait (bounded) until it says
/// `want`.
async fn health_becomes(client: &mut HealthClient<tonic::transport::Channel>, want: ServingStatus) {
    for _ in 0..500 {
        if health(client, "").await == want as i32
            && health(client, "ratelimit").await == want as i32
            && health(client, sluice::service::rlqs::SERVICE_NAME).await == want as i32
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gRPC health never became {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_serving_until_a_config_loads() {
    let s = Sluice::start(StoreKind::Memory, None, &[]).await;
    let mut h = HealthClient::new(channel(s.server.grpc_addr).await);
    for service in [
        "",
        "ratelimit",
        sluice::service::rlqs::SERVICE_NAME,
        "sluice.v1.RateLimiter",
    ] {
        assert_eq!(
            health(&mut h, service).await,
            ServingStatus::NotServing as i32
        );
    }
    assert_eq!(s.http_get("/healthcheck").await.0, 503);
    assert_eq!(s.http_get("/rlconfig").await.0, 503);
    let r = req("d", vec![d(&[("k", "x")])]).to_proto();
    let e = s.call(r.clone()).await.expect_err("no config");
    assert_eq!(e.code(), tonic::Code::Unavailable);

    // A bad config changes nothing.
    s.write_config("domain: d\ndescriptors: [oops]\n");
    assert!(!s.server.reload());
    assert_eq!(
        s.http_get("/healthcheck").await,
        (503, "NOT SERVING".into())
    );

    s.write_config(CONFIG);
    assert!(s.server.reload());
    health_becomes(&mut h, ServingStatus::Serving).await;
    assert_eq!(s.http_get("/healthcheck").await, (200, "OK".into()));
    let (code, body) = s.http_get("/rlconfig").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("d.k: unit=MINUTE requests_per_unit=1000000 algorithm=fixed_window name=big"),
        "{body}"
    );
    let answer = s.call(r.clone()).await.expect("answer");
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(answer.statuses[0].limit_remaining, 999_999);
    // A request with a deadline (`grpc-timeout`, as Envoy sends) is answered within it.
    let mut with_deadline = tonic::Request::new(r.clone());
    with_deadline.set_timeout(Duration::from_secs(30));
    let answer = s.client.clone().should_rate_limit(with_deadline).await;
    assert_eq!(
        answer.expect("answer").into_inner().statuses[0].limit_remaining,
        999_998
    );

    // A later bad config keeps the running rules and readiness.
    s.write_config("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n");
    assert!(!s.server.reload());
    assert_eq!(s.http_get("/healthcheck").await.0, 200);
    assert_eq!(
        s.call(r).await.expect("answer").statuses[0].limit_remaining,
        999_997
    );
    s.stop().await;
}

#[tokio::test]
async fn draining_turns_health_not_serving() {
    let reporter = tonic_health::server::HealthReporter::new();
    let svc = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
    let state = ServiceState::new(reporter);
    let check = |name: &'static str| {
        let req = tonic::Request::new(HealthCheckRequest {
            service: name.into(),
        });
        async {
            use tonic_health::pb::health_server::Health;
            svc.check(req).await.expect("check").into_inner().status
        }
    };
    state.set_draining_if(false).await;
    assert!(!state.is_serving());
    assert_eq!(check("ratelimit").await, ServingStatus::NotServing as i32);
    state.mark_config_loaded();
    state.publish().await;
    assert!(state.is_serving());
    assert_eq!(check("").await, ServingStatus::Serving as i32);
    assert_eq!(check("ratelimit").await, ServingStatus::Serving as i32);
    state.set_draining().await;
    assert!(!state.is_serving());
    assert_eq!(check("").await, ServingStatus::NotServing as i32);
    assert_eq!(check("ratelimit").await, ServingStatus::NotServing as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut bin = Binary::start(&config, &[]);
    assert_eq!(http_get(bin.http_addr, "/healthcheck").await.0, 200);

    let ch = channel(bin.grpc_addr).await;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut client =
            sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(ch.clone());
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            let r = req("d", vec![d(&[("k", "x")])]).to_proto();
            loop {
                match client.should_rate_limit(r.clone()).await {
                    Ok(resp) => {
                        let resp = resp.into_inner();
                        // Every answer, even during the drain, is a whole, correct one.
                        assert_eq!(resp.overall_code, Code::Ok as i32);
                        assert_eq!(resp.statuses.len(), 1);
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    // Once the drain closes the connection, requests fail to be sent.
                    Err(e) => return e,
                }
            }
        }));
    }
    // Let the load run before the signal (bounded wait on progress, not on time).
    for _ in 0..1000 {
        if answered.load(Ordering::SeqCst) >= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        answered.load(Ordering::SeqCst) >= 200,
        "requests were answered"
    );
    bin.terminate();
    let code = tokio::task::spawn_blocking(move || {
        let code = bin.wait_exit();
        (code, bin.log.lock().unwrap().clone())
    })
    .await
    .unwrap();
    assert_eq!(code.0, Some(0), "log: {:#?}", code.1);
    assert!(
        code.1
            .iter()
            .any(|l| l.contains("draining in-flight requests")),
        "{:#?}",
        code.1
    );
    for t in tasks {
        let e = t.await.expect("task");
        assert!(
            // A refused request surfaces as a transport-level code; which one depends on
            // where the GOAWAY lands (h2 reports `GoAway(NO_ERROR)` as INTERNAL).
            matches!(
                e.code(),
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
            ) || (e.code() == tonic::Code::Internal && format!("{e:?}").contains("GoAway")),
            "unexpected error after SIGTERM: {e:?}"
        );
    }
}
