//! The Rate Limit Quota Service: streams driven directly over gRPC (`streams.rs` as a table,
//! `sharing.rs` across streams, windows, reloads and replicas, `calls.rs` for what a report
//! and a renewal ask of the store, `bounds.rs` for the limits and errors, `store_failure.rs` for the failure policy), and end to end with real Envoy processes
//! (`envoy.rs`).

mod bounds;
mod calls;
mod envoy;
mod sharing;
mod store_failure;
mod streams;

use std::net::SocketAddr;
use std::time::Duration;

use sluice::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use sluice::proto::rlqs::rate_limit_quota_response::bucket_action::BucketAction as Action;
use sluice::proto::rlqs::rate_limit_quota_response::BucketAction;
use sluice::proto::rlqs::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluice::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice::proto::rlqs::{BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::support::channel;

/// One bucket's usage in a report: its id entries, allowed, denied.
pub type Usage<'a> = (&'a [(&'a str, &'a str)], u64, u64);

/// One RLQS stream, as one Envoy holds it.
pub struct Quota {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: Streaming<RateLimitQuotaResponse>,
}

/// The longest a test waits for an answer on a stream (a bound on a broken server, not a
/// timing).
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

impl Quota {
    /// Opens a stream to `addr`; the error is the server's refusal.
    pub async fn open(addr: SocketAddr) -> Result<Quota, Status> {
        let mut client = RateLimitQuotaServiceClient::new(channel(addr).await);
        let (tx, rx) = mpsc::channel(16);
        let rx = client
            .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Quota { tx, rx })
    }

    pub async fn send(&self, domain: &str, usages: &[Usage<'_>]) {
        let reports = RateLimitQuotaUsageReports {
            domain: domain.into(),
            bucket_quota_usages: usages
                .iter()
                .map(|(id, allowed, denied)| BucketQuotaUsage {
                    bucket_id: Some(bucket(id)),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 5,
                        nanos: 0,
                    }),
                    num_requests_allowed: *allowed,
                    num_requests_denied: *denied,
                })
                .collect(),
        };
        self.tx.send(reports).await.expect("stream open");
    }

    /// The next message from sluice (an error: the status the stream ended with).
    pub async fn next(&mut self) -> Result<RateLimitQuotaResponse, Status> {
        match tokio::time::timeout(ANSWER_WITHIN, self.rx.message()).await {
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => Err(Status::ok("the stream ended")),
            Ok(Err(status)) => Err(status),
            Err(_) => panic!("no answer within {ANSWER_WITHIN:?}"),
        }
    }

    /// Sends a report and returns the actions of the answer, summarized (see [`summarize`]).
    pub async fn report(&mut self, domain: &str, usages: &[Usage<'_>]) -> Vec<String> {
        self.send(domain, usages).await;
        let answer = self.next().await.expect("an answer");
        summarize(&answer).into_iter().map(|(_, s)| s).collect()
    }
}

pub fn bucket(id: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: id
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Each bucket's assignment in `r`, in order: `allow_all`, `deny_all`, `abandon`, `tokens N`
/// for a new grant (sent as `deny_all` then the token bucket, so that Envoy starts it full) or
/// `keep tokens N` for a grant in force whose TTL is renewed.
pub fn summarize(r: &RateLimitQuotaResponse) -> Vec<(BucketId, String)> {
    let mut out: Vec<(BucketId, String)> = Vec::new();
    for a in &r.bucket_action {
        let id = a.bucket_id.clone().expect("a bucket id");
        let s = summary(a);
        match out.last_mut() {
            Some((last, prev)) if *last == id && prev == "deny_all" && s.starts_with("tokens") => {
                *prev = s;
            }
            _ if s.starts_with("tokens") => out.push((id, format!("keep {s}"))),
            _ => out.push((id, s)),
        }
    }
    out
}

/// `allow_all`, `deny_all`, `tokens N` or `abandon`: one action.
pub fn summary(a: &BucketAction) -> String {
    match &a.bucket_action {
        Some(Action::AbandonAction(_)) => "abandon".into(),
        Some(Action::QuotaAssignmentAction(q)) => {
            assert!(
                q.assignment_time_to_live
                    .is_some_and(|t| t.seconds >= 1 && t.nanos == 0),
                "TTL in whole seconds: {q:?}"
            );
            match q
                .rate_limit_strategy
                .as_ref()
                .and_then(|s| s.strategy.as_ref())
            {
                Some(Strategy::BlanketRule(r)) if *r == BlanketRule::AllowAll as i32 => {
                    "allow_all".into()
                }
                Some(Strategy::BlanketRule(_)) => "deny_all".into(),
                Some(Strategy::TokenBucket(t)) => format!("tokens {}", t.max_tokens),
                other => panic!("unexpected strategy {other:?}"),
            }
        }
        None => panic!("an action without a kind: {a:?}"),
    }
}

/// The TTL of the last assignment of `r`, in seconds.
pub fn ttl_of(r: &RateLimitQuotaResponse) -> i64 {
    match &r.bucket_action.last().expect("an action").bucket_action {
        Some(Action::QuotaAssignmentAction(q)) => q.assignment_time_to_live.unwrap().seconds,
        other => panic!("not an assignment: {other:?}"),
    }
}
