//! `--grpc-threads`: gRPC served by several single-threaded runtimes, each with its own
//! SO_REUSEPORT listener on one port. Many connections (spread by the kernel over the
//! listeners) are all served and share one count, one in-flight bound and one Redis store;
//! the drain closes every listener; `--grpc-threads 0` serves on the main runtime as before.

use crate::support;
use crate::support::redis as redis_support;
use crate::support::req_k;

use std::time::Duration;

use redis_support::RedisNode;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::poll::wait_until_async;
use support::*;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 37}
"#;

/// `n` clients, each on its own HTTP/2 connection (so the kernel spreads them over the
/// listeners).
async fn clients(addr: std::net::SocketAddr, n: usize) -> Vec<RateLimitServiceClient<Channel>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(RateLimitServiceClient::new(channel(addr).await));
    }
    out
}

/// Sends `per_client` requests for one value on every client at once; counts OK and
/// OVER_LIMIT answers. A hung connection (a listener nobody serves) fails the test.
async fn flood(clients: &[RateLimitServiceClient<Channel>], per_client: usize) -> (usize, usize) {
    let calls: Vec<_> = clients
        .iter()
        .flat_map(|c| {
            (0..per_client).map(move |_| {
                let mut c = c.clone();
                tokio::spawn(async move {
                    tokio::time::timeout(
                        Duration::from_secs(60),
                        c.should_rate_limit(req_k(&["shared"]).to_proto()),
                    )
                    .await
                })
            })
        })
        .collect();
    let (mut ok, mut over) = (0, 0);
    for call in calls {
        let answer = call
            .await
            .unwrap()
            .expect("every connection is served")
            .expect("answered")
            .into_inner();
        match Code::try_from(answer.overall_code) {
            Ok(Code::Ok) => ok += 1,
            Ok(Code::OverLimit) => over += 1,
            other => panic!("unexpected code {other:?}"),
        }
    }
    (ok, over)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_over_two_threads_share_one_count() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--grpc-threads", "2"]).await;
    let cs = clients(s.server.grpc_addr, 16).await;
    assert_eq!(flood(&cs, 8).await, (37, 128 - 37));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_threads_zero_serves_on_the_main_runtime() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--grpc-threads", "0"]).await;
    let cs = clients(s.server.grpc_addr, 4).await;
    assert_eq!(flood(&cs, 12).await, (37, 48 - 37));
    let addr = s.server.grpc_addr;
    s.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_finishes_requests_in_flight_and_closes_every_listener() {
    let redis = RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(
        StoreKind::Redis(url),
        Some(CONFIG),
        &["--grpc-threads", "3"],
    )
    .await;
    let addr = s.server.grpc_addr;
    let cs = clients(addr, 12).await;
    assert_eq!(flood(&cs, 1).await, (12, 0));

    // Requests waiting on a stalled store when the drain starts are answered after it.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]), "OK");
    let calls: Vec<_> = cs
        .iter()
        .map(|c| {
            let mut c = c.clone();
            tokio::spawn(async move { c.should_rate_limit(req_k(&["drain"]).to_proto()).await })
        })
        .collect();
    wait_until_async("12 requests in flight", || {
        let n = s.server.in_flight().current();
        async move { n == 12 }
    })
    .await;
    s.server.shutdown();
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    for call in calls {
        let r = call.await.unwrap().expect("answered during the drain");
        assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
    }
    s.server.wait().await.expect("clean shutdown");
    // Every thread's socket is closed: one left open would take this connection.
    for _ in 0..8 {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "a listener is still open"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_bound_holds_across_threads() {
    let redis = RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(
        StoreKind::Redis(url),
        Some(CONFIG),
        &["--grpc-threads", "2", "--max-in-flight", "4"],
    )
    .await;
    let cs = clients(s.server.grpc_addr, 20).await;
    // Every connection answers (one at a time: the bound is 4) before the stall.
    for c in &cs {
        let r = c
            .clone()
            .should_rate_limit(req_k(&["warm-up"]).to_proto())
            .await
            .unwrap();
        assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
    }

    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]), "OK");
    let calls: Vec<_> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut c = c.clone();
            tokio::spawn(async move {
                c.should_rate_limit(req_k(&[&format!("c{i}")]).to_proto())
                    .await
            })
        })
        .collect();
    wait_until_async("16 refusals and 4 requests waiting", || {
        let f = s.server.in_flight();
        let finished = calls.iter().filter(|c| c.is_finished()).count();
        let done = f.rejected() == 16 && f.current() == 4 && finished == 16;
        async move { done }
    })
    .await;
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(r) => assert_eq!(r.into_inner().overall_code, Code::Ok as i32),
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 16);
    assert_eq!(s.server.in_flight().current(), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_a_connection_per_thread_admits_exactly_the_limit() {
    let redis = RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(
        StoreKind::Redis(url),
        Some(CONFIG),
        &["--grpc-threads", "2"],
    )
    .await;
    // The shared pool (`--redis-pool-size 1` in tests) and one connection per serving thread,
    // besides this test's own `redis-cli`.
    wait_until_async("a Redis connection per thread", || {
        let n = redis.cli(&["INFO", "clients"]);
        async move { n.contains("connected_clients:4") }
    })
    .await;
    let cs = clients(s.server.grpc_addr, 16).await;
    assert_eq!(flood(&cs, 10).await, (37, 160 - 37));
    assert_eq!(flood(&cs, 1).await, (0, 16));
    s.stop().await;
}
