//! What every request on the HTTP ports passes before its route runs, as [`super::overload`]'s
//! gate does for gRPC: a body only where the route takes one, of the route's content type, never
//! read past the route's byte limit, and whole within `--http-body-timeout`.
//!
//! A body announced larger than the limit (`Content-Length`), or sent to a route that takes
//! none, is refused at once, before a byte of it is read; a body streamed in chunks is refused
//! as soon as it passes the limit, so a connection holds at most the limit and one chunk. A body
//! still incomplete at the deadline (a client dribbling it, or never sending it) is refused with
//! 408. A refused body is left unread, so the server closes the connection after the answer.
//!
//! Every refusal names its flag in a JSON `{"error": ...}` body and is counted in
//! `sluice_rpc_requests_total` with the route's method label (`json` for `POST /json`, `http`
//! for the others), as the gRPC gate counts its own.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;

use crate::excerpt::excerpt;
use crate::metrics::Metrics;

/// A `POST` route that takes a request body (its other methods take none).
#[derive(Clone, Debug)]
pub(crate) struct BodyRoute {
    pub path: &'static str,
    /// Largest body, in bytes.
    pub max_bytes: usize,
    /// The flag that sets `max_bytes`, named in refusals.
    pub flag: &'static str,
    /// The `method` label of its requests in `sluice_rpc_requests_total`.
    pub method: &'static str,
}

/// The method label of refusals on routes that take no body.
const OTHER: &str = "http";

/// The checks of one HTTP port.
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpGate {
    /// The routes that take a body, all `application/json`; every other route takes none.
    pub bodies: Vec<BodyRoute>,
    /// Time for a body to arrive whole after the headers (`--http-body-timeout`); zero: none.
    pub body_timeout: Duration,
    pub metrics: Option<Arc<Metrics>>,
}

/// A refusal: its status, the code it is counted under, and its message.
struct Refusal(StatusCode, &'static str, String);

impl HttpGate {
    /// The request with its body read whole, or the answer refusing it.
    pub(crate) async fn admit(
        &self,
        req: Request<Incoming>,
    ) -> Result<Request<Body>, Response<Body>> {
        let started = self.metrics.as_ref().map(|m| m.clock().monotonic());
        let path = req.uri().path();
        let route = self.bodies.iter().find(|r| r.path == path);
        let route = route.filter(|_| req.method() == http::Method::POST);
        let (method, result) = match route {
            Some(route) if !is_json(req.headers()) => {
                let refused = Refusal(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UNSUPPORTED_MEDIA_TYPE",
                    format!(
                        "{} takes Content-Type: application/json only",
                        excerpt(path)
                    ),
                );
                (route.method, Err(refused))
            }
            Some(route) => {
                let over = |len: &str| {
                    format!(
                        "request body is {len} bytes, more than the limit of {} ({})",
                        route.max_bytes, route.flag
                    )
                };
                (route.method, self.read(req, route.max_bytes, over).await)
            }
            None if req.body().is_end_stream() => return Ok(req.map(Body::new)),
            None => {
                // An empty body (HTTP/2 DATA with only END_STREAM) passes; any byte is refused.
                let message = format!("{} takes no request body", excerpt(path));
                (OTHER, self.read(req, 0, |_| message.clone()).await)
            }
        };
        let seconds = || match (&self.metrics, started) {
            (Some(m), Some(started)) => m.clock().since(started).as_secs_f64(),
            _ => 0.0,
        };
        result.map_err(|refused| self.answer(method, refused, seconds()))
    }

    /// The answer on a connection reserved for the health check to any other path.
    pub(crate) fn refuse_reserved(&self) -> Response<Body> {
        let refused = Refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "RESOURCE_EXHAUSTED",
            "every connection is taken (--http-max-connections); only /healthcheck is answered"
                .into(),
        );
        self.answer(OTHER, refused, 0.0)
    }

    /// A refusal answered and counted.
    fn answer(&self, method: &'static str, refused: Refusal, seconds: f64) -> Response<Body> {
        let Refusal(status, code, message) = refused;
        if let Some(m) = &self.metrics {
            m.rpc(method, code, seconds);
        }
        let body = format!("{}\n", serde_json::json!({ "error": message }));
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONNECTION, "close")
            .body(Body::from(body))
            .expect("static headers are valid")
    }

    /// The body of `req`, at most `max_bytes` (`over` says what a larger one breaks), checked
    /// before and while it is read.
    async fn read(
        &self,
        req: Request<Incoming>,
        max_bytes: usize,
        over: impl Fn(&str) -> String,
    ) -> Result<Request<Body>, Refusal> {
        let too_large = |len: &str| {
            Refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                over(len),
            )
        };
        if let Some(len) = req.body().size_hint().exact() {
            if len > max_bytes as u64 {
                return Err(too_large(&len.to_string()));
            }
        }
        let (parts, body) = req.into_parts();
        let whole = match self.body_timeout.is_zero() {
            true => read_within(body, max_bytes).await,
            false => tokio::time::timeout(self.body_timeout, read_within(body, max_bytes))
                .await
                .map_err(|_| {
                    Refusal(
                        StatusCode::REQUEST_TIMEOUT,
                        "DEADLINE_EXCEEDED",
                        format!(
                            "request body not received whole within {:?} (--http-body-timeout)",
                            self.body_timeout
                        ),
                    )
                })?,
        };
        match whole {
            Ok(bytes) => Ok(Request::from_parts(parts, Body::from(bytes))),
            Err(Unread::TooLarge) => Err(too_large(&format!("more than {max_bytes}"))),
            Err(Unread::Broken) => Err(Refusal(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "request body broken off".into(),
            )),
        }
    }
}

/// Why a body was not read whole.
enum Unread {
    TooLarge,
    /// The client reset the stream or sent bytes that are not HTTP.
    Broken,
}

/// The whole of `body`, refused as soon as it passes `limit` bytes.
async fn read_within(mut body: Incoming, limit: usize) -> Result<Bytes, Unread> {
    let mut buf = BytesMut::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(data) = frame.map_err(|_| Unread::Broken)?.into_data() else {
            continue; // trailers: nothing a route reads
        };
        if buf.len() + data.len() > limit {
            return Err(Unread::TooLarge);
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

/// Whether the content type is `application/json`, with any parameters, in any case: no
/// browser "simple request" (a cross-site form or `fetch` without a preflight) can send it.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_content_types_are_json() {
        let check = |v: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = v {
                h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            }
            is_json(&h)
        };
        assert!(check(Some("application/json")));
        assert!(check(Some("Application/JSON; charset=utf-8")));
        assert!(check(Some(" application/json ;charset=UTF-8")));
        assert!(!check(Some("text/plain")));
        assert!(!check(Some("application/x-www-form-urlencoded")));
        assert!(!check(Some("multipart/form-data; boundary=x")));
        assert!(!check(Some("application/jsonx")));
        assert!(!check(None));
    }
}
