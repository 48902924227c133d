//! One limit across streams: shares by demand, a stream that ends frees its part, the same
//! store as RLS, two replicas on one Redis, a new window, and reloads that change or withdraw
//! an assignment without a report.

use super::{summarize, Quota};
use crate::support::envoy::sluice_on_redis;
use crate::support::redis::RedisNode;
use crate::support::{poll, Sluice, StoreKind, SEC};
use sluice::proto::{RateLimitRequest, RateLimitResponse};

const CONFIG: &str = r#"
domain: q
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: name
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 2}
"#;

const K: &[(&str, &str)] = &[("k", "x")];

#[tokio::test]
async fn streams_share_what_remains_by_demand_and_never_exceed_the_limit() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut a = Quota::open(s.server.grpc_addr).await.expect("open");
    let mut b = Quota::open(s.server.grpc_addr).await.expect("open");
    // 10 a minute. A's first request is charged (9 left): alone, A gets half of it, 4.
    assert_eq!(a.report("q", &[(K, 1, 0)]).await, ["tokens 4"]);
    // B's first request (4 left after it): 4 x 1/(1+1) = 2.
    assert_eq!(b.report("q", &[(K, 1, 0)]).await, ["tokens 2"]);
    // A used its 4 and was refused 6 (demand 10): 2 left, A's part is 2 x 10/11 = 1.
    assert_eq!(a.report("q", &[(K, 4, 6)]).await, ["tokens 1"]);
    // B used its 2: 1 left; B's part rounds to 0 but a stream with demand gets at least 1.
    assert_eq!(b.report("q", &[(K, 2, 0)]).await, ["tokens 1"]);
    // Nothing left for either: every token granted plus the two first requests is the limit.
    assert_eq!(a.report("q", &[(K, 1, 0)]).await, ["deny_all"]);
    assert_eq!(b.report("q", &[(K, 1, 4)]).await, ["deny_all"]);
    s.stop().await;
}

#[tokio::test]
async fn a_stream_that_ends_frees_its_share() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let big = &[("big", "x")][..];
    let mut a = Quota::open(s.server.grpc_addr).await.expect("open");
    // 100 a minute; A, alone, gets half of the 99 left.
    assert_eq!(a.report("q", &[(big, 1, 9)]).await, ["tokens 49"]);
    let mut b = Quota::open(s.server.grpc_addr).await.expect("open");
    // With A there, B (demand 50) would get 49 x 50/60 = 40; once A is gone, all 49 left.
    drop(a);
    poll::eventually("the first stream to end", || async {
        let (_, metrics) = s.http_get("/metrics").await;
        metrics.contains("sluice_rlqs_streams 1\n").then_some(())
    })
    .await;
    assert_eq!(b.report("q", &[(big, 1, 49)]).await, ["tokens 49"]);
    let (_, metrics) = s.http_get("/metrics").await;
    for line in [
        "sluice_rlqs_streams 1",
        "sluice_rlqs_reports_total 2",
        "sluice_rlqs_requests_total{outcome=\"allowed\"} 2",
        "sluice_rlqs_requests_total{outcome=\"denied\"} 58",
        "sluice_rlqs_assignments_total{action=\"token_bucket\"} 2",
        // Per-rule statistics from the reports, as for RLS.
        "sluice_rate_limit_within_limit_total{domain=\"q\",key=\"q.big\"} 2",
        "sluice_rate_limit_over_limit_total{domain=\"q\",key=\"q.big\"} 58",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    s.stop().await;
}

