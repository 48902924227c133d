//! The HTTP side port: `/healthcheck`, `/rlconfig`, `/metrics`, `/version`, and (when
//! enabled) `POST /json`, the RLS API in JSON with an explain mode.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::Router;

use super::{json, ServiceState};
use crate::clock::monotonic;
use crate::limiter::{Code, Explanation, LimitError, Limiter, Response};
use crate::metrics::Metrics;
use crate::model::{Micros, Request};
use crate::store::Store;

/// What the HTTP handlers read.
pub struct HttpContext<S> {
    pub state: Arc<ServiceState>,
    /// The rules `/rlconfig` shows and, with `json_api`, what `POST /json` decides with.
    pub limiter: Arc<Limiter<S>>,
    pub metrics: Option<Arc<Metrics>>,
    /// `POST /json` decides only when enabled (`--json-api`): anyone who reaches it can spend
    /// quota.
    pub json_api: bool,
}

impl<S> Clone for HttpContext<S> {
    fn clone(&self) -> Self {
        HttpContext {
            state: self.state.clone(),
            limiter: self.limiter.clone(),
            metrics: self.metrics.clone(),
            json_api: self.json_api,
        }
    }
}

impl<S: Store> HttpContext<S> {
    /// Decides `req` for `POST /json`: the one seam between the JSON API and the limiter.
    async fn decide(&self, req: &Request) -> Result<Response, LimitError> {
        self.limiter.should_rate_limit(req).await
    }

    /// [`Self::decide`] with the explanation of each descriptor (`?explain=true`).
    async fn explain(&self, req: &Request) -> Result<(Response, Vec<Explanation>), LimitError> {
        self.limiter.explain(req).await
    }
}

pub fn router<S: Store>(cx: HttpContext<S>) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/version", get(version))
        .route("/json", post(json_api::<S>))
        .with_state(cx)
}

/// Only `/metrics`, for a separate Prometheus listener (`--prometheus-addr`).
pub fn metrics_router<S: Store>(cx: HttpContext<S>) -> Router {
    Router::new()
        .route("/metrics", get(metrics::<S>))
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
pub fn timestamp(us: Micros) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| us.to_string())
}

async fn rlconfig<S: Store>(State(cx): State<HttpContext<S>>) -> (StatusCode, String) {
    let status = cx.state.config_status();
    let mut head = String::new();
    if let (Some(hash), Some(at)) = (&status.hash, status.loaded_at) {
        head.push_str(&format!(
            "# config generation {}, content hash {hash}, loaded at {}\n",
            status.generation,
            timestamp(at)
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
    match cx.limiter.rules() {
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

fn json_reply(status: StatusCode, body: serde_json::Value) -> HttpResponse {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// `POST /json[?explain=true]`: 200 when OK, 429 when over the limit, 400 for a bad body.
async fn json_api<S: Store>(
    State(cx): State<HttpContext<S>>,
    uri: Uri,
    body: Bytes,
) -> HttpResponse {
    if !cx.json_api {
        return json_reply(
            StatusCode::NOT_FOUND,
            serde_json::json!({
                "error": "POST /json is disabled: start sluice with --json-api (anyone who reaches it can spend quota)"
            }),
        );
    };
    let started = monotonic();
    let explain = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "explain" || p == "explain=true"));
    let (status, code, reply) = match json::request(&body) {
        Err(e) => (
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            serde_json::json!({ "error": e }),
        ),
        Ok(req) => match if explain {
            cx.explain(&req).await
        } else {
            cx.decide(&req).await.map(|r| (r, Vec::new()))
        } {
            Ok((r, expl)) => {
                let over = r.overall == Code::OverLimit;
                let body = json::response(&r, explain.then_some(&expl[..]));
                if over {
                    (StatusCode::TOO_MANY_REQUESTS, "OVER_LIMIT", body)
                } else {
                    (StatusCode::OK, "OK", body)
                }
            }
            Err(e) => {
                let (status, code) = match &e {
                    LimitError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
                    LimitError::PermissionDenied(_) => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
                    LimitError::Unavailable(_) | LimitError::Store(_) => {
                        (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
                    }
                };
                (status, code, serde_json::json!({ "error": e.to_string() }))
            }
        },
    };
    if let Some(m) = &cx.metrics {
        m.rpc("json", code, started.elapsed().as_secs_f64());
    }
    json_reply(status, reply)
}
