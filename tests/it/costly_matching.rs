//! No request occupies a serving thread past its deadline: with a rule set whose matching is
//! costly (200 wildcard pieces `a`, `aa`, ... each ending with the next, so every byte of a
//! long run of `a` reports 200 occurrences), requests with a short `grpc-timeout` get
//! DEADLINE_EXCEEDED from the matcher itself, and a normal client served on the same (only)
//! gRPC thread is answered meanwhile.

use crate::support;

use std::time::Duration;

use sluice::proto::rate_limit_response::Code;
use support::*;

fn config() -> String {
    let mut c = String::from(
        "domain: d\ndescriptors:\n  - key: k\n    value: normal\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n",
    );
    // `z` never occurs, so no pattern completes and every occurrence of every piece counts.
    for n in 1..=200 {
        c.push_str(&format!(
            "  - key: k\n    value: \"*{}*z*\"\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n",
            "a".repeat(n)
        ));
    }
    c
}

#[tokio::test]
async fn costly_matching_gives_up_at_the_deadline_and_frees_the_thread() {
    let s = Sluice::start(StoreKind::Memory, Some(&config()), &["--grpc-threads", "1"]).await;
    // Three 64 KiB values of `a`: about 40 million occurrence reports, seconds of CPU.
    let costly = req_k(&vec![vec![b'a'; 65_536]; 3]).to_proto();
    let hostile = (0..4).map(|_| {
        let mut client = s.client.clone();
        let mut req = tonic::Request::new(costly.clone());
        req.set_timeout(Duration::from_millis(300));
        async move { client.should_rate_limit(req).await }
    });
    let normal = async {
        for _ in 0..5 {
            let r = tokio::time::timeout(
                Duration::from_secs(3),
                s.call(req_k(&[b"normal".to_vec()]).to_proto()),
            )
            .await
            .expect("the normal client is answered while costly requests run")
            .expect("served");
            assert_eq!(r.overall_code, Code::Ok as i32);
        }
    };
    let (answers, ()) = tokio::join!(futures::future::join_all(hostile), normal);
    for a in answers {
        // The client's own timer may answer first (CANCELLED); the server gives up too.
        let e = a.expect_err("a costly request cannot finish within 300 ms");
        assert!(
            matches!(
                e.code(),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            ),
            "{e:?}"
        );
    }
    let (_, metrics) = s.http_get("/metrics").await;
    let exceeded = metrics
        .lines()
        .find(|l| {
            l.starts_with("sluice_rpc_requests_total") && l.contains("code=\"DEADLINE_EXCEEDED\"")
        })
        .unwrap_or_else(|| panic!("the server did not give up: {metrics}"));
    assert!(exceeded.ends_with(" 4"), "{exceeded}");
    s.stop().await;
}
