//! What every call on the gRPC port passes, whatever its service (RLS, health, reflection,
//! any added later), as one tower layer on the whole router: HTTP 415 for a content type other
//! than `application/grpc*` (the gRPC spec's answer), counted in `sluice_rpc_requests_total`,
//! `grpc-message`s cut to [`MAX_MESSAGE_BYTES`], and the call reported as a request open on its connection (see [`super::accept`]) until its
//! response body ends, so that a connection is idle only while no stream is open.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::transport::server::TlsConnectInfo;

use super::accept::ConnInfo;
use crate::excerpt::{cut, MAX_MESSAGE_BYTES};
use crate::metrics::Metrics;

/// The layer of [`EveryCall`], for `tonic::transport::Server::layer`.
#[derive(Clone, Default)]
pub(crate) struct EveryCallLayer {
    metrics: Option<Arc<Metrics>>,
}

impl EveryCallLayer {
    /// Counts its refusals in `metrics` (`None`: not counted).
    pub(crate) fn new(metrics: Option<Arc<Metrics>>) -> Self {
        EveryCallLayer { metrics }
    }
}

impl<S> tower::Layer<S> for EveryCallLayer {
    type Service = EveryCall<S>;

    fn layer(&self, inner: S) -> EveryCall<S> {
        EveryCall {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The gRPC router behind the checks every call passes.
#[derive(Clone)]
pub(crate) struct EveryCall<S> {
    inner: S,
    metrics: Option<Arc<Metrics>>,
}

type HttpResponse = http::Response<Body>;

impl<S> tower::Service<http::Request<Body>> for EveryCall<S>
where
    S: tower::Service<http::Request<Body>, Response = HttpResponse, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // On TLS connections tonic wraps the connection's info in its own.
        let ext = req.extensions();
        let stream = ext
            .get::<ConnInfo>()
            .or_else(|| ext.get::<TlsConnectInfo<ConnInfo>>().map(|t| t.get_ref()))
            .map(|c| c.streams.begin());
        if !is_grpc(req.headers()) {
            if let Some(m) = &self.metrics {
                // Refused before any work: no duration worth timing.
                m.rpc(method(req.uri().path()), "UNSUPPORTED_MEDIA_TYPE", 0.0);
            }
            return Box::pin(std::future::ready(Ok(unsupported_media_type())));
        }
        // The ready service goes into the future; a clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let mut answer = inner.call(req).await?;
            bound_status_message(answer.headers_mut());
            // The stream stays open while its answer streams (health's Watch); a status in
            // the trailers is bounded as one in the headers.
            Ok(answer.map(|body| {
                Body::new(body.map_frame(move |mut frame| {
                    let _open = &stream;
                    if let Some(trailers) = frame.trailers_mut() {
                        bound_status_message(trailers);
                    }
                    frame
                }))
            }))
        })
    }
}

/// Cuts a `grpc-message` longer than [`MAX_MESSAGE_BYTES`], whichever service wrote it
/// (tonic-reflection echoes a symbol whole): a gRPC client refuses an oversized one as
/// RESOURCE_EXHAUSTED and never sees the real code. Our own messages quote [`excerpt`](crate::excerpt::excerpt)s, so
/// they stay below it.
fn bound_status_message(headers: &mut http::HeaderMap) {
    // Percent-encoding only lengthens a message, so a short header needs no decoding.
    let long = headers
        .get("grpc-message")
        .is_some_and(|m| m.len() > MAX_MESSAGE_BYTES);
    let Some(status) = long
        .then(|| tonic::Status::from_header_map(headers))
        .flatten()
    else {
        return;
    };
    let short = tonic::Status::with_details(
        status.code(),
        cut(status.message(), MAX_MESSAGE_BYTES).into_owned(),
        status.details().to_vec().into(),
    );
    // Fails only for details that are not a valid header value: the long message stays then.
    let _ = short.add_header(headers);
}

/// The method label of a refused call: the method's name for the services the port serves,
/// else `other` (a path is the client's choice, and labels must stay few).
fn method(path: &str) -> &'static str {
    match path {
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" => "ShouldRateLimit",
        "/grpc.health.v1.Health/Check" => "Check",
        "/grpc.health.v1.Health/Watch" => "Watch",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        | "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo" => {
            "ServerReflectionInfo"
        }
        _ => "other",
    }
}

/// `application/grpc`, alone or with a `+proto`-like suffix or parameters.
fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.strip_prefix("application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ';']))
        })
}

/// HTTP 415, so that no plain HTTP client mistakes a gRPC error (status 200) for success.
fn unsupported_media_type() -> HttpResponse {
    let mut answer = http::Response::new(Body::empty());
    *answer.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    answer.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/grpc"),
    );
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let ct = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(v),
            );
            is_grpc(&h)
        };
        assert!(ct("application/grpc"));
        assert!(ct("application/grpc+proto"));
        assert!(ct("application/grpc;charset=utf-8"));
        assert!(!ct("application/grpcx"));
        assert!(!ct("text/plain"));
        assert!(!ct("application/json"));
        assert!(!is_grpc(&http::HeaderMap::new()));
    }

    #[test]
    fn only_known_methods_name_their_label() {
        assert_eq!(method("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(method("/x.Y/Z"), "other");
    }
}
