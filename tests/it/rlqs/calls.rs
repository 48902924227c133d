//! What a report and a renewal ask of the store (`service/rlqs/assign.rs`): a report whose
//! grant covers what Envoy used asks nothing, a renewal reserves its share in one decision
//! sized from a guess, and a guess above what remained is corrected (the surplus given back)
//! so that the grant is the share of what remained, as if it had been read first.

use super::{summarize, Quota};
use crate::support::envoy::sluice_on_redis;
use crate::support::redis::RedisNode;
use crate::support::{poll, Sluice, StoreKind, SEC};

const CONFIG: &str = r#"
domain: q
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 100}
"#;

const K: &[(&str, &str)] = &[("k", "x")];

#[tokio::test]
async fn a_covered_report_asks_the_store_nothing_and_a_renewal_one_decision() {
    let redis = RedisNode::start();
    let s = sluice_on_redis(CONFIG, &redis.url(), &[]).await;
    tokio::time::timeout(poll::READY_WITHIN, s.server.store_ready())
        .await
        .expect("the store connects");
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    // (report: allowed, denied; the answer; the store decisions it took)
    let steps: [(u64, u64, &str, u64); 4] = [
        // The first request, admitted without a grant, is charged (11 left), then the grant
        // reserved: 2 decisions.
        (1, 0, "tokens 5", 2),
        // 2 of the 5 tokens used: nothing to charge, nothing to renew.
        (2, 0, "keep tokens 5", 0),
        // The grant used up: a new one, sized from what the store said remained (6), reserved
        // in one decision.
        (3, 0, "tokens 6", 1),
        // Used up again, nothing left: a guess of 0 is read once (1 decision) before denying.
        (6, 0, "deny_all", 1),
    ];
    for (allowed, denied, want, calls) in steps {
        let before = redis.decision_calls();
        assert_eq!(q.report("q", &[(K, allowed, denied)]).await, [want]);
        assert_eq!(
            redis.decision_calls() - before,
            calls,
            "report ({allowed}, {denied})"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn a_renewal_sized_from_a_stale_guess_grants_the_share_of_what_remained() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let fast = &[("fast", "x")][..];
    let mut a = Quota::open(s.server.grpc_addr).await.expect("open");
    let mut b = Quota::open(s.server.grpc_addr).await.expect("open");
    // 100 a second. A: its first request charged (99 left), half of it granted. B, with A's
    // demand beside its own: 1 charged (49 left), its proportional half of that.
    assert_eq!(a.report("q", &[(fast, 1, 0)]).await, ["tokens 49"]);
    assert_eq!(b.report("q", &[(fast, 1, 0)]).await, ["tokens 24"]);
    // A new second: both renewed by their timers, each guessing the whole limit is left. The
    // first gets its half of 100; the second's guess is then 50 too many: it is given back
    // the surplus beyond its half of the 50 that remained.
    s.clock.advance(SEC);
    let mut got = Vec::new();
    for q in [&mut a, &mut b] {
        let pushed = q.next().await.expect("a renewal");
        got.extend(summarize(&pushed).into_iter().map(|(_, a)| a));
    }
    got.sort();
    assert_eq!(got, ["tokens 25", "tokens 50"]);
    // What was given back is there: 25 remain. C's first request is charged (24 left) and it
    // gets its part beside A's and B's demand (1 each): 8.
    let mut c = Quota::open(s.server.grpc_addr).await.expect("open");
    assert_eq!(c.report("q", &[(fast, 1, 0)]).await, ["tokens 8"]);
    s.stop().await;
}
