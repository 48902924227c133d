//! The one request pipeline, whatever the wire (RLS over gRPC, `POST /json`, the native
//! `sluice.v1` API): size limits -> conversion to the model -> an in-flight slot -> the
//! limiter, under the caller's deadline -> errors as gRPC statuses. Each face only decodes its
//! wire format into a `RateLimitRequest` (the native API too: its requests are RLS requests
//! with string entries) and encodes the answer. Commit and Cancel carry no descriptors: they
//! take the slot and the deadline only.
//!
//! The in-flight slot is taken after the request is decoded and checked, so it is held only
//! while a decision is under way: a client that sends a request slowly holds no slot.

use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use super::convert;
use super::limits::RequestLimits;
use super::overload::InFlight;
use crate::limiter::{Explanation, LimitError, Limiter, NativeResponse, Response};
use crate::model::{Micros, Request};
use crate::proto::RateLimitRequest;
use crate::store::{Deadline, ErrorKind, Reservations, Store};

/// What a caller wants back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Response,
    Explained,
}

/// The pipeline, shared by the gRPC and HTTP servers (cheap to clone).
pub(crate) struct Pipeline<S> {
    limiter: Arc<Limiter<S>>,
    limits: RequestLimits,
    in_flight: Arc<InFlight>,
}

impl<S> Clone for Pipeline<S> {
    fn clone(&self) -> Self {
        Pipeline {
            limiter: self.limiter.clone(),
            limits: self.limits,
            in_flight: self.in_flight.clone(),
        }
    }
}

impl<S: Store> Pipeline<S> {
    pub(crate) fn new(
        limiter: Arc<Limiter<S>>,
        limits: RequestLimits,
        in_flight: Arc<InFlight>,
    ) -> Self {
        Pipeline {
            limiter,
            limits,
            in_flight,
        }
    }

    pub(crate) fn limits(&self) -> &RequestLimits {
        &self.limits
    }

    pub(crate) fn limiter(&self) -> &Arc<Limiter<S>> {
        &self.limiter
    }

    /// Decides `req`, answering within `timeout` (the caller's deadline) when given.
    pub(crate) async fn decide(
        &self,
        req: RateLimitRequest,
        timeout: Option<Duration>,
    ) -> Result<Response, Status> {
        let (response, _) = self.run(req, timeout, Want::Response).await?;
        Ok(response)
    }

    /// [`Self::decide`], telling how each descriptor was decided.
    pub(crate) async fn explain(
        &self,
        req: RateLimitRequest,
        timeout: Option<Duration>,
    ) -> Result<(Response, Vec<Explanation>), Status> {
        self.run(req, timeout, Want::Explained).await
    }

    /// The size of an encoded request against `--max-request-bytes` (for bodies whose size
    /// no decoder bounded, as the JSON API's).
    pub(crate) fn check_size(&self, bytes: usize) -> Result<(), Status> {
        if bytes > self.limits.max_request_bytes {
            return Err(Status::invalid_argument(format!(
                "request is {bytes} bytes, more than the limit of {} (--max-request-bytes)",
                self.limits.max_request_bytes
            )));
        }
        Ok(())
    }

    async fn run(
        &self,
        req: RateLimitRequest,
        timeout: Option<Duration>,
        want: Want,
    ) -> Result<(Response, Vec<Explanation>), Status> {
        self.validated(req, timeout, async |limiter, req, deadline| match want {
            Want::Response => limiter
                .should_rate_limit(req, deadline)
                .await
                .map(|r| (r, Vec::new())),
            Want::Explained => limiter.explain(req, deadline).await,
        })
        .await
    }

    /// The native API's Check: decides `req`, charging it unless `dry_run`.
    pub(crate) async fn check(
        &self,
        req: RateLimitRequest,
        dry_run: bool,
        timeout: Option<Duration>,
    ) -> Result<NativeResponse, Status> {
        self.validated(req, timeout, async |limiter, req, deadline| {
            limiter.check(req, dry_run, deadline).await
        })
        .await
    }

    /// Validates and converts `req`, then runs `job` on it under [`Self::slotted`].
    async fn validated<T>(
        &self,
        req: RateLimitRequest,
        timeout: Option<Duration>,
        job: impl AsyncFnOnce(&Limiter<S>, &Request, Deadline) -> Result<T, LimitError>,
    ) -> Result<T, Status> {
        self.limits.check(&req).map_err(Status::invalid_argument)?;
        let req = convert::request(req).map_err(Status::invalid_argument)?;
        tracing::Span::current().record("domain", req.domain.as_str());
        self.slotted(timeout, async |limiter, deadline| {
            job(limiter, &req, deadline).await
        })
        .await
    }

