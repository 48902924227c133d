//! End to end with real Envoy 1.40 processes and the `rate_limit_quota` filter: one Envoy
//! enforces the limit; two Envoys on one sluice, and two Envoys on two sluice replicas sharing
//! one Redis, together admit no more than the limit plus one unassigned first request per
//! Envoy; a reload changes the assignment in force; a killed sluice lets Envoy fall back to
//! its `expired_assignment_behavior` once the assignment's TTL runs out.

use std::net::SocketAddr;

use crate::support::envoy::{bootstrap_rlqs, http, sluice_on_redis, Envoy, Upstream, RLQS_APPLIED};
use crate::support::process::Binary;
use crate::support::redis::RedisNode;
use crate::support::{poll, Sluice, StoreKind};

/// 3 requests a minute per user, in the e2e domain; bob is blocked, dave has 6.
const CONFIG: &str = r#"
domain: e2e
descriptors:
  - key: name
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: user
        value: bob
        rate_limit: {unit: minute, requests_per_unit: 0}
      - key: user
        value: dave
        rate_limit: {unit: minute, requests_per_unit: 6}
"#;

async fn envoy_for(sluices: &[SocketAddr], upstream: &Upstream) -> Envoy {
    Envoy::start_with(
        &bootstrap_rlqs(sluices, upstream.addr),
        &["--component-log-level", "rate_limit_quota:debug"],
    )
    .await
}

async fn get(envoy: &Envoy, user: Option<&str>) -> u16 {
    let headers: Vec<(&str, &str)> = user.iter().map(|u| ("x-user", *u)).collect();
    http(envoy.listener("front"), "GET", "/", &headers)
        .await
        .unwrap_or_else(|e| panic!("GET through envoy: {e}\n{}", envoy.log()))
        .status
}

/// A new bucket's first request (allowed before any assignment), then a wait until the
/// assignment sluice answers with is in force on Envoy's worker (its log says so twice: once
/// for the new bucket, once for the answer).
async fn first_request(envoy: &Envoy, user: &str) -> u16 {
    let before = envoy.log().matches(RLQS_APPLIED).count();
    let status = get(envoy, Some(user)).await;
    poll::wait_until_async("the first assignment to be in force", || async {
        envoy.log().matches(RLQS_APPLIED).count() >= before + 2
    })
    .await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_envoy_enforces_the_limit() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let upstream = Upstream::start().await;
    let envoy = envoy_for(&[s.server.grpc_addr], &upstream).await;
    let mut got = vec![first_request(&envoy, "alice").await];
    for _ in 0..4 {
        got.push(get(&envoy, Some("alice")).await);
    }
    assert_eq!(got, [200, 200, 200, 429, 429], "{}", envoy.log());
    // Another bucket has its own limit; requests outside every bucket pass.
    assert_eq!(first_request(&envoy, "carol").await, 200);
    assert_eq!(get(&envoy, Some("carol")).await, 200);
    assert_eq!(get(&envoy, None).await, 200);
    // A blocked user: the first request passes (no assignment yet), then DENY_ALL.
    assert_eq!(first_request(&envoy, "bob").await, 200);
    assert_eq!(get(&envoy, Some("bob")).await, 429);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_grant_is_renewed_at_the_next_report() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let upstream = Upstream::start().await;
    let envoy = envoy_for(&[s.server.grpc_addr], &upstream).await;
    // 6 a minute: the first request, then a grant of 2 (half of the 5 left).
    let mut got = vec![first_request(&envoy, "dave").await];
    for _ in 0..3 {
        got.push(get(&envoy, Some("dave")).await);
    }
    assert_eq!(got, [200, 200, 200, 429], "{}", envoy.log());
    // Envoy's next report (every 5 s) shows the grant used: the 3 left come as a new, full
    // token bucket (Envoy would start a replacing bucket as empty as the old one).
    let before = envoy.log().matches(RLQS_APPLIED).count();
    poll::wait_until_async("the next report's answer to be in force", || async {
        envoy.log().matches(RLQS_APPLIED).count() > before
    })
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(get(&envoy, Some("dave")).await);
    }
    assert_eq!(got, [200, 200, 200, 429], "{}", envoy.log());
    s.stop().await;
}

