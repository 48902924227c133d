//! The bound on requests in flight, and the gate in front of the RLS service: the time to
//! receive a request, and the answer for requests too big to decode.
//!
//! A request first arrives whole: its body is read (at most `--max-request-bytes`, judged from
//! the gRPC length prefix before the bytes come) within `--grpc-request-read-timeout`, so a
//! client that opens streams and never finishes them (HEADERS without END_STREAM) holds nothing
//! but its stream and locks nobody out; its streams end with DEADLINE_EXCEEDED. Envoy's many
//! concurrent streams on few connections are untouched: each arrives whole at once.
//!
//! A request beyond `max_in_flight` gets RESOURCE_EXHAUSTED at once instead of waiting in a
//! queue: Envoy's filter has a short timeout anyway, and a queue would only turn a slow store
//! into unbounded memory and tasks. The request pipeline ([`super::pipeline`]) takes the slot
//! once the request is decoded and checked, for gRPC and `POST /json` alike.
//!
//! Every refusal here is counted in `sluice_rpc_requests_total` with its code (the pipeline's
//! own, RESOURCE_EXHAUSTED among them, are counted by the RLS service; a content type other
//! than gRPC's never reaches the gate: [`super::every_call`] answers 415 for every service).
//!
//! tonic refuses a message above its decode limit with OUT_OF_RANGE, and bytes that are not a
//! valid message (say a domain that is not UTF-8) with INTERNAL; the gate rewrites both into
//! INVALID_ARGUMENT (the first naming `--max-request-bytes`), like every other bad request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Code, Status};

use super::code_name::grpc_code_name;
use super::limits::decode_limit_message;
use crate::metrics::Metrics;

/// The method label of refusals counted here, unless the path names a `sluice.v1` RPC.
const METHOD: &str = "ShouldRateLimit";

/// The method label of a refusal: the gate guards RLS and the native API (`sluice.v1`).
fn method_of(path: &str) -> &'static str {
    match path.rsplit('/').next() {
        Some("Check") => "Check",
        Some("Reserve") => "Reserve",
        Some("Commit") => "Commit",
        Some("Cancel") => "Cancel",
        _ => METHOD,
    }
}
/// Bytes of the gRPC message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;
/// Default of `--grpc-request-read-timeout`.
pub(crate) const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared in-flight bound and its counters.
#[derive(Debug)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    max: usize,
    rejected: AtomicU64,
}

impl InFlight {
    pub fn new(max: usize) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(InFlight {
            permits: Arc::new(Semaphore::new(max)),
            max,
            rejected: AtomicU64::new(0),
        })
    }

    /// Requests being decided now.
    pub fn current(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Requests refused with RESOURCE_EXHAUSTED so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// A slot for one request, held until dropped; `None` (counted as refused) when every
    /// slot is taken.
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.permits.clone().try_acquire_owned().ok();
        if slot.is_none() {
            self.rejected.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }
}

