//! OpenTelemetry metrics of one server: the per-rule counters of [`crate::stats`] and the
//! service's own instruments, read through a Prometheus registry (`/metrics`) and, with
//! `--otlp-endpoint`, pushed over OTLP/gRPC (the standard `OTEL_*` variables apply).
//!
//! Each server owns its meter provider (nothing global), so tests can run several servers in
//! one process.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use opentelemetry::metrics::{Counter, Histogram, MeterProvider, UpDownCounter};
use opentelemetry_sdk::metrics::{Instrument, PeriodicReader, SdkMeterProvider, Stream};
use opentelemetry_sdk::Resource;
use prometheus::{Encoder, TextEncoder};

mod observables;
mod rpc;

use crate::clock::Clock;
use crate::stats::StatsRegistry;

/// Bucket bounds (seconds) of config loads: a few rules load in a millisecond, 100,000 in
/// about a second.
const LOAD_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Latency buckets, in seconds: a rate-limit decision should take well under Envoy's 20 ms.
const LATENCY_BUCKETS: [f64; 13] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
];

/// How the metrics are set up.
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    /// Push over OTLP/gRPC to this endpoint (e.g. `http://collector:4317`).
    pub otlp_endpoint: Option<String>,
    /// Most stats keys built from request values (`detailed_metric`, `value_to_metric`).
    pub max_dynamic_keys: usize,
    /// `near_limit` counts hits above this share of a limit.
    pub near_limit_ratio: f32,
}

/// Reads a gauge value; `None` when its source is gone.
pub type ReadU64 = Box<dyn Fn() -> Option<u64> + Send + Sync>;
/// Reads an in-memory store's [`MemoryCounts`] (`None` once the store is gone).
pub type ReadMemory = Box<dyn Fn() -> Option<MemoryCounts> + Send + Sync>;

/// What an in-memory store reports to metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryCounts {
    pub entries: u64,
    pub bytes: u64,
    /// Keys forgotten before they expired because the store was full.
    pub evictions: u64,
    /// Of those, keys that were over their limit at the time.
    pub evictions_over_limit: u64,
}

/// Reads the Redis state: (connected, breaker open); `None` once the store is gone.
pub type ReadRedis = Box<dyn Fn() -> Option<(bool, bool)> + Send + Sync>;

