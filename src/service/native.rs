//! `sluice.v1.RateLimiter` over tonic: the native API's messages <-> the pipeline. A request's
//! descriptors become an RLS request (UTF-8 strings as bytes, `hits` as `hits_addend`), so
//! size limits and validation are the RLS API's own; reservations go to the limiter's
//! reservation stages. Errors: INVALID_ARGUMENT (bad request, `ttl` missing or out of range,
//! `actual_hits` too large, empty `reservation_id`), FAILED_PRECONDITION (Reserve in a domain
//! without `allow_reservations: true`), NOT_FOUND (a reservation unknown, expired or settled
//! already), and the RLS API's UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::code_name::grpc_code_name;
use super::convert;
use super::pipeline::Pipeline;
use crate::limiter::{NativeResponse, NativeStatus};
use crate::metrics::Metrics;
use crate::model::{Micros, MICROS_PER_SEC};
use crate::proto::rate_limit_descriptor::Entry as RlsEntry;
use crate::proto::sluice::v1 as pb;
use crate::proto::sluice::v1::rate_limiter_server::RateLimiter;
use crate::proto::{RateLimitDescriptor, RateLimitRequest};
use crate::store::{Reservations, Store};

/// The longest `ttl` a reservation may ask for: reservations cover one unit of work (an LLM
/// call, a job), and a forgotten one holds quota until then.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

pub(crate) struct NativeService<S> {
    pipeline: Pipeline<S>,
    metrics: Option<Arc<Metrics>>,
}

impl<S> NativeService<S> {
    pub(crate) fn new(pipeline: Pipeline<S>) -> Self {
        NativeService {
            pipeline,
            metrics: None,
        }
    }

    /// Counts requests and their latency by method and result code.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn count<T>(&self, method: &'static str, started: std::time::Instant, r: &Result<T, Status>) {
        if let Some(m) = &self.metrics {
            let code = match r {
                Ok(_) => "OK",
                Err(s) => grpc_code_name(s.code()),
            };
            m.rpc_since(method, code, started);
        }
    }
}

/// The caller's `grpc-timeout`.
fn timeout<T>(r: &Request<T>) -> Option<Duration> {
    r.metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(convert::grpc_timeout)
}

/// The native descriptors as an RLS request (validated by the pipeline as RLS requests are).
fn rls_request(domain: String, descriptors: Vec<pb::Descriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain,
        descriptors: descriptors
            .into_iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| RlsEntry {
                        key: e.key.into_bytes(),
                        value: e.value.into_bytes(),
                    })
                    .collect(),
                hits_addend: d.hits,
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// A reservation's `ttl`: required, above zero, at most [`MAX_TTL`].
fn ttl(d: Option<prost_types::Duration>) -> Result<Micros, Status> {
    let d = d.ok_or_else(|| Status::invalid_argument("ttl is required"))?;
    let us = i128::from(d.seconds) * i128::from(MICROS_PER_SEC) + i128::from(d.nanos) / 1_000;
    let max = MAX_TTL.as_micros() as i128;
    if us <= 0 || us > max || d.nanos < 0 {
        return Err(Status::invalid_argument(format!(
            "ttl must be above zero and at most {}s",
            MAX_TTL.as_secs()
        )));
    }
    Ok(us as Micros)
}

fn status(s: NativeStatus) -> pb::DescriptorStatus {
    pb::DescriptorStatus {
        allowed: s.allowed,
        limit: s.limit.map(|l| pb::Limit {
            name: l.name,
            requests: l.requests,
            window: Some(convert::duration(l.window)),
            algorithm: l.algorithm.as_str().to_string(),
        }),
        remaining: s.remaining,
        reset_after: s.reset_after.map(convert::duration),
        retry_after: s.retry_after.map(convert::duration),
    }
}

fn parts(
    r: NativeResponse,
) -> (
    bool,
    Vec<pb::DescriptorStatus>,
    std::collections::HashMap<String, String>,
) {
    (
        r.allowed,
        r.statuses.into_iter().map(status).collect(),
        r.headers.into_iter().collect(),
    )
}

#[tonic::async_trait]
impl<S: Store + Reservations> RateLimiter for NativeService<S> {
    async fn check(
        &self,
        request: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckResponse>, Status> {
        let started = self.pipeline.limiter().clock().monotonic();
        let timeout = timeout(&request);
        let r = request.into_inner();
        let result = self
            .pipeline
            .check(rls_request(r.domain, r.descriptors), r.dry_run, timeout)
            .await
            .map(|n| {
                let (allowed, statuses, headers) = parts(n);
                Response::new(pb::CheckResponse {
                    allowed,
                    statuses,
                    headers,
                })
            });
        self.count("Check", started, &result);
        result
    }

    async fn reserve(
        &self,
        request: Request<pb::ReserveRequest>,
    ) -> Result<Response<pb::ReserveResponse>, Status> {
        let started = self.pipeline.limiter().clock().monotonic();
        let timeout = timeout(&request);
        let r = request.into_inner();
        let result = match ttl(r.ttl) {
            Err(e) => Err(e),
            Ok(ttl) => self
                .pipeline
                .reserve(rls_request(r.domain, r.descriptors), ttl, timeout)
                .await
                .map(|(n, id)| {
                    let (allowed, statuses, headers) = parts(n);
                    Response::new(pb::ReserveResponse {
                        allowed,
                        statuses,
                        reservation_id: id.unwrap_or_default(),
                        headers,
                    })
                }),
        };
        self.count("Reserve", started, &result);
        result
    }

    async fn commit(
        &self,
        request: Request<pb::CommitRequest>,
    ) -> Result<Response<pb::CommitResponse>, Status> {
        let started = self.pipeline.limiter().clock().monotonic();
        let timeout = timeout(&request);
        let r = request.into_inner();
        let result = if r.actual_hits > u64::from(u32::MAX) {
            Err(Status::invalid_argument(format!(
                "actual_hits {} exceeds {}",
                r.actual_hits,
                u32::MAX
            )))
        } else {
            self.pipeline
                .commit(&r.reservation_id, r.actual_hits, timeout)
                .await
                .map(|()| Response::new(pb::CommitResponse {}))
        };
        self.count("Commit", started, &result);
        result
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let started = self.pipeline.limiter().clock().monotonic();
        let timeout = timeout(&request);
        let r = request.into_inner();
        let result = self
            .pipeline
            .cancel(&r.reservation_id, timeout)
            .await
            .map(|()| Response::new(pb::CancelResponse {}));
        self.count("Cancel", started, &result);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        let d = |seconds, nanos| Some(prost_types::Duration { seconds, nanos });
        assert_eq!(ttl(d(1, 500_000_000)).ok(), Some(1_500_000));
        assert_eq!(ttl(d(86_400, 0)).ok(), Some(86_400_000_000));
        for bad in [None, d(0, 0), d(-1, 0), d(86_400, 1_000), d(0, -5)] {
            assert_eq!(ttl(bad).unwrap_err().code(), tonic::Code::InvalidArgument);
        }
    }
}
