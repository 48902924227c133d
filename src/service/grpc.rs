//! The gRPC server: the RLS service (through the one request pipeline), gRPC health and reflection,
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
use super::overload::Gate;
use super::pipeline::Pipeline;
use super::rls::RlsService;
use super::tls::{self, ReloadingTls};
use crate::metrics::Metrics;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::settings::hardening::HardeningArgs;
use crate::store::Store;

/// What the gRPC server serves and how.
pub struct GrpcParts<'a, S, H> {
    /// The one request pipeline (limits, in-flight slot, limiter), shared with `POST /json`.
    pub pipeline: Pipeline<S>,
    pub metrics: Arc<Metrics>,
    pub hardening: &'a HardeningArgs,
    /// gRPC health, whose statuses the service state publishes.
    pub health: HealthServer<H>,
    pub tls: Option<Arc<ReloadingTls>>,
    /// `true` once the drain starts: each listener stops accepting and finishes its calls.
    pub stop: watch::Receiver<bool>,
}

/// A gRPC server ready to serve any number of listeners.
#[derive(Clone)]
pub struct GrpcServer {
    router: Router<Stack<EveryCallLayer, tower::layer::util::Identity>>,
    tls: Option<Arc<ReloadingTls>>,
    /// The connection cap and idle reaping, shared by every listener (serving thread).
    port: Arc<Port>,
    stop: watch::Receiver<bool>,
}

impl GrpcServer {
    /// Builds the router; fails only if the reflection service cannot be built.
    pub fn build<S: Store, H: Health>(
        parts: GrpcParts<'_, S, H>,
    ) -> Result<GrpcServer, tonic_reflection::server::Error> {
        let hard = parts.hardening;
        let rls = RateLimitServiceServer::new(
            RlsService::new(parts.pipeline.clone()).with_metrics(parts.metrics.clone()),
        )
        .max_decoding_message_size(parts.pipeline.limits().max_request_bytes);
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
            .max_concurrent_streams(hard.grpc_max_concurrent_streams)
            .http2_keepalive_interval(nonzero(hard.grpc_keepalive_interval))
            .http2_keepalive_timeout(nonzero(hard.grpc_keepalive_timeout));
        if let Some(age) = nonzero(hard.grpc_max_connection_age) {
            builder = builder
                .max_connection_age(age)
                .max_connection_age_grace(hard.grpc_max_connection_age_grace);
        }
        // 415 and idle reaping hold for every service of the port, so they wrap the router.
        let router = builder
            .layer(EveryCallLayer::new(Some(parts.metrics.clone())))
            .add_service(parts.health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(
                Gate::new(rls)
                    .with_reading(
                        parts.pipeline.limits().max_request_bytes,
                        hard.grpc_request_read_timeout,
                    )
                    .with_metrics(parts.metrics.clone()),
            );
        Ok(GrpcServer {
            router,
            tls: parts.tls,
            port: Port::new("grpc", hard.grpc_max_connections, hard.grpc_idle_timeout),
            stop: parts.stop,
        })
    }

    /// Serves `listener` until the drain has finished, on whichever runtime polls it.
    pub async fn serve(self, listener: TcpListener) -> Result<(), tonic::transport::Error> {
        let mut stop = self.stop;
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        match self.tls {
            None => {
                let incoming = accept::incoming(listener, self.port);
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
