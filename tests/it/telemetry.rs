//! OTLP export to a collector stand-in (a tonic server implementing the OTLP metrics and trace
//! services, in this test): the per-rule metrics arrive, and each ShouldRateLimit is a span
//! whose parent is the span named by the request's metadata (W3C `traceparent`, or B3), with a
//! child span for the store call. SIGTERM flushes the last data and exits 0.

use crate::support;

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::*;

/// What the stand-in collector received.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    /// (key, string value) of every resource attribute of exported spans.
    span_resource: Arc<Mutex<Vec<(String, String)>>>,
    /// (metric name, `key` attribute, value) of every sum data point.
    sums: Arc<Mutex<Vec<(String, String, i64)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for a in rs.resource.iter().flat_map(|r| &r.attributes) {
                if let Some(any_value::Value::StringValue(v)) =
                    a.value.as_ref().and_then(|v| v.value.as_ref())
                {
                    self.span_resource
                        .lock()
                        .unwrap()
                        .push((a.key.clone(), v.clone()));
                }
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut sums = self.sums.lock().unwrap();
        for rm in request.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                for m in sm.metrics {
                    let Some(metric::Data::Sum(sum)) = m.data else {
                        continue;
                    };
                    for p in sum.data_points {
                        let key = p
                            .attributes
                            .iter()
                            .find(|a| a.key == "key")
                            .and_then(|a| a.value.as_ref())
                            .and_then(|v| match &v.value {
                                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        let value = match p.value {
                            Some(number_data_point::Value::AsInt(i)) => i,
                            Some(number_data_point::Value::AsDouble(d)) => d as i64,
                            None => 0,
                        };
                        sums.push((m.name.clone(), key, value));
                    }
                }
            }
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Starts the stand-in collector; returns it and its endpoint URL.
async fn start_collector() -> (Collector, String) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .add_service(MetricsServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (collector, endpoint)
}

/// envoyproxy/ratelimit's tracing variables, as Envoy Gateway sets them (with the gRPC
/// protocol sluice exports): the spans carry its service name, namespace and instance id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_ratelimit_tracing_variables_name_the_spans() {
    let (collector, endpoint) = start_collector().await;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), CONFIG).unwrap();
    let root_path = root.path().display().to_string();
    let mut sluice = support::process::spawn_sluice(
        &["serve"],
        &[
            ("RUNTIME_ROOT", root_path.as_str()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("HOST", "127.0.0.1"),
            ("PORT", "0"),
            ("DEBUG_HOST", "127.0.0.1"),
            ("DEBUG_PORT", "0"),
            ("LOG_FORMAT", "json"),
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-abc12"),
            ("TRACING_SAMPLING_RATE", "1.0"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);
    client
        .should_rate_limit(req("edge", vec![d(&[("client", "a")])]).to_proto())
        .await
        .expect("answer");
    support::poll::eventually("a ShouldRateLimit span", || async {
        let spans = collector.spans.lock().unwrap();
        spans
            .iter()
            .any(|s| s.name == "ShouldRateLimit")
            .then_some(())
    })
    .await;
    let resource = collector.span_resource.lock().unwrap().clone();
    for (k, v) in [
        ("service.name", "envoy-ratelimit"),
        ("service.namespace", "envoy-gateway-system"),
        ("service.instance.id", "envoy-ratelimit-abc12"),
    ] {
        assert!(
            resource.iter().any(|(a, b)| a == k && b == v),
            "{k}={v} not in {resource:?}"
        );
    }
    assert_eq!(
        tokio::task::spawn_blocking(move || sluice.terminate_and_wait())
            .await
            .unwrap(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_receives_metrics_and_traces_with_the_callers_parent() {
    let (collector, endpoint) = start_collector().await;

    let (_dir, config) = support::config_file(CONFIG);
    let mut sluice = support::process::spawn_serve(
        &config,
        &["--log-format", "json", "--otlp-endpoint", &endpoint],
        // Export often, so the test sees data while the server runs.
        &[
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);
    let call = |header: &'static str, value: &'static str| {
        let mut r = tonic::Request::new(req("edge", vec![d(&[("client", "a")])]).to_proto());
        r.metadata_mut().insert(header, value.parse().unwrap());
        r
    };
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    client
        .should_rate_limit(call(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ))
        .await
        .expect("answer");
    const B3_TRACE: &str = "80f198ee56343ba864fe8b2a57d3eff7";
    const B3_PARENT: &str = "e457b5a2e4d86bd1";
    client
        .should_rate_limit(call(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
        ))
        .await
        .expect("answer");

    let find = |trace: &str, parent: &str| {
        let spans = collector.spans.lock().unwrap();
        let rpc = spans.iter().find(|s| {
            s.name == "ShouldRateLimit"
                && hex(&s.trace_id) == trace
                && hex(&s.parent_span_id) == parent
        })?;
        let store = spans
            .iter()
            .find(|s| s.name == "store.decide" && s.parent_span_id == rpc.span_id)?;
        Some((rpc.clone(), store.clone()))
    };
    let (rpc, store) =
        support::poll::eventually("the W3C-parented span", || async { find(TRACE, PARENT) }).await;
    assert_eq!(hex(&store.trace_id), TRACE);
    assert!(rpc.attributes.iter().any(|a| a.key == "domain"), "{rpc:?}");
    support::poll::eventually("the B3-parented span", || async {
        find(B3_TRACE, B3_PARENT)
    })
    .await;

    support::poll::eventually("total_hits 2 over OTLP", || async {
        collector
            .sums
            .lock()
            .unwrap()
            .iter()
            .any(|(name, key, v)| {
                name == "sluice.rate_limit.total_hits" && key == "edge.client" && *v == 2
            })
            .then_some(())
    })
    .await;

    assert_eq!(
        tokio::task::spawn_blocking(move || sluice.terminate_and_wait())
            .await
            .unwrap(),
        Some(0)
    );
}
