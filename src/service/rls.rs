//! `envoy.service.ratelimit.v3.RateLimitService` over tonic.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert;
use super::limits::RequestLimits;
use crate::limiter::{LimitError, Limiter};
use crate::proto::rate_limit_service_server::RateLimitService;
use crate::proto::{RateLimitRequest, RateLimitResponse};
use crate::store::Store;

pub struct RlsService<S> {
    limiter: Arc<Limiter<S>>,
    limits: RequestLimits,
}

impl<S> RlsService<S> {
    pub fn new(limiter: Arc<Limiter<S>>) -> Self {
        RlsService {
            limiter,
            limits: RequestLimits::default(),
        }
    }

    /// Replaces the default request size limits.
    pub fn with_limits(mut self, limits: RequestLimits) -> Self {
        self.limits = limits;
        self
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RlsService<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Envoy sends its filter timeout as `grpc-timeout`: an answer after it is useless.
        let deadline = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(convert::grpc_timeout);
        let req = request.into_inner();
        self.limits.check(&req).map_err(Status::invalid_argument)?;
        let req = convert::request(req).map_err(Status::invalid_argument)?;
        let work = self.limiter.should_rate_limit(&req);
        let result = match deadline {
            Some(d) => tokio::time::timeout(d, work).await.map_err(|_| {
                Status::deadline_exceeded("rate limit decision exceeded the request deadline")
            })?,
            None => work.await,
        };
        match result {
            Ok(r) => Ok(Response::new(convert::response(r))),
            Err(LimitError::InvalidArgument(m)) => Err(Status::invalid_argument(m)),
            Err(LimitError::PermissionDenied(m)) => Err(Status::permission_denied(m)),
            Err(LimitError::Unavailable(m)) => Err(Status::unavailable(m)),
            Err(LimitError::Store(e)) => Err(Status::unavailable(e.to_string())),
        }
    }
}
