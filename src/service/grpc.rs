//! The gRPC server: the RLS service and the native `sluice.v1.RateLimiter` (both through the
//! one request pipeline, each behind the gate), the RLQS service, gRPC health and reflection,
//! with the HTTP/2 settings of the hardening flags, served on one listener (plain or TLS).
//! Built once and cloned per listener, so `--grpc-threads` serves the same router on each
//! thread's own runtime.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::Router;
use tonic_health::pb::health_server::{Health, HealthServer};
use tower::layer::util::Stack;

use super::accept::{self, Port};
use super::every_call::EveryCallLayer;
use super::native::NativeService;
use super::overload::Gate;
use super::pipeline::Pipeline;
use super::rlqs::{Rlqs, RlqsOptions};
use super::rls::RlsService;
use super::tls::{self, ReloadingTls};
use crate::metrics::Metrics;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::sluice::v1::rate_limiter_server::RateLimiterServer;
use crate::store::{Reservations, Store};

/// The gRPC port's bounds and HTTP/2 settings (the hardening flags, converted by `app/`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GrpcLimits {
    pub request_read_timeout: Duration,
    pub max_concurrent_streams: u32,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    pub max_connection_age: Duration,
    pub max_connection_age_grace: Duration,
    pub max_connections: usize,
    pub idle_timeout: Duration,
    pub preface_timeout: Duration,
}

/// What the gRPC server serves and how.
pub(crate) struct GrpcParts<S, H> {
    /// The one request pipeline (limits, in-flight slot, limiter), shared with `POST /json`.
    pub pipeline: Pipeline<S>,
    pub metrics: Arc<Metrics>,
    pub limits: GrpcLimits,
    /// gRPC health, whose statuses the service state publishes.
    pub health: HealthServer<H>,
    pub tls: Option<Arc<ReloadingTls>>,
    /// The Rate Limit Quota Service's bounds and TTL.
    pub rlqs: RlqsOptions,
    /// `true` once the drain starts: each listener stops accepting and finishes its calls.
    pub stop: watch::Receiver<bool>,
}

/// A gRPC server ready to serve any number of listeners.
#[derive(Clone)]
pub(crate) struct GrpcServer {
    router: Router<Stack<EveryCallLayer, tower::layer::util::Identity>>,
    tls: Option<Arc<ReloadingTls>>,
    /// The connection cap and idle reaping, shared by every listener (serving thread).
    port: Arc<Port>,
    /// `--grpc-preface-timeout`.
    preface: Duration,
    stop: watch::Receiver<bool>,
}

impl GrpcServer {
    /// Builds the router; fails only if the reflection service cannot be built.
    pub(crate) fn build<S: Store + Reservations, H: Health>(
        parts: GrpcParts<S, H>,
    ) -> Result<GrpcServer, tonic_reflection::server::Error> {
        let hard = parts.limits;
        let rls = RateLimitServiceServer::new(
            RlsService::new(parts.pipeline.clone()).with_metrics(parts.metrics.clone()),
        )
        .max_decoding_message_size(parts.pipeline.limits().max_request_bytes);
        // Streams, so not behind the Gate (which reads a whole body); bounded by its own flags.
        let rlqs = Rlqs::new(
            parts.pipeline.limiter().clone(),
            parts.rlqs,
            parts.metrics.clone(),
            parts.stop.clone(),
        )
        .server();
        let native = RateLimiterServer::new(
            NativeService::new(parts.pipeline.clone()).with_metrics(parts.metrics.clone()),
        )
        .max_decoding_message_size(parts.pipeline.limits().max_request_bytes);
        let (max_bytes, read_timeout) = (
            parts.pipeline.limits().max_request_bytes,
            hard.request_read_timeout,
        );
        // Server reflection, so grpcurl and similar tools need no .proto files.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        let mut builder = tonic::transport::Server::builder()
            .max_concurrent_streams(hard.max_concurrent_streams)
            .http2_keepalive_interval(nonzero(hard.keepalive_interval))
            .http2_keepalive_timeout(nonzero(hard.keepalive_timeout));
        if let Some(age) = nonzero(hard.max_connection_age) {
            builder = builder
                .max_connection_age(age)
                .max_connection_age_grace(hard.max_connection_age_grace);
        }
        // 415 and idle reaping hold for every service of the port, so they wrap the router.
        let router = builder
            .layer(EveryCallLayer::new(Some(parts.metrics.clone())))
            .add_service(parts.health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(rlqs)
            .add_service(
                Gate::new(rls)
                    .with_reading(max_bytes, read_timeout)
                    .with_metrics(parts.metrics.clone()),
            )
            .add_service(
                Gate::new(native)
                    .with_reading(max_bytes, read_timeout)
                    .with_metrics(parts.metrics.clone()),
            );
        Ok(GrpcServer {
            router,
            tls: parts.tls,
            port: Port::new(
                "grpc",
                hard.max_connections,
                hard.idle_timeout,
                parts.pipeline.limiter().clock().clone(),
            ),
            preface: hard.preface_timeout,
            stop: parts.stop,
        })
    }

    /// Serves `listener` until the drain has finished, on whichever runtime polls it.
    pub(crate) async fn serve(self, listener: TcpListener) -> Result<(), tonic::transport::Error> {
        let mut stop = self.stop;
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        match self.tls {
            None => {
                let incoming = accept::incoming(listener, self.port, self.preface);
                self.router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
            }
            Some(tls) => {
                self.router
                    .serve_with_incoming_shutdown(tls::incoming(listener, tls, self.port), shutdown)
                    .await
            }
        }
    }
}
