//! When the store fails, RLQS follows the failure policy of RLS (`--on-store-error`): `deny`
//! assigns DENY_ALL, `allow` grants as if nothing were used.

use super::Quota;
use crate::support::envoy::sluice_on_redis;
use crate::support::poll;
use crate::support::redis::RedisNode;

const CONFIG: &str =
    "domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

#[tokio::test]
async fn a_failed_store_is_answered_by_the_failure_policy() {
    // (policy, the assignment once Redis is gone)
    let cases = [("deny", "deny_all"), ("allow", "tokens 3")];
    for (policy, want) in cases {
        let mut redis = RedisNode::start();
        let s = sluice_on_redis(CONFIG, &redis.url(), &["--on-store-error", policy]).await;
        tokio::time::timeout(poll::READY_WITHIN, s.server.store_ready())
            .await
            .expect("the store connects");
        let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
        let k = &[("k", "x")][..];
        assert_eq!(q.report("q", &[(k, 1, 0)]).await, ["tokens 2"], "{policy}");
        redis.kill();
        // The grant is used up: a new one is due, and the store cannot say what is left.
        assert_eq!(q.report("q", &[(k, 2, 0)]).await, [want], "{policy}");
        s.stop().await;
    }
}