/// What the store gauges read at collection time, given by the wiring when it builds the
/// metrics (the stores come first). Each reader holds its store weakly: its gauge ends with it.
#[derive(Default)]
pub struct StoreSources {
    /// Entries of each in-memory store, by role (`primary`, `fallback`).
    pub memory: Vec<(&'static str, ReadMemory)>,
    /// Redis connection state: (connected, breaker open).
    pub redis: Option<ReadRedis>,
}

/// Values the gauges read at collection time.
pub struct GaugeSources {
    /// The number of the rule set in use (0 before the first good config), set by reloads.
    pub generation: AtomicU64,
    /// 1 while the xDS config source has a stream open (0 without one, or with files).
    pub xds_connected: Arc<AtomicU64>,
    stores: StoreSources,
}

/// The instruments of one server.
pub struct Metrics {
    provider: SdkMeterProvider,
    registry: prometheus::Registry,
    pub stats: Arc<StatsRegistry>,
    pub gauges: Arc<GaugeSources>,
    /// `sluice.rpc.requests` {method, code} and `sluice.rpc.duration` (s) {method, code}.
    rpc: rpc::RpcInstruments,
    /// `sluice.store.duration` (s) {backend}.
    pub store_duration: Histogram<f64>,
    /// `sluice.store.errors` {backend, kind, policy}.
    pub store_errors: Counter<u64>,
    /// `sluice.config.loads` {result}.
    pub config_loads: Counter<u64>,
    /// `sluice.config.load.duration` (s) {result}: read, parse, validate, compile and swap.
    pub config_load_duration: Histogram<f64>,
    /// `sluice.xds.updates` {result: applied, rejected}: xDS snapshots ACKed and NACKed.
    pub xds_updates: Counter<u64>,
    pub rlqs: RlqsMetrics,
    /// Times what the instruments measure (latencies), so tests can drive it.
    clock: Arc<dyn Clock>,
}

/// The instruments of the Rate Limit Quota Service.
#[derive(Clone)]
pub struct RlqsMetrics {
    /// `sluice.rlqs.streams`: streams open now.
    pub streams: UpDownCounter<i64>,
    /// `sluice.rlqs.bytes`: bytes the streams' buckets hold (capped by --rlqs-max-bytes).
    pub bytes: UpDownCounter<i64>,
    /// `sluice.rlqs.stream.ends` {code}: streams ended or refused, by gRPC code.
    pub stream_ends: Counter<u64>,
    /// `sluice.rlqs.reports`: usage reports received.
    pub reports: Counter<u64>,
    /// `sluice.rlqs.requests` {outcome}: requests Envoy reported allowed or denied.
    pub requests: Counter<u64>,
    /// `sluice.rlqs.assignments` {action}: bucket actions sent (allow_all, deny_all,
    /// token_bucket, abandon).
    pub assignments: Counter<u64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Why the metrics pipeline could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot build the Prometheus exporter: {0}")]
    Prometheus(String),
    #[error("cannot build the OTLP metrics exporter: {0}")]
    Otlp(String),
}

impl Metrics {
    /// Builds the pipeline; with an OTLP endpoint, must run inside a Tokio runtime.
    pub fn new(
        opts: &MetricsOptions,
        stores: StoreSources,
        clock: Arc<dyn Clock>,
    ) -> Result<Metrics, MetricsError> {
        let registry = prometheus::Registry::new();
        let prom = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_target_info()
            .scope_info_enabled(false)
            .build()
            .map_err(|e| MetricsError::Prometheus(e.to_string()))?;
        let stats = Arc::new(StatsRegistry::new(
            opts.near_limit_ratio,
            opts.max_dynamic_keys,
        ));
        // The stats registry bounds the label sets itself; lift the SDK's default limit of
        // 2000 per instrument so it never folds keys into an overflow series.
        let per_rule_limit = opts.max_dynamic_keys.saturating_add(100_000);
        let mut builder = SdkMeterProvider::builder()
            .with_resource(resource())
            .with_reader(prom)
            .with_view(move |i: &Instrument| {
                i.name()
                    .starts_with("sluice.rate_limit.")
                    .then(|| {
                        Stream::builder()
                            .with_cardinality_limit(per_rule_limit)
                            .build()
                            .ok()
                    })
                    .flatten()
            });
        if let Some(endpoint) = &opts.otlp_endpoint {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| MetricsError::Otlp(e.to_string()))?;
            // OTEL_METRIC_EXPORT_INTERVAL sets the interval (default 60 s).
            builder = builder.with_reader(PeriodicReader::builder(exporter).build());
        }
        let provider = builder.build();
        let meter = provider.meter("sluice");
        let gauges = Arc::new(GaugeSources {
            generation: AtomicU64::new(0),
            xds_connected: Arc::new(AtomicU64::new(0)),
            stores,
        });
        observables::register_observables(&meter, &stats, &gauges);
        Ok(Metrics {
            clock,
            rpc: rpc::RpcInstruments::new(
                meter
                .u64_counter("sluice.rpc.requests")
                .with_description("Requests answered, by method and result code")
                .build(),
                meter
                .f64_histogram("sluice.rpc.duration")
                .with_unit("s")
                .with_description("Time to answer a request, by method and result code")
                .with_boundaries(LATENCY_BUCKETS.to_vec())
                .build(),
            ),
            store_duration: meter
                .f64_histogram("sluice.store.duration")
                .with_unit("s")
                .with_description("Time of one store decision (all checks of a request)")
                .with_boundaries(LATENCY_BUCKETS.to_vec())
                .build(),
            store_errors: meter
                .u64_counter("sluice.store.errors")
                .with_description(
                    "Store failures by kind, and the failure policy that answered instead",
                )
                .build(),
            config_loads: meter
                .u64_counter("sluice.config.loads")
                .with_description("Config loads (start-up and reloads) by result")
                .build(),
            config_load_duration: meter
                .f64_histogram("sluice.config.load.duration")
                .with_unit("s")
                .with_description(
                    "Time of a config load (read, parse, validate, compile, swap) by result",
                )
                .with_boundaries(LOAD_BUCKETS.to_vec())
                .build(),
            xds_updates: meter
                .u64_counter("sluice.xds.updates")
                .with_description("xDS snapshots received, by result (applied: ACK, rejected: NACK)")
                .build(),
            rlqs: RlqsMetrics {
                streams: meter
                    .i64_up_down_counter("sluice.rlqs.streams")
                    .with_description("RLQS streams open")
                    .build(),
                bytes: meter
                    .i64_up_down_counter("sluice.rlqs.bytes")
                    .with_description(
                        "Bytes held by the buckets of every RLQS stream (capped by --rlqs-max-bytes)",
                    )
                    .build(),
                stream_ends: meter
                    .u64_counter("sluice.rlqs.stream.ends")
                    .with_description("RLQS streams ended or refused, by gRPC code")
                    .build(),
                reports: meter
                    .u64_counter("sluice.rlqs.reports")
                    .with_description("RLQS usage reports received")
                    .build(),
                requests: meter
                    .u64_counter("sluice.rlqs.requests")
                    .with_description("Requests RLQS clients reported, by outcome (allowed, denied)")
                    .build(),
                assignments: meter
                    .u64_counter("sluice.rlqs.assignments")
                    .with_description(
                        "RLQS bucket actions sent, by action (allow_all, deny_all, token_bucket, abandon)",
                    )
                    .build(),
            },
            provider,
            registry,
            stats,
            gauges,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Every series of the counter family `name` (its Prometheus name, e.g.
    /// `sluice_rpc_requests_total`): its labels and value.
    pub fn counter_values(&self, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
        self.registry
            .gather()
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric().iter())
            .map(|m| {
                let labels = m
                    .get_label()
                    .iter()
                    .map(|l| (l.name().to_string(), l.value().to_string()))
                    .collect();
                (labels, m.get_counter().get_value())
            })
            .collect()
    }

    /// The clock latencies are measured with: a request's start is `clock().monotonic()`.
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Counts a request of `method` ended with `code`, started at `started` (of [`Self::clock`]).
    pub fn rpc_since(&self, method: &'static str, code: &'static str, started: std::time::Instant) {
        self.rpc(method, code, self.clock.since(started).as_secs_f64());
    }

    /// Records one answered request.
    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    pub fn rpc(&self, method: &'static str, code: &'static str, seconds: f64) {
        self.rpc.record(method, code, seconds);
    }

    /// Flushes and stops the exporters (blocking: a last OTLP push).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "metrics shutdown");
        }
    }
}

/// `service.name` is `sluice` unless `OTEL_SERVICE_NAME` says otherwise;
/// `OTEL_RESOURCE_ATTRIBUTES` is read by the SDK.
pub fn resource() -> Resource {
    let b = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        b.build()
    } else {
        b.with_service_name("sluice").build()
    }
}
