//! The HTTP side port: `/healthcheck`, `/rlconfig`, `/metrics`, `/version`; `POST /json`
//! is merged in from [`super::json_route`]. The Prometheus and debug listeners serve subsets.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use axum::Router;

use super::ServiceState;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::model::Micros;
use crate::statsd::Mapper;
use crate::store::Store;

/// What the HTTP handlers read.
pub(crate) struct HttpContext<S> {
    pub state: Arc<ServiceState>,
    /// Whose rules `/rlconfig` shows.
    pub limiter: Arc<Limiter<S>>,
    pub metrics: Option<Arc<Metrics>>,
}

impl<S> Clone for HttpContext<S> {
    fn clone(&self) -> Self {
        HttpContext {
            state: self.state.clone(),
            limiter: self.limiter.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

pub(crate) fn router<S: Store>(cx: HttpContext<S>) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/version", get(version))
        .with_state(cx)
}

/// Only `/metrics`, for a separate Prometheus listener (`--prometheus-addr`): sluice's names,
/// or with `statsd` envoyproxy/ratelimit's statsd names through that mapping.
pub(crate) fn metrics_router<S: Store>(cx: HttpContext<S>, statsd: Option<Arc<Mapper>>) -> Router {
    match statsd {
        None => Router::new()
            .route("/metrics", get(metrics::<S>))
            .with_state(cx),
        Some(mapper) => Router::new().route(
            "/metrics",
            get(move || {
                let (metrics, mapper) = (cx.metrics.clone(), mapper.clone());
                async move { statsd_metrics(metrics.as_deref(), &mapper) }
            }),
        ),
    }
}

fn statsd_metrics(metrics: Option<&Metrics>, mapper: &Mapper) -> HttpResponse {
    match metrics {
        Some(m) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            crate::statsd::render(m, mapper),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are off\n").into_response(),
    }
}

/// Only `/rlconfig`, for envoyproxy/ratelimit's debug port (`--debug-addr`), where
/// `egctl x config ratelimit` reads it.
pub(crate) fn debug_router<S: Store>(cx: HttpContext<S>) -> Router {
    Router::new()
        .route("/rlconfig", get(rlconfig::<S>))
        .with_state(cx)
}

async fn healthcheck<S>(State(cx): State<HttpContext<S>>) -> (StatusCode, &'static str) {
    if cx.state.is_serving() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "NOT SERVING")
    }
}

/// RFC 3339 UTC, to the millisecond.
pub(crate) fn timestamp(us: Micros) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| us.to_string())
}

async fn rlconfig<S: Store>(State(cx): State<HttpContext<S>>) -> (StatusCode, String) {
    // The failure is read first: a good load clears it before its swap, so rules read after
    // it are never shown under a failure they replaced.
    let status = cx.state.config_status();
    let rules = cx.limiter.rules();
    let mut head = String::new();
    if let Some(stamp) = rules.as_ref().and_then(|r| r.stamp.as_ref()) {
        head.push_str(&format!(
            "# config generation {}, content hash {:016x}, loaded at {}\n",
            stamp.generation,
            stamp.hash,
            timestamp(stamp.at)
        ));
    }
    if let Some((at, error)) = &status.last_error {
        head.push_str(&format!(
            "# last reload FAILED at {} (the rules below stay in use):\n",
            timestamp(*at)
        ));
        for line in error.lines() {
            head.push_str(&format!("#   {line}\n"));
        }
    }
    match rules {
        Some(rules) => (StatusCode::OK, head + &rules.dump()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            head + "no rate limit configuration loaded\n",
        ),
    }
}

async fn metrics<S>(State(cx): State<HttpContext<S>>) -> HttpResponse {
    match &cx.metrics {
        Some(m) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            m.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are off\n").into_response(),
    }
}

async fn version() -> String {
    format!("sluice {}\n", env!("CARGO_PKG_VERSION"))
}