/// Wraps a tonic service (the RLS server) with the gate.
#[derive(Clone)]
pub(crate) struct Gate<S> {
    inner: S,
    max_request_bytes: usize,
    read_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl<S> Gate<S> {
    pub(crate) fn new(inner: S) -> Self {
        Gate {
            inner,
            max_request_bytes: super::limits::RequestLimits::default().max_request_bytes,
            read_timeout: DEFAULT_READ_TIMEOUT,
            metrics: None,
        }
    }

    /// The largest message (`--max-request-bytes`) and the time to receive it whole.
    pub(crate) fn with_reading(mut self, max_request_bytes: usize, read_timeout: Duration) -> Self {
        self.max_request_bytes = max_request_bytes;
        self.read_timeout = read_timeout;
        self
    }

    /// Counts refusals in `sluice_rpc_requests_total`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

type HttpResponse = http::Response<Body>;

impl<S> tower::Service<http::Request<Body>> for Gate<S>
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
        let metrics = self.metrics.clone();
        let started = metrics.as_ref().map(|m| m.clock().monotonic());
        let method = method_of(req.uri().path());
        let count = move |code: &'static str| {
            if let (Some(m), Some(started)) = (&metrics, started) {
                m.rpc_since(method, code, started);
            }
        };
        // The ready service goes into the future; a clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (limit, timeout) = (self.max_request_bytes, self.read_timeout);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let whole = match tokio::time::timeout(timeout, read_whole(body, limit)).await {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(status)) => {
                    count(grpc_code_name(status.code()));
                    return Ok(status.into_http());
                }
                Err(_) => {
                    count("DEADLINE_EXCEEDED");
                    let status = Status::deadline_exceeded(format!(
                        "request not received whole within {timeout:?} (--grpc-request-read-timeout)"
                    ));
                    return Ok(status.into_http());
                }
            };
            let req = http::Request::from_parts(parts, Body::new(http_body_util::Full::new(whole)));
            let answer = inner.call(req).await?;
            let (answer, rewritten) = rewrite_too_large(answer);
            if let Some(code) = rewritten {
                count(code);
            }
            Ok(answer)
        })
    }
}

/// The whole body of a unary call, refused as soon as its gRPC length prefix announces more
/// than `limit` bytes, or when more bytes arrive than announced.
async fn read_whole(mut body: Body, limit: usize) -> Result<Bytes, Status> {
    let mut buf = BytesMut::new();
    let mut cap = limit.saturating_add(PREFIX);
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        // A body that breaks off is the client going away (a reset stream, a closed
        // connection): CANCELLED, as gRPC names a call its client abandoned, not UNKNOWN.
        let frame = frame.map_err(|_| Status::cancelled("the client went away mid-request"))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers: a unary request has none worth keeping
        };
        if buf.len() < PREFIX && buf.len() + data.len() >= PREFIX {
            let mut head = [0u8; PREFIX];
            let have = buf.len();
            head[..have].copy_from_slice(&buf);
            head[have..].copy_from_slice(&data.chunk()[..PREFIX - have]);
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > limit {
                return Err(Status::invalid_argument(format!(
                    "request is {len} bytes, more than the limit of {limit} (--max-request-bytes)"
                )));
            }
            cap = PREFIX + len;
        }
        if buf.len() + data.len() > cap {
            return Err(Status::invalid_argument(format!(
                "request is more than {limit} bytes or more than its length prefix says (--max-request-bytes)"
            )));
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

/// tonic's answers to a request it could not decode become INVALID_ARGUMENT; with the code of
/// a rewritten answer (the RLS service never saw the request, so it did not count it).
fn rewrite_too_large(answer: HttpResponse) -> (HttpResponse, Option<&'static str>) {
    let Some(status) = Status::from_header_map(answer.headers()) else {
        return (answer, None);
    };
    let invalid = Some("INVALID_ARGUMENT");
    match status.code() {
        Code::OutOfRange => match decode_limit_message(status.message()) {
            Some(message) => (Status::invalid_argument(message).into_http(), invalid),
            None => (answer, None),
        },
        Code::Internal
            if status
                .message()
                .starts_with("failed to decode Protobuf message") =>
        {
            let message = format!("malformed request: {}", status.message());
            (Status::invalid_argument(message).into_http(), invalid)
        }
        _ => (answer, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(len: u32, payload: &[u8]) -> Body {
        let mut b = vec![0u8];
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(payload);
        Body::new(http_body_util::Full::new(Bytes::from(b)))
    }

    #[tokio::test]
    async fn a_body_is_read_whole_within_its_limit() {
        let got = read_whole(framed(3, b"abc"), 10).await.unwrap();
        assert_eq!(&got[PREFIX..], b"abc");
        let e = read_whole(framed(11, b""), 10).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().contains("request is 11 bytes"),
            "{}",
            e.message()
        );
        let e = read_whole(framed(2, b"abc"), 10).await.unwrap_err();
        assert!(
            e.message().contains("--max-request-bytes"),
            "{}",
            e.message()
        );
    }
}
