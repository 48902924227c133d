//! Concurrency limits (`algorithm: concurrency`) over gRPC, as a direct client uses them: under
//! parallel load no more than `max_in_flight` leases are ever held and exactly that many are
//! admitted at once, releases (`is_negative_hits`) free them, and a lease never released
//! expires after the lease time. On memory, Redis, Redis Sentinel and Redis Cluster.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use support::redis::{RedisCluster, RedisNode, RedisSentinel};
use support::*;
use tonic::transport::Channel;

const N: u32 = 8;
const LEASE: Micros = 30 * SEC;

const CONFIG: &str = r#"
domain: d
allow_refunds: true
descriptors:
  - key: backend
    rate_limit: {algorithm: concurrency, max_in_flight: 8, lease_time: 30s}
"#;

/// One descriptor `backend=slow`: `hits` leases taken, or given back when `release`.
fn lease(hits: u64, release: bool) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        hits_addend: 0,
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"backend".to_vec(),
                value: b"slow".to_vec(),
            }],
            limit: None,
            hits_addend: Some(hits),
            is_negative_hits: release,
        }],
    }
}

async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(r).await.unwrap().into_inner()
}

fn admitted(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::Ok as i32
}

/// Free leases now (a look of 0 hits).
async fn free(client: &mut RateLimitServiceClient<Channel>) -> u32 {
    call(client, lease(0, false)).await.statuses[0].limit_remaining
}

/// Many tasks over several connections at once: exactly `N` admitted; then tasks taking and
/// releasing in a loop never hold more than `N` (counted on the client side, where a lease
/// counts from its grant until just before its release is sent, so never longer than at the
/// server); then a lease never released frees after the lease time.
async fn run(store: StoreKind) {
    let s = Sluice::start(store, Some(CONFIG), &[]).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        let ch = channel(s.server.grpc_addr).await;
        for _ in 0..12 {
            clients.push(RateLimitServiceClient::new(ch.clone()));
        }
    }

    // All at once: 48 ask, N get a lease.
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|mut c| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                admitted(&call(&mut c, lease(1, false)).await)
            })
        })
        .collect();
    let mut holders = 0;
    for t in tasks {
        holders += u32::from(t.await.unwrap());
    }
    assert_eq!(
        holders, N,
        "{store:?}: 48 parallel asks, {N} in flight at most"
    );
    let mut c = clients[0].clone();
    assert_eq!(free(&mut c).await, 0);
    let r = call(&mut c, lease(1, false)).await;
    assert!(!admitted(&r), "{store:?}: full");
    // Retry-after: until the oldest lease would expire by itself (slots of 30 ms).
    let wait = r.statuses[0].duration_until_reset.unwrap();
    assert!((30..=31).contains(&wait.seconds), "{wait:?}");
    call(&mut c, lease(u64::from(N), true)).await;
    assert_eq!(free(&mut c).await, N, "{store:?}: all released");

    // Churn: take, hold across a yield, release.
    let held = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|mut c| {
            let (held, most) = (held.clone(), most.clone());
            tokio::spawn(async move {
                let mut got = 0u32;
                for _ in 0..15 {
                    if !admitted(&call(&mut c, lease(1, false)).await) {
                        continue;
                    }
                    got += 1;
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    held.fetch_sub(1, Ordering::SeqCst);
                    let r = call(&mut c, lease(1, true)).await;
                    assert!(admitted(&r), "a release is never refused");
                }
                got
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= N, "{store:?}: {most} held at once, limit {N}");
    assert!(granted >= N, "{store:?}: only {granted} leases granted");
    assert_eq!(free(&mut c).await, N, "{store:?}: every lease came back");

    // A lease never released: freed by the lease time alone.
    assert!(admitted(&call(&mut c, lease(u64::from(N), false)).await));
    assert!(!admitted(&call(&mut c, lease(1, false)).await));
    s.clock.advance(LEASE - SEC);
    assert!(
        !admitted(&call(&mut c, lease(1, false)).await),
        "{store:?}: still leased"
    );
    // The lease time, rounded up to its 30 ms slot.
    s.clock.advance(SEC + 30_000);
    assert_eq!(free(&mut c).await, N, "{store:?}: expired");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_admits_exactly_max_in_flight() {
    run(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_admits_exactly_max_in_flight() {
    let redis = tokio::task::spawn_blocking(RedisNode::start).await.unwrap();
    run(StoreKind::Redis(Box::leak(redis.url().into_boxed_str()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_sentinel_admits_exactly_max_in_flight() {
    let redis = tokio::task::spawn_blocking(RedisSentinel::start)
        .await
        .unwrap();
    run(StoreKind::Redis(Box::leak(redis.url().into_boxed_str()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_admits_exactly_max_in_flight() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    run(StoreKind::Redis(Box::leak(cluster.url().into_boxed_str()))).await;
}
