//! A concurrency limit behind a real Envoy: a request takes a lease before it is routed, and
//! its `apply_on_stream_done` descriptor (`is_negative_hits`) gives it back when the stream
//! ends. The stream-end descriptor comes from the dynamic metadata sluice returns only when the
//! request took its lease (`skip_if_absent`), because Envoy sends stream-end descriptors for
//! every request, its 429s included: without the gate a rejected request would release
//! another request's lease.

use crate::support;

use serde_json::json;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use support::envoy::*;
use support::*;

const CONFIG: &str = r#"
domain: e2e
allow_refunds: true
descriptors:
  - key: backend
    value: slow
    rate_limit: {algorithm: concurrency, max_in_flight: 2, lease_time: 60s}
    metadata: {lease: slow}
"#;

/// The route's descriptors: `backend=slow` before routing (one lease), and at stream end the
/// same descriptor, read from the metadata of a request that got its lease, as a release.
fn leased_route() -> serde_json::Value {
    route_per_filter(
        "/slow",
        json!([
            {"actions": [{"generic_key": {"descriptor_key": "backend", "descriptor_value": "slow"}}]},
            {"actions": [{"metadata": {
                "descriptor_key": "backend",
                "metadata_key": {"key": "envoy.filters.http.ratelimit",
                                 "path": [{"key": "metadata"}, {"key": "lease"}]},
                "source": "DYNAMIC",
                "skip_if_absent": true}}],
             "apply_on_stream_done": true,
             "hits_addend": {"number": 1, "is_negative_hits": true}}
        ]),
    )
}

/// Free leases, asked of sluice directly (a look of 0 hits).
async fn free(s: &Stack) -> u32 {
    let look = RateLimitRequest {
        domain: DOMAIN.into(),
        hits_addend: 0,
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"backend".to_vec(),
                value: b"slow".to_vec(),
            }],
            limit: None,
            hits_addend: Some(0),
            is_negative_hits: false,
        }],
    };
    s.sluice.call(look).await.unwrap().statuses[0].limit_remaining
}

/// Waits (bounded) until Envoy has completed `want` calls to sluice and has none under way.
async fn rls_calls(s: &Stack, want: u64) {
    let total = "cluster.sluice.upstream_rq_total";
    let done = "cluster.sluice.upstream_rq_completed";
    let got = poll::eventually("Envoy's calls to sluice", || async {
        let (t, d) = (s.envoy.stat(total).await, s.envoy.stat(done).await);
        (t == d && d >= want).then_some(d)
    })
    .await;
    assert_eq!(got, want, "calls to sluice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_holds_max_in_flight_and_releases_at_stream_end() {
    let s = Stack::start(CONFIG, &[], Filter::default(), json!([leased_route()])).await;
    let hold = [("x-hold", "1")];

    // Two slow requests take both leases and wait at the upstream.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let front = s.front;
        slow.push(tokio::spawn(async move {
            http(front, "GET", "/slow", &hold).await.unwrap()
        }));
    }
    let held = s.upstream.held.clone();
    poll::eventually("two requests held at the upstream", || {
        let held = held.clone();
        async move { (held.load(std::sync::atomic::Ordering::SeqCst) == 2).then_some(()) }
    })
    .await;
    assert_eq!(free(&s).await, 0);

    // The third is refused while they are in flight; so is a fourth, by which time Envoy has
    // ended the third's stream.
    for _ in 0..2 {
        let r = s.get("/slow", &[]).await;
        assert_eq!(r.status, 429, "{r:?}");
        // requests_per_unit is max_in_flight; the unit is the lease time's (60 s).
        assert_eq!(r.header("x-ratelimit-limit"), Some("2, 2;w=60"), "{r:?}");
        assert_eq!(r.header("x-ratelimit-remaining"), Some("0"), "{r:?}");
    }
    // Envoy still makes the 429s' stream-end calls, but with the metadata absent their
    // descriptor has no entry: sluice refuses it (INVALID_ARGUMENT) and releases nothing.
    rls_calls(&s, 6).await;
    let (_, metrics) = s.sluice.http_get("/metrics").await;
    let refused =
        r#"sluice_rpc_requests_total{code="INVALID_ARGUMENT",method="ShouldRateLimit"} 2"#;
    assert!(metrics.lines().any(|l| l == refused), "{metrics}");
    assert_eq!(free(&s).await, 0, "both leases still held");

    // The slow requests finish: their stream-end descriptors release both leases.
    s.upstream.gate.add_permits(2);
    for t in slow {
        let r = t.await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, UPSTREAM_BODY), "{r:?}");
    }
    poll::eventually("both leases released", || async {
        (free(&s).await == 2).then_some(())
    })
    .await;
    rls_calls(&s, 8).await;

    // And the next request is admitted.
    let r = s.get("/slow", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-ratelimit-remaining"), Some("1"), "{r:?}");
    s.stop().await;
}