    /// Runs `job` holding an in-flight slot, within the caller's deadline.
    async fn slotted<T>(
        &self,
        timeout: Option<Duration>,
        job: impl AsyncFnOnce(&Limiter<S>, Deadline) -> Result<T, LimitError>,
    ) -> Result<T, Status> {
        let _slot = self.in_flight.try_take().ok_or_else(|| {
            Status::resource_exhausted(format!(
                "more than {} requests in flight (--max-in-flight); retry later",
                self.in_flight.max()
            ))
        })?;
        // The store sees the deadline too, so a slow Redis fails early enough for the
        // failure policy to answer in time.
        let deadline = Deadline::after(timeout);
        let work = job(&self.limiter, deadline);
        let result = match timeout {
            Some(t) => tokio::time::timeout(t, work).await.map_err(|_| {
                Status::deadline_exceeded("rate limit decision exceeded the request deadline")
            })?,
            None => work.await,
        };
        result.map_err(status)
    }
}

impl<S: Store + Reservations> Pipeline<S> {
    /// The native API's Reserve: charges `req` and holds it for `ttl`.
    pub(crate) async fn reserve(
        &self,
        req: RateLimitRequest,
        ttl: Micros,
        timeout: Option<Duration>,
    ) -> Result<(NativeResponse, Option<String>), Status> {
        self.validated(req, timeout, async |limiter, req, deadline| {
            limiter.reserve(req, ttl, deadline).await
        })
        .await
    }

    /// The native API's Commit.
    pub(crate) async fn commit(
        &self,
        id: &str,
        actual_hits: u64,
        timeout: Option<Duration>,
    ) -> Result<(), Status> {
        self.slotted(timeout, async |limiter, deadline| {
            limiter.commit(id, actual_hits, deadline).await
        })
        .await
    }

    /// The native API's Cancel.
    pub(crate) async fn cancel(&self, id: &str, timeout: Option<Duration>) -> Result<(), Status> {
        self.slotted(timeout, async |limiter, deadline| {
            limiter.cancel(id, deadline).await
        })
        .await
    }
}

/// A limiter error as the gRPC status both faces answer with.
fn status(e: LimitError) -> Status {
    match e {
        LimitError::InvalidArgument(m) => Status::invalid_argument(m),
        LimitError::PermissionDenied(m) => Status::permission_denied(m),
        LimitError::Unavailable(m) => Status::unavailable(m),
        LimitError::NotFound(m) => Status::not_found(m),
        LimitError::FailedPrecondition(m) => Status::failed_precondition(m),
        LimitError::DeadlineExceeded(m) => Status::deadline_exceeded(m),
        LimitError::Store(e) if e.kind() == ErrorKind::Full => {
            Status::resource_exhausted(e.to_string())
        }
        LimitError::Store(e) => Status::unavailable(e.to_string()),
        LimitError::ResourceExhausted(m) => Status::resource_exhausted(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::{Code, LimiterOptions};
    use crate::proto::rate_limit_descriptor::Entry;
    use crate::proto::RateLimitDescriptor;
    use crate::store::MemoryStore;

    fn pipeline(in_flight: Arc<InFlight>) -> Pipeline<MemoryStore> {
        let limiter = Limiter::new(
            MemoryStore::new(1_000),
            Arc::new(ManualClock::new(1_000_000_000)),
            LimiterOptions::default(),
        );
        let file = crate::config::ConfigFile {
            path: "t.yaml".into(),
            content: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n".into(),
        };
        let rules = crate::config::compile(&[file], Default::default()).expect("valid");
        limiter.set_rules(Arc::new(rules));
        let limits = RequestLimits {
            max_entries: 2,
            ..RequestLimits::default()
        };
        Pipeline::new(Arc::new(limiter), limits, in_flight)
    }

    fn request(entries: usize) -> RateLimitRequest {
        RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: (0..entries)
                    .map(|_| Entry {
                        key: b"k".to_vec(),
                        value: b"v".to_vec(),
                    })
                    .collect(),
                ..Default::default()
            }],
            hits_addend: 0,
        }
    }

    #[tokio::test]
    async fn every_stage_answers_with_its_status() {
        let in_flight = InFlight::new(1);
        let p = pipeline(in_flight.clone());
        let r = p.decide(request(1), None).await.expect("decided");
        assert_eq!(r.overall, Code::Ok);
        let (r, e) = p.explain(request(1), None).await.expect("decided");
        assert_eq!((r.overall, e.len()), (Code::OverLimit, 1));
        let e = p.decide(request(3), None).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("--max-entries"), "{}", e.message());
        let e = p.decide(request(0), None).await.unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::InvalidArgument,
            "converted: no entries"
        );
        assert_eq!(
            p.check_size(262_145).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        // Every slot taken: refused at once.
        let held = in_flight.try_take().expect("the only slot");
        let e = p.decide(request(1), None).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(in_flight.rejected(), 1);
        drop(held);
        assert_eq!(in_flight.current(), 0);
    }
}