/// Alternates requests of user alice between `a` and `b` after each one's first request, and
/// returns how many were admitted.
async fn admitted_by_two(a: &Envoy, b: &Envoy) -> usize {
    let mut statuses = vec![
        first_request(a, "alice").await,
        first_request(b, "alice").await,
    ];
    for _ in 0..4 {
        statuses.push(get(a, Some("alice")).await);
        statuses.push(get(b, Some("alice")).await);
    }
    statuses.iter().filter(|s| **s == 200).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_on_one_sluice_admit_no_more_than_the_bound() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let upstream = Upstream::start().await;
    let a = envoy_for(&[s.server.grpc_addr], &upstream).await;
    let b = envoy_for(&[s.server.grpc_addr], &upstream).await;
    let admitted = admitted_by_two(&a, &b).await;
    // The bound: the limit (3) plus one unassigned first request per Envoy (2).
    assert!(admitted <= 3 + 2, "{admitted} admitted");
    // What the design gives: A's first request and its grant of 2 take the limit; B's first
    // request is its one unassigned request.
    assert_eq!(admitted, 4);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_on_two_replicas_sharing_redis_admit_no_more_than_the_bound() {
    let redis = RedisNode::start();
    let one = sluice_on_redis(CONFIG, &redis.url(), &[]).await;
    let two = sluice_on_redis(CONFIG, &redis.url(), &[]).await;
    for s in [&one, &two] {
        tokio::time::timeout(poll::READY_WITHIN, s.server.store_ready())
            .await
            .expect("the store connects");
    }
    let upstream = Upstream::start().await;
    let a = envoy_for(&[one.server.grpc_addr], &upstream).await;
    let b = envoy_for(&[two.server.grpc_addr], &upstream).await;
    let admitted = admitted_by_two(&a, &b).await;
    assert!(admitted <= 3 + 2, "{admitted} admitted");
    assert_eq!(admitted, 4);
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_assignment_in_force() {
    let generous = CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 1000");
    let s = Sluice::start(StoreKind::Memory, Some(&generous), &[]).await;
    let upstream = Upstream::start().await;
    let envoy = envoy_for(&[s.server.grpc_addr], &upstream).await;
    assert_eq!(first_request(&envoy, "alice").await, 200);
    assert_eq!(get(&envoy, Some("alice")).await, 200);
    // alice's limit becomes 0: sluice pushes DENY_ALL on the open stream, without a report.
    s.write_config(&CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 0"));
    assert!(s.server.reload());
    poll::eventually("Envoy to deny alice", || async {
        (get(&envoy, Some("alice")).await == 429).then_some(())
    })
    .await;
    let (_, metrics) = s.http_get("/metrics").await;
    assert!(
        metrics.contains("sluice_rlqs_assignments_total{action=\"deny_all\"} 1"),
        "{metrics}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sluice_lets_envoy_fall_back_when_the_assignment_expires() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    // Envoy 1.40 reports every 5 s: a TTL of 6 s outlives each report's answer.
    let mut sluice = Binary::start(&config, &["--rlqs-assignment-ttl", "6s"]);
    let upstream = Upstream::start().await;
    let envoy = envoy_for(&[sluice.grpc_addr], &upstream).await;
    assert_eq!(first_request(&envoy, "bob").await, 200);
    assert_eq!(get(&envoy, Some("bob")).await, 429, "{}", envoy.log());
    sluice.child.kill().expect("kill sluice");
    let _ = sluice.child.wait();
    // DENY_ALL holds until its TTL; then the configured fallback (ALLOW_ALL) applies.
    poll::eventually("Envoy to fall back to ALLOW_ALL", || async {
        (get(&envoy, Some("bob")).await == 200).then_some(())
    })
    .await;
}
