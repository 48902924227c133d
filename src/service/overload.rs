//! The bound on requests in flight, and the gate in front of the RLS service that answers
//! requests too big to decode.
//!
//! A request beyond `max_in_flight` gets RESOURCE_EXHAUSTED at once instead of waiting in a
//! queue: Envoy's filter has a short timeout anyway, and a queue would only turn a slow store
//! into unbounded memory and tasks. The request pipeline ([`super::pipeline`]) takes the slot
//! once the request is decoded and checked, for gRPC and `POST /json` alike.
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

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Code, Status};

use super::limits::decode_limit_message;

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
pub struct Gate<S> {
    inner: S,
}

impl<S> Gate<S> {
    pub fn new(inner: S) -> Self {
        Gate { inner }
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

type Answer = http::Response<Body>;

impl<S> tower::Service<http::Request<Body>> for Gate<S>
where
    S: tower::Service<http::Request<Body>, Response = Answer, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The ready service goes into the future; a clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let answer = inner.call(req).await?;
            Ok(rewrite_too_large(answer))
        })
    }
}

/// tonic's answers to a request it could not decode become INVALID_ARGUMENT.
fn rewrite_too_large(answer: Answer) -> Answer {
    let Some(status) = Status::from_header_map(answer.headers()) else {
        return answer;
    };
    match status.code() {
        Code::OutOfRange => match decode_limit_message(status.message()) {
            Some(message) => Status::invalid_argument(message).into_http(),
            None => answer,
        },
        Code::Internal
            if status
                .message()
                .starts_with("failed to decode Protobuf message") =>
        {
            Status::invalid_argument(format!("malformed request: {}", status.message())).into_http()
        }
        _ => answer,
    }
}
