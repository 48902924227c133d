//! The bounds and errors of the service: streams, buckets per stream and report size are
//! limited by flags, with errors that name them; bad reports end their stream with
//! INVALID_ARGUMENT; gRPC health answers for the service.

use tonic::Code;

use super::Quota;
use crate::support::{channel, Sluice, StoreKind};

const CONFIG: &str =
    "domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";

#[tokio::test]
async fn streams_beyond_the_limit_are_refused_until_one_ends() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--rlqs-max-streams", "1"],
    )
    .await;
    let mut first = Quota::open(s.server.grpc_addr).await.expect("open");
    assert_eq!(
        first.report("q", &[(&[("k", "a")], 1, 0)]).await,
        ["tokens 4"]
    );
    let refused = Quota::open(s.server.grpc_addr)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("--rlqs-max-streams"),
        "{refused:?}"
    );
    drop(first);
    crate::support::poll::eventually("the slot to be freed", || async {
        Quota::open(s.server.grpc_addr).await.ok()
    })
    .await;
    s.stop().await;
}

/// (case, flags, the report's buckets, the code and a part of the message the stream ends with)
type Case = (
    &'static str,
    &'static [&'static str],
    Vec<Vec<(String, String)>>,
    Code,
    &'static str,
);

fn id(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn bad_or_oversized_reports_end_their_stream_with_a_clear_error() {
    let cases: Vec<Case> = vec![
        (
            "more buckets than a stream may have",
            &["--rlqs-max-buckets-per-stream", "2"],
            vec![id(&[("k", "1")]), id(&[("k", "2")]), id(&[("k", "3")])],
            Code::ResourceExhausted,
            "--rlqs-max-buckets-per-stream",
        ),
        (
            "a bucket id without entries",
            &[],
            vec![vec![]],
            Code::InvalidArgument,
            "bucket 0: the bucket id has no entries",
        ),
        (
            "a value longer than a descriptor's",
            &["--max-value-bytes", "8"],
            vec![id(&[("k", "a-long-value")])],
            Code::InvalidArgument,
            "--max-value-bytes",
        ),
        (
            "a report larger than --rlqs-max-report-bytes",
            &["--rlqs-max-report-bytes", "64"],
            vec![id(&[("k", &"v".repeat(100))])],
            Code::OutOfRange,
            "message length too large",
        ),
    ];
    for (case, flags, buckets, code, message) in cases {
        let s = Sluice::start(StoreKind::Memory, Some(CONFIG), flags).await;
        let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
        let pairs: Vec<Vec<(&str, &str)>> = buckets
            .iter()
            .map(|b| b.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
            .collect();
        let usages: Vec<super::Usage<'_>> = pairs.iter().map(|p| (&p[..], 1, 0)).collect();
        q.send("q", &usages).await;
        let status = q
            .next()
            .await
            .err()
            .unwrap_or_else(|| panic!("{case}: answered"));
        assert_eq!(status.code(), code, "{case}: {status:?}");
        assert!(status.message().contains(message), "{case}: {status:?}");
        s.stop().await;
    }
}

#[tokio::test]
async fn a_stream_must_name_one_domain() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    q.send("", &[(&[("k", "a")], 1, 0)]).await;
    let status = q.next().await.expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("must name its domain"),
        "{status:?}"
    );

    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    assert_eq!(q.report("q", &[(&[("k", "a")], 1, 0)]).await, ["tokens 4"]);
    // Later reports may leave the domain out, but not change it.
    assert_eq!(
        q.report("", &[(&[("k", "a")], 0, 0)]).await,
        ["keep tokens 4"]
    );
    q.send("other", &[(&[("k", "a")], 1, 0)]).await;
    let status = q.next().await.expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("cannot change it"), "{status:?}");
    s.stop().await;
}

#[tokio::test]
async fn before_a_config_loads_reports_are_unavailable() {
    let s = Sluice::start(StoreKind::Memory, None, &[]).await;
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    q.send("q", &[(&[("k", "a")], 1, 0)]).await;
    let status = q.next().await.expect_err("refused");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    s.stop().await;
}

#[tokio::test]
async fn health_answers_for_the_rlqs_service() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{health_check_response::ServingStatus, HealthCheckRequest};
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut h = HealthClient::new(channel(s.server.grpc_addr).await);
    let status = h
        .check(HealthCheckRequest {
            service: sluice::service::rlqs::SERVICE_NAME.into(),
        })
        .await
        .expect("health")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    s.stop().await;
}
