//! The HTTP side port: `/healthcheck` and `/rlconfig`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use super::ServiceState;
use crate::rules::RuleSet;

/// What the HTTP handlers read.
#[derive(Clone)]
pub struct HttpContext {
    pub state: Arc<ServiceState>,
    pub rules: Arc<dyn Fn() -> Option<Arc<RuleSet>> + Send + Sync>,
}

pub fn router(cx: HttpContext) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/rlconfig", get(rlconfig))
        .with_state(cx)
}

async fn healthcheck(State(cx): State<HttpContext>) -> (StatusCode, &'static str) {
    if cx.state.is_serving() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "NOT SERVING")
    }
}

async fn rlconfig(State(cx): State<HttpContext>) -> (StatusCode, String) {
    match (cx.rules)() {
        Some(rules) => (StatusCode::OK, rules.dump()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no rate limit configuration loaded\n".into(),
        ),
    }
}
