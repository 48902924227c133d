//! The in-memory store under contention: many tokio tasks on a multi-thread runtime hammering
//! one key admit exactly the limit, over gRPC and on the store directly, and a request's
//! descriptors are charged all together or not at all.

use crate::support;

use std::sync::Arc;

use sluice::algorithm::{Ask, Limit};
use sluice::proto::rate_limit_response::Code;
use sluice::store::{Check, Deadline, MemoryStore, Store};
use support::*;

const LIMIT: u32 = 250;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_grpc_clients_on_one_key_admit_exactly_the_limit() {
    let config = format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {LIMIT}}}\n"
    );
    let s = Sluice::start(StoreKind::Memory, Some(&config), &[]).await;
    // Several connections, several tasks each: requests really run in parallel.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let ch = channel(s.server.grpc_addr).await;
        for _ in 0..16 {
            let mut client =
                sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(ch.clone());
            tasks.push(tokio::spawn(async move {
                let r = req("d", vec![d(&[("k", "one")])]).to_proto();
                let mut admitted = 0u32;
                for _ in 0..10 {
                    let resp = client
                        .should_rate_limit(r.clone())
                        .await
                        .unwrap()
                        .into_inner();
                    if resp.overall_code == Code::Ok as i32 {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, LIMIT, "640 requests for a limit of {LIMIT}");
    let left = s
        .call(req("d", vec![d(&[("k", "one")]).hits(0)]).to_proto())
        .await
        .unwrap();
    assert_eq!(left.statuses[0].limit_remaining, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_multi_key_requests_are_all_or_nothing() {
    let store = Arc::new(MemoryStore::new(10_000));
    let tight = Limit::fixed_window(u64::from(LIMIT), 3_600 * SEC).unwrap();
    let loose = Limit::fixed_window(1_000_000, 3_600 * SEC).unwrap();
    let tight = Arc::new(tight);
    let loose = Arc::new(loose);
    let mut tasks = Vec::new();
    for t in 0..32u32 {
        let (store, tight, loose) = (store.clone(), tight.clone(), loose.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u32;
            for i in 0..20u32 {
                let a = Check::new(b"tight", &tight, Ask::take(1));
                let b = Check {
                    key: b"loose",
                    group: 1,
                    limit: &loose,
                    ..a.clone()
                };
                // Both orders, so shard locks are taken in every combination.
                let checks = if (t + i) % 2 == 0 { [a, b] } else { [b, a] };
                let v = store.decide(&checks, T0, Deadline::NONE).await.unwrap();
                assert_eq!(v[0].allowed && v[1].allowed, v[0].charged && v[1].charged);
                if v.iter().all(|v| v.allowed) {
                    admitted += 1;
                }
                tokio::task::yield_now().await;
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, LIMIT);
    // The loose key was charged exactly by the admitted requests.
    let peek = Check::new(b"loose", &loose, Ask::peek());
    let v = store.decide(&[peek], T0, Deadline::NONE).await.unwrap();
    assert_eq!(v[0].remaining, 1_000_000 - u64::from(LIMIT));
}
