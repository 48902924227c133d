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

/// Reports `counts` new buckets in turn on one stream of `addr` (ids `k=<first>..`); the
/// buckets answered, or the status the stream ended with.
async fn new_buckets(
    addr: std::net::SocketAddr,
    counts: &[usize],
    value: &str,
) -> Result<usize, tonic::Status> {
    let mut q = Quota::open(addr).await.expect("open");
    let mut answered = 0;
    let mut next = 0;
    for &n in counts {
        let ids: Vec<String> = (next..next + n).map(|i| format!("{i}-{value}")).collect();
        next += n;
        let pairs: Vec<[(&str, &str); 1]> = ids.iter().map(|v| [("k", v.as_str())]).collect();
        let usages: Vec<super::Usage<'_>> = pairs.iter().map(|p| (&p[..], 1, 0)).collect();
        q.send("q", &usages).await;
        let answer = q.next().await?;
        answered += super::summarize(&answer).len();
    }
    Ok(answered)
}

#[tokio::test]
async fn each_new_bucket_counts_once_against_the_bucket_cap() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--rlqs-max-buckets-per-stream", "1000"],
    )
    .await;
    let addr = s.server.grpc_addr;
    // (reports of new buckets, the cap holds them all)
    let cases: [(&[usize], bool); 6] = [
        (&[501], true),
        (&[400, 301], true),
        (&[500, 500], true),
        (&[1000], true),
        (&[1001], false),
        (&[500, 501], false),
    ];
    for (counts, fits) in cases {
        match new_buckets(addr, counts, "v").await {
            Ok(n) => {
                assert!(fits, "{counts:?}: all {n} answered, over the cap");
                assert_eq!(n, counts.iter().sum::<usize>(), "{counts:?}");
            }
            Err(status) => {
                assert!(!fits, "{counts:?}: {status:?}");
                assert_eq!(status.code(), Code::ResourceExhausted, "{counts:?}");
                assert!(
                    status.message().contains("--rlqs-max-buckets-per-stream"),
                    "{status:?}"
                );
            }
        }
    }
    s.stop().await;
}

/// Bytes a bucket of one 4 KiB value holds at least: its id, its share key and its demand
/// entry each hold the value (the request and the limit's key are built when assessed).
const AT_LEAST_PER_BIG_BUCKET: usize = 3 * 4096;

#[tokio::test]
async fn a_streams_buckets_are_bounded_by_their_bytes_ids_included() {
    let cap = 256 * 1024;
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--rlqs-max-bytes-per-stream", &cap.to_string()],
    )
    .await;
    let big = "x".repeat(4096);
    let mut q = Quota::open(s.server.grpc_addr).await.expect("open");
    let mut kept = 0;
    let status = loop {
        assert!(kept < 100, "100 buckets of 4 KiB kept within {cap} bytes");
        let v = format!("{kept}-{big}");
        q.send("q", &[(&[("k", v.as_str())], 1, 0)]).await;
        match q.next().await {
            Ok(_) => kept += 1,
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--rlqs-max-bytes-per-stream"),
        "{status:?}"
    );
    assert!(
        kept * AT_LEAST_PER_BIG_BUCKET <= cap,
        "{kept} buckets kept: their ids are not counted in full"
    );
    assert!(
        kept * AT_LEAST_PER_BIG_BUCKET * 2 >= cap,
        "only {kept} kept"
    );
    // Small buckets still fit in another stream: the cap is per stream.
    let small = new_buckets(s.server.grpc_addr, &[100], "v").await;
    assert_eq!(small.expect("answered"), 100);
    s.stop().await;
}

#[tokio::test]
async fn all_streams_buckets_are_bounded_by_their_bytes_and_given_back() {
    let cap = 256 * 1024;
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--rlqs-max-bytes", &cap.to_string()],
    )
    .await;
    let addr = s.server.grpc_addr;
    let bytes = || async {
        let (_, text) = crate::support::http::http_get(s.server.http_addr, "/metrics").await;
        crate::support::prom_text::sample(
            &crate::support::prom_text::parse_prometheus(&text),
            "sluice_rlqs_bytes",
            &[],
        )
        .unwrap_or(0.0)
    };
    let big = "x".repeat(4096);
    let v = |i: usize| format!("{i}-{big}");
    // A bystander holds a few buckets and keeps being answered.
    let mut bystander = Quota::open(addr).await.expect("open");
    let (a, b) = (v(1000), v(1001));
    let bystanders: [super::Usage<'_>; 2] =
        [(&[("k", a.as_str())], 1, 0), (&[("k", b.as_str())], 1, 0)];
    assert_eq!(bystander.report("q", &bystanders).await.len(), 2);
    let held = bytes().await;
    assert!(held >= (2 * AT_LEAST_PER_BIG_BUCKET) as f64, "{held}");
    // Another stream fills the rest until it is refused.
    let status = new_buckets(addr, &[1; 100], &big)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("--rlqs-max-bytes)"), "{status:?}");
    assert_eq!(bystander.report("q", &bystanders).await.len(), 2);
    // The refused stream's bytes are given back, then the bystander's.
    crate::support::poll::wait_until_async("the refused stream's bytes back", || async {
        bytes().await == held
    })
    .await;
    drop(bystander);
    crate::support::poll::wait_until_async("every byte back", || async { bytes().await == 0.0 })
        .await;
    assert!(new_buckets(addr, &[4], &big).await.is_ok());
    s.stop().await;
}
