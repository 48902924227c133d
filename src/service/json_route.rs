//! `POST /json[?explain=true]` on the HTTP port: the RLS API in JSON (codec in
//! [`super::rls_json`]) through the same [`Pipeline`] as gRPC (size limits, in-flight bound,
//! deadline from a `grpc-timeout` header), after the HTTP port's gate ([`super::http_gate`],
//! [`body_route`]) has read its body: `application/json` only, within `--max-request-bytes` and
//! `--http-body-timeout`. 200 when OK, 429 when over the limit; refusals get
//! the HTTP status of their gRPC code.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::post;
use axum::Router;

use super::code_name::grpc_code_name;
use super::http_gate::BodyRoute;
use super::pipeline::Pipeline;
use super::{convert, rls_json};
use crate::limiter::Code;
use crate::metrics::Metrics;
use crate::store::Store;

struct JsonApi<S> {
    /// `None` when not enabled (`--json-api`).
    pipeline: Option<Pipeline<S>>,
    metrics: Option<Arc<Metrics>>,
}

/// What the HTTP port's gate lets through to `/json`: JSON bodies of at most
/// `--max-request-bytes`.
pub(crate) fn body_route(max_request_bytes: usize) -> BodyRoute {
    BodyRoute {
        path: "/json",
        max_bytes: max_request_bytes,
        flag: "--max-request-bytes",
        method: METHOD,
    }
}

/// The method label of `/json` in `sluice_rpc_requests_total`.
const METHOD: &str = "json";

/// The `/json` route; `pipeline` `None` answers 404 saying how to enable it.
pub(crate) fn router<S: Store>(
    pipeline: Option<Pipeline<S>>,
    metrics: Option<Arc<Metrics>>,
) -> Router {
    Router::new()
        .route("/json", post(handle::<S>))
        // The HTTP port's gate has read the body within `--max-request-bytes` already.
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::new(JsonApi { pipeline, metrics }))
}

fn reply(status: StatusCode, body: serde_json::Value) -> HttpResponse {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

async fn handle<S: Store>(
    State(api): State<Arc<JsonApi<S>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let Some(pipeline) = &api.pipeline else {
        return reply(
            StatusCode::NOT_FOUND,
            serde_json::json!({
                "error": "POST /json is disabled: start sluice with --json-api (anyone who reaches it can spend quota)"
            }),
        );
    };
    let clock = pipeline.limiter().clock();
    let started = clock.monotonic();
    let explain = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "explain" || p == "explain=true"));
    let timeout = headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(convert::grpc_timeout);
    let result = async {
        pipeline.check_size(body.len())?;
        let req = rls_json::parse(&body).map_err(tonic::Status::invalid_argument)?;
        if explain {
            let (r, e) = pipeline.explain(req, timeout).await?;
            Ok((rls_json::response(&r, Some(&e)), r.overall))
        } else {
            let r = pipeline.decide(req, timeout).await?;
            Ok((rls_json::response(&r, None), r.overall))
        }
    }
    .await;
    let result: Result<_, tonic::Status> = result;
    let (status, code, body) = match result {
        Ok((body, Code::OverLimit)) => (StatusCode::TOO_MANY_REQUESTS, "OVER_LIMIT", body),
        Ok((body, Code::Ok)) => (StatusCode::OK, "OK", body),
        Err(s) => (
            http_status(s.code()),
            grpc_code_name(s.code()),
            serde_json::json!({ "error": s.message() }),
        ),
    };
    if let Some(m) = &api.metrics {
        m.rpc_since(METHOD, code, started);
    }
    reply(status, body)
}

/// The HTTP status of a refusal.
fn http_status(code: tonic::Code) -> StatusCode {
    match code {
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}
