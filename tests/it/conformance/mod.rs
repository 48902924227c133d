//! Conformance of `ShouldRateLimit` over real gRPC: one table of cases, each a config, server
//! flags and a list of request/expected-answer steps, run by `support::check` on a fresh
//! server. The store is a parameter so the Redis store can run the same tables.
//!
//! Every expected `duration_until_reset` is checked too: by default it is the rest of the
//! epoch-aligned window at the test clock, rounded up to the millisecond (see `support::T0`).
//!
//! The same table runs on the in-memory store, on a standalone Redis and on a 6-node Redis
//! Cluster, each started once for its test on loopback ports.
//!
//! One module per topic of the table; `all_cases` gathers them.

mod charge;
mod headers;
mod hits;
mod matching;
mod metadata;
mod overrides;
mod quota;
mod replaces;
mod request_errors;
mod shadow;
mod windows;

use crate::support;
use crate::support::redis as redis_support;

use support::*;

fn all_cases() -> Vec<Case> {
    [
        matching::matching(),
        windows::windows(),
        replaces::replaces(),
        shadow::shadow(),
        quota::quota(),
        hits::hits(),
        overrides::overrides(),
        charge::charge(),
        headers::headers(),
        metadata::metadata(),
        request_errors::request_errors(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    run_suite(StoreKind::Memory, all_cases()).await;
}

/// One standalone Redis for every case of this test (each case has its own key prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redis() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    run_suite(StoreKind::Redis(url), all_cases()).await;
    // The answers came from Redis (the cases leave their counters there).
    assert!(redis.decision_calls() > 100);
    assert!(redis.cli(&["DBSIZE"]).parse::<u64>().unwrap() > 50);
}

/// A 6-node Redis Cluster (3 primaries, 3 replicas) on loopback ports: the same answers, the
/// descriptors of a request spread over slots and nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(redis_support::RedisCluster::start)
        .await
        .expect("cluster starts");
    let url: &'static str = Box::leak(cluster.url().into_boxed_str());
    run_suite(StoreKind::Redis(url), all_cases()).await;
    // Decided on the primaries, by `FCALL`s (the serving threads' own connections, the pools
    // while those were not up); nothing else decides.
    assert!(cluster.command_calls("fcall") > 100);
    assert_eq!(cluster.command_calls("evalsha"), 0);
}