fn rls(user: &str) -> RateLimitRequest {
    use sluice::proto::rate_limit_descriptor::Entry;
    RateLimitRequest {
        domain: "q".into(),
        descriptors: vec![sluice::proto::RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: b"name".to_vec(),
                    value: b"api".to_vec(),
                },
                Entry {
                    key: b"user".to_vec(),
                    value: user.as_bytes().to_vec(),
                },
            ],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

fn code(r: RateLimitResponse) -> i32 {
    r.overall_code
}

#[tokio::test]
async fn rls_and_rlqs_count_against_one_limit() {
    use sluice::proto::rate_limit_response::Code;
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    // RLS takes 2 of alice's 3; Envoy's first RLQS request takes the last: nothing to grant.
    for _ in 0..2 {
        assert_eq!(code(s.call(rls("alice")).await.unwrap()), Code::Ok as i32);
    }
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    let alice = &[("name", "api"), ("user", "alice")][..];
    assert_eq!(q.report("q", &[(alice, 1, 0)]).await, ["deny_all"]);
    // The other way: bob's grant is reserved in the store, so RLS sees it as used.
    let bob = &[("name", "api"), ("user", "bob")][..];
    assert_eq!(q.report("q", &[(bob, 1, 0)]).await, ["tokens 2"]);
    assert_eq!(
        code(s.call(rls("bob")).await.unwrap()),
        Code::OverLimit as i32
    );
    s.stop().await;
}

#[tokio::test]
async fn two_replicas_on_one_redis_grant_one_limit() {
    let redis = RedisNode::start();
    let one = sluice_on_redis(CONFIG, &redis.url(), &[]).await;
    let two = sluice_on_redis(CONFIG, &redis.url(), &[]).await;
    for s in [&one, &two] {
        tokio::time::timeout(poll::READY_WITHIN, s.server.store_ready())
            .await
            .expect("the store connects");
    }
    let alice = &[("name", "api"), ("user", "alice")][..];
    let mut a = Quota::open(one.server.grpc_addr).await.expect("open");
    let mut b = Quota::open(two.server.grpc_addr).await.expect("open");
    // 3 a minute across both: A's first request and its 2 tokens are all of it; B's first
    // request is the one unassigned request of its Envoy.
    assert_eq!(a.report("q", &[(alice, 1, 0)]).await, ["tokens 2"]);
    assert_eq!(b.report("q", &[(alice, 1, 0)]).await, ["deny_all"]);
    assert_eq!(a.report("q", &[(alice, 2, 0)]).await, ["deny_all"]);
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn a_new_window_brings_a_new_grant() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    let alice = &[("name", "api"), ("user", "alice")][..];
    assert_eq!(q.report("q", &[(alice, 1, 0)]).await, ["tokens 2"]);
    assert_eq!(q.report("q", &[(alice, 2, 0)]).await, ["deny_all"]);
    s.clock.advance(60 * SEC);
    // A fresh minute: 3 left, the demand was 4.
    assert_eq!(q.report("q", &[(alice, 0, 4)]).await, ["tokens 3"]);
    s.stop().await;
}

#[tokio::test]
async fn when_a_window_ends_the_stream_is_renewed_without_a_report() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    let fast = &[("fast", "x")][..];
    // 2 a second: the first request and 1 token.
    assert_eq!(q.report("q", &[(fast, 1, 0)]).await, ["tokens 1"]);
    // The test's clock moves past the second; sluice's timer (real time, under a second)
    // wakes, sees the window over, and sends a fresh grant.
    s.clock.advance(SEC);
    let pushed = q.next().await.expect("a renewal");
    let got: Vec<String> = summarize(&pushed).into_iter().map(|(_, a)| a).collect();
    assert_eq!(got, ["tokens 2"]);
    s.stop().await;
}

#[tokio::test]
async fn a_reload_changes_or_withdraws_assignments_at_once() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    let alice = &[("name", "api"), ("user", "alice")][..];
    let other = &[("other", "x")][..];
    assert_eq!(
        q.report("q", &[(alice, 1, 0), (other, 1, 0)]).await,
        ["tokens 2", "allow_all"]
    );
    // alice's rule becomes a block, and a rule appears for the other bucket.
    s.write_config(
        "domain: q\ndescriptors:\n  - key: name\n    value: api\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 50}\n",
    );
    s.server.reload();
    let mut got: Vec<String> = summarize(&q.next().await.expect("pushed"))
        .into_iter()
        .map(|(id, a)| format!("{} {a}", id.bucket.keys().next().unwrap()))
        .collect();
    got.sort();
    assert_eq!(got, ["name deny_all", "other tokens 25"]);
    // alice's rule disappears: her bucket is abandoned.
    s.write_config("domain: q\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 50}\n");
    s.server.reload();
    let pushed = q.next().await.expect("pushed");
    assert_eq!(
        summarize(&pushed),
        [(super::bucket(alice), "abandon".to_string())]
    );
    // A broken config changes nothing: the grant in force is confirmed at the next report.
    s.write_config("domain: q\ndescriptors: [oops\n");
    s.server.reload();
    assert_eq!(q.report("q", &[(other, 2, 0)]).await, ["keep tokens 25"]);
    s.stop().await;
}
