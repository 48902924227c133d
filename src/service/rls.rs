//! `envoy.service.ratelimit.v3.RateLimitService` over tonic.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::code_name::grpc_code_name;
use super::pipeline::Pipeline;
use super::{convert, propagation};
use crate::metrics::Metrics;
use crate::proto::rate_limit_response::Code as ProtoCode;
use crate::proto::rate_limit_service_server::RateLimitService;
use crate::proto::{RateLimitRequest, RateLimitResponse};
use crate::store::Store;

pub(crate) struct RlsService<S> {
    pipeline: Pipeline<S>,
    metrics: Option<Arc<Metrics>>,
}

impl<S> RlsService<S> {
    pub(crate) fn new(pipeline: Pipeline<S>) -> Self {
        RlsService {
            pipeline,
            metrics: None,
        }
    }

    /// Counts requests and their latency by result code.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

impl<S: Store> RlsService<S> {
    async fn answer(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Envoy sends its filter timeout as `grpc-timeout`: an answer after it is useless.
        let timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(convert::grpc_timeout);
        let r = self.pipeline.decide(request.into_inner(), timeout).await?;
        Ok(Response::new(convert::response(r)))
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RlsService<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = self.pipeline.limiter().clock().monotonic();
        // TRACE level under its own target: free unless OTLP tracing is on (see main.rs).
        let span = tracing::trace_span!(
            target: "sluice::otel",
            "ShouldRateLimit",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
            rpc.method = "ShouldRateLimit",
            domain = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if !span.is_disabled() {
            let _ = span.set_parent(propagation::extract(request.metadata()));
        }
        let result = self.answer(request).instrument(span.clone()).await;
        let code = match &result {
            Ok(r) if r.get_ref().overall_code == ProtoCode::OverLimit as i32 => "OVER_LIMIT",
            Ok(_) => "OK",
            Err(s) => grpc_code_name(s.code()),
        };
        span.record("code", code);
        if let Some(m) = &self.metrics {
            m.rpc_since("ShouldRateLimit", code, started);
        }
        result
    }
}
