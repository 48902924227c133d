//! Overload: with the store stalled (a real Redis under `CLIENT PAUSE ... WRITE`, which holds
//! every script), at most `--max-in-flight` requests wait; the rest of a flood gets
//! RESOURCE_EXHAUSTED at once, and everything recovers when the store answers again. With a
//! short store timeout, a stalled store costs nothing that stays: every request is answered.

use crate::support;
use crate::support::redis as redis_support;
use crate::support::req_k;

use std::sync::Arc;

use redis_support::RedisNode;
use sluice::clock::ManualClock;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::poll::wait_until_async;
use support::{channel, T0};

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

async fn start(redis: &RedisNode, flags: &[&str]) -> (sluice::app::Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let url = redis.url();
    let mut all = vec![
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--clock",
        "local",
    ];
    all.extend_from_slice(flags);
    let args = crate::support::parse_serve(&config, &all);
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("starts");
    (server, dir)
}

/// A server whose store waits as long as it takes (only the in-flight bound may refuse), with
/// `flags`, and a client once Redis answers.
async fn start_patient(
    redis: &RedisNode,
    flags: &[&str],
) -> (
    sluice::app::Server,
    tempfile::TempDir,
    RateLimitServiceClient<tonic::transport::Channel>,
) {
    let mut all = flags.to_vec();
    all.extend([
        "--redis-command-timeout",
        "60s",
        "--redis-connect-timeout",
        "60s",
    ]);
    let (server, dir) = start(redis, &all).await;
    // The shared pool (what `/json` on the main runtime uses): a gRPC answer proves only that
    // a serving thread's own connection is up, which may come first.
    tokio::time::timeout(std::time::Duration::from_secs(30), server.store_ready())
        .await
        .expect("the store is ready within 30 s");
    let client = RateLimitServiceClient::new(channel(server.grpc_addr).await);
    ready(&client).await;
    (server, dir, client)
}

async fn ready(client: &RateLimitServiceClient<tonic::transport::Channel>) {
    wait_until_async("Redis to be connected", || {
        let mut c = client.clone();
        async move {
            c.should_rate_limit(req_k(&[format!("client-{}", 0)]).to_proto())
                .await
                .is_ok()
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_beyond_the_bound_is_refused_at_once_and_recovers() {
    let redis = RedisNode::start();
    let (server, _dir, client) = start_patient(&redis, &["--max-in-flight", "4"]).await;

    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]), "OK");
    let calls: Vec<_> = (1..=20)
        .map(|i| {
            let mut c = client.clone();
            tokio::spawn(async move {
                c.should_rate_limit(req_k(&[format!("client-{i}")]).to_proto())
                    .await
            })
        })
        .collect();
    wait_until_async("16 refusals and 4 requests waiting", || {
        let f = server.in_flight();
        let finished = calls.iter().filter(|c| c.is_finished()).count();
        let done = f.rejected() == 16 && f.current() == 4 && finished == 16;
        async move { done }
    })
    .await;
    let mut waiting = Vec::new();
    let mut refused = 0;
    for call in calls {
        if call.is_finished() {
            let e = call.await.unwrap().expect_err("refused");
            assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("--max-in-flight"), "{}", e.message());
            refused += 1;
        } else {
            waiting.push(call);
        }
    }
    assert_eq!((refused, waiting.len()), (16, 4));

    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    for call in waiting {
        let r = call.await.unwrap().expect("answered once Redis is back");
        assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
    }
    assert_eq!(server.in_flight().current(), 0);
    let mut c = client.clone();
    let r = c
        .should_rate_limit(req_k(&[format!("client-{}", 99)]).to_proto())
        .await
        .expect("recovered");
    assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_slower_than_its_timeout_leaves_nothing_waiting() {
    let redis = RedisNode::start();
    let (server, _dir) = start(
        &redis,
        &["--max-in-flight", "8", "--redis-command-timeout", "100ms"],
    )
    .await;
    let client = RateLimitServiceClient::new(channel(server.grpc_addr).await);
    ready(&client).await;

    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]), "OK");
    for wave in 0..5 {
        let calls: Vec<_> = (0..40)
            .map(|i| {
                let mut c = client.clone();
                tokio::spawn(async move {
                    c.should_rate_limit(req_k(&[format!("client-{}", wave * 100 + i)]).to_proto())
                        .await
                })
            })
            .collect();
        for call in calls {
            let e = call.await.unwrap().expect_err("the store is stalled");
            assert!(
                matches!(
                    e.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ),
                "{e:?}"
            );
        }
        assert_eq!(server.in_flight().current(), 0, "nothing left waiting");
    }
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    ready(&client).await;
    server.shutdown();
    server.wait().await.unwrap();
}

/// `POST /json` and gRPC share one in-flight bound: JSON requests waiting on a stalled store
/// hold slots that gRPC then lacks, and the other way round (issue 14: `--max-in-flight` did
/// not apply to `/json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_requests_share_the_in_flight_bound() {
    let redis = RedisNode::start();
    let (server, _dir, client) =
        start_patient(&redis, &["--json-api", "--max-in-flight", "2"]).await;
    let http = server.http_addr;
    let body = |i: usize| {
        format!(
            r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"k","value":"json-{i}"}}]}}]}}"#
        )
    };

    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]), "OK");
    let json_calls: Vec<_> = (0..2)
        .map(|i| {
            let b = body(i);
            tokio::spawn(async move { support::http::http_post(http, "/json", &b).await })
        })
        .collect();
    wait_until_async("both slots held by JSON requests", || {
        let held = server.in_flight().current() == 2;
        async move { held }
    })
    .await;
    let mut c = client.clone();
    let e = c
        .should_rate_limit(req_k(&[format!("client-{}", 1)]).to_proto())
        .await
        .expect_err("no slot");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    let (code, reply) = support::http::http_post(http, "/json", &body(9)).await;
    assert_eq!(code, 503, "{reply}");
    assert!(reply.contains("--max-in-flight"), "{reply}");

    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    for call in json_calls {
        let (code, reply) = call.await.unwrap();
        assert_eq!(code, 200, "{reply}");
    }
    assert_eq!(server.in_flight().current(), 0);
    assert_eq!(server.in_flight().rejected(), 2);
    server.shutdown();
    server.wait().await.unwrap();
}
