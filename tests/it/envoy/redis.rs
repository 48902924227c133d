//! The Redis store behind one Envoy: two sluice instances share one real `redis-server` and are
//! both endpoints of Envoy's rate limit cluster (round robin). Hammered through Envoy by
//! concurrent clients, together they admit exactly the limit.
//!
//! Both instances decide on `--clock local` with ManualClocks at the same instant, so no window
//! can end during the test.

use crate::support;
use crate::support::redis as redis_support;

use serde_json::json;
use support::envoy::{bootstrap_rls, route, sluice_on_redis, Envoy, Filter, Upstream};

use redis_support::RedisNode;
use support::poll::wait_until_async;

const LIMIT: usize = 40;
const CONFIG: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: shared
    rate_limit: {unit: minute, requests_per_unit: 40}
"#;

/// Concurrent clients, each sending its requests one after the other (one connection each).
const CLIENTS: usize = 16;
const PER_CLIENT: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_admit_exactly_the_limit_together() {
    let redis = tokio::task::spawn_blocking(RedisNode::start).await.unwrap();
    let url = redis.url();
    // A generous command timeout: a call timed out under load would be an RLS error (500 with
    // the default filter), not a wrong count.
    let flags = ["--clock", "local", "--redis-command-timeout", "2s"];
    let a = sluice_on_redis(CONFIG, &url, &flags).await;
    let b = sluice_on_redis(CONFIG, &url, &flags).await;
    for s in [&a, &b] {
        wait_until_async("sluice connected to redis", || async {
            s.server.redis_status().is_some_and(|st| st.connected)
        })
        .await;
    }
    let upstream = Upstream::start().await;
    let routes = json!([route(
        "/",
        json!([{"actions": [{"generic_key": {"descriptor_value": "shared"}}]}])
    )]);
    // Fail closed (500 on an RLS error), so only sluice's answers make 200s and 429s.
    let envoy = Envoy::start(&bootstrap_rls(
        &[a.server.grpc_addr, b.server.grpc_addr],
        upstream.addr,
        Filter::default(),
        routes,
    ))
    .await;
    let front = envoy.listener("front");

    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(async move {
                let mut statuses = Vec::with_capacity(PER_CLIENT);
                for _ in 0..PER_CLIENT {
                    let r = support::envoy::http(front, "GET", "/", &[])
                        .await
                        .expect("request through envoy");
                    statuses.push(r.status);
                }
                statuses
            })
        })
        .collect();
    let mut counts = std::collections::BTreeMap::new();
    for c in clients {
        for status in c.await.expect("client task") {
            *counts.entry(status).or_insert(0usize) += 1;
        }
    }
    let total = CLIENTS * PER_CLIENT;
    let want = std::collections::BTreeMap::from([(200, LIMIT), (429, total - LIMIT)]);
    assert_eq!(counts, want, "HTTP statuses\n{}", envoy.log());

    // Both instances decided: Envoy sent the calls to each (round robin), and every call was
    // answered.
    let calls = envoy.host_stat("sluice", "rq_total").await;
    let per_host: Vec<u64> = [a.server.grpc_addr, b.server.grpc_addr]
        .iter()
        .map(|addr| calls.get(addr).copied().unwrap_or(0))
        .collect();
    assert!(
        per_host.iter().all(|&n| n > 0),
        "calls per instance {per_host:?}"
    );
    assert_eq!(per_host.iter().sum::<u64>(), total as u64, "{calls:?}");

    // The one shared count in Redis: the window's start, then the limit (rejected requests
    // are not charged).
    let keys = redis.cli(&["KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let state = support::redis::fixed_window_state(&redis.cli(&["HGETALL", keys[0]]));
    assert_eq!(
        state.map(|(_, count)| count),
        Some(LIMIT as u64),
        "{state:?}"
    );

    a.stop().await;
    b.stop().await;
}
