//! The Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3`), for Envoy's
//! `rate_limit_quota` filter: one bidirectional stream per Envoy, usage reports in, bucket
//! assignments out. Buckets are matched by the limiter's rules (`bucket.rs`), reports are
//! charged to the same store as RLS decisions and shares granted by `limiter::share`
//! (`assign.rs`); `stream.rs` runs one stream. The stream count, the buckets per stream, their
//! bytes (`budget.rs`) and the report size are bounded (`RlqsOptions`).

pub(crate) mod assign;
pub(crate) mod bucket;
pub(crate) mod budget;
pub(crate) mod stream;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream as FuturesStream, StreamExt};
use opentelemetry::KeyValue;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::code_name::grpc_code_name;
use super::limits::RequestLimits;
use crate::limiter::share::Demands;
use crate::limiter::Limiter;
use crate::metrics::RlqsMetrics;
use crate::proto::rlqs::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use crate::quiet::QuietWarn;
use crate::store::Store;

/// The gRPC service name (for health and reflection).
pub const SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// The bounds and timing of the service (the `--rlqs-*` flags).
#[derive(Clone, Debug)]
pub struct RlqsOptions {
    pub assignment_ttl: Duration,
    pub max_streams: usize,
    pub max_buckets_per_stream: usize,
    pub max_report_bytes: usize,
    /// The bytes one stream's buckets may hold ([`budget`]).
    pub max_bytes_per_stream: usize,
    /// The bytes every stream's buckets may hold together.
    pub max_bytes: usize,
    /// The sizes a bucket id is held to: those of an RLS descriptor.
    pub limits: RequestLimits,
}

/// What every stream of this process shares.
#[derive(Default)]
pub struct Shared {
    streams: AtomicUsize,
    /// The bytes every stream's buckets hold ([`budget`]).
    bytes: AtomicUsize,
    next_id: AtomicU64,
    /// Each stream's demand per bucket, for the shares.
    demands: Mutex<Demands>,
    store_failed: QuietWarn,
}

impl Shared {
    fn forget(&self, key: &[u8], stream: u64) {
        self.demands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key, stream);
    }
}

/// The service (cheap to clone: one per serving thread).
pub struct Rlqs<S> {
    limiter: Arc<Limiter<S>>,
    options: Arc<RlqsOptions>,
    shared: Arc<Shared>,
    metrics: Arc<RlqsMetrics>,
    /// `true` once the drain starts: streams end with UNAVAILABLE.
    stop: watch::Receiver<bool>,
}

impl<S> Clone for Rlqs<S> {
    fn clone(&self) -> Self {
        Rlqs {
            limiter: self.limiter.clone(),
            options: self.options.clone(),
            shared: self.shared.clone(),
            metrics: self.metrics.clone(),
            stop: self.stop.clone(),
        }
    }
}

impl<S: Store> Rlqs<S> {
    pub fn new(
        limiter: Arc<Limiter<S>>,
        options: RlqsOptions,
        metrics: Arc<crate::metrics::Metrics>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Rlqs {
            limiter,
            options: Arc::new(options),
            shared: Arc::new(Shared::default()),
            metrics: Arc::new(metrics.rlqs.clone()),
            stop,
        }
    }

    /// The tonic server, with the report size bound.
    pub fn server(self) -> RateLimitQuotaServiceServer<Self> {
        let max = self.options.max_report_bytes;
        RateLimitQuotaServiceServer::new(self).max_decoding_message_size(max)
    }

    fn ended(&self, code: tonic::Code) {
        self.metrics
            .stream_ends
            .add(1, &[KeyValue::new("code", grpc_code_name(code))]);
    }
}

/// Releases a stream's slot when its task ends, however it ends.
struct Slot {
    shared: Arc<Shared>,
    metrics: Arc<RlqsMetrics>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.streams.fetch_sub(1, Ordering::SeqCst);
        self.metrics.streams.add(-1, &[]);
    }
}

type Outbound = Pin<Box<dyn FuturesStream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Store> RateLimitQuotaService for Rlqs<S> {
    type StreamRateLimitQuotasStream = Outbound;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let max = self.options.max_streams;
        let taken = self.shared.streams.fetch_add(1, Ordering::SeqCst);
        if taken >= max {
            self.shared.streams.fetch_sub(1, Ordering::SeqCst);
            self.ended(tonic::Code::ResourceExhausted);
            return Err(Status::resource_exhausted(format!(
                "{max} RLQS streams are open already (--rlqs-max-streams)"
            )));
        }
        self.metrics.streams.add(1, &[]);
        let slot = Slot {
            shared: self.shared.clone(),
            metrics: self.metrics.clone(),
        };
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        // One answer waits at most; beyond one, the stream waits (backpressure). Queued
        // answers hold packed ids: the wire messages, whose ids are maps (hundreds of bytes
        // each), are built only when tonic takes an answer to encode, which it does once
        // HTTP/2 flow control lets it send (`bucket::Pending`).
        let (tx, rx) = mpsc::channel(1);
        let ttl = self.options.assignment_ttl;
        let answers =
            ReceiverStream::new(rx).map(move |answer: Result<Vec<bucket::Pending>, Status>| {
                answer.map(|pending| {
                    let mut bucket_action = Vec::with_capacity(pending.len());
                    for p in &pending {
                        p.to_wire(ttl, &mut bucket_action);
                    }
                    RateLimitQuotaResponse { bucket_action }
                })
            });
        let this = self.clone();
        let inbound = request.into_inner();
        tokio::spawn(async move {
            let _slot = slot;
            let code = stream::Stream::new(this.clone(), id).run(inbound, tx).await;
            this.ended(code);
        });
        Ok(Response::new(Box::pin(answers)))
    }
}
