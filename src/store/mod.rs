//! Where counters live. One trait, one decision call per request: [`Store::decide`] takes every
//! check of a request and applies the charging policy atomically (see [`batch`]).

pub mod batch;
pub(crate) mod fallback;
pub mod key;
pub(crate) mod local_cache;
pub(crate) mod map_table;
pub mod memory;
pub(crate) mod records;
pub mod redis;
pub(crate) mod slot_tag;

use std::future::Future;
use std::time::{Duration, Instant};

use crate::algorithm::{Ask, Limit};
use crate::model::Micros;

pub use batch::{Charge, Verdict};
pub use fallback::{FailurePolicy, Fallback};
pub use local_cache::LocalCache;
pub use map_table::MapTable;
pub use memory::MemoryStore;
pub use records::Reservations;
pub use redis::RedisStore;

/// One limit to decide for one descriptor of a request.
#[derive(Clone, Debug)]
pub struct Check<'a> {
    /// The storage key (see [`key`]); equal keys share one state.
    pub key: &'a [u8],
    pub limit: &'a Limit,
    pub ask: Ask,
    pub charge: Charge,
    /// The descriptor this check belongs to (its index in the request): a descriptor is
    /// allowed only if all its checks are, and charged only as a whole.
    pub group: u32,
    /// The descriptor is in quota mode: the request is rejected by quota descriptors only
    /// when all of them are over their limits.
    pub quota: bool,
    /// What this check gets if the store fails (`on_store_error` of its rule or domain);
    /// `None`: the server's `--on-store-error`. See [`fallback`].
    pub on_error: Option<FailurePolicy>,
}

impl<'a> Check<'a> {
    /// `ask` against `limit` at `key` with a plain rule's settings: charged only if admitted,
    /// descriptor 0, no quota mode, the server's failure policy. Other settings by struct
    /// update: `Check { group: 1, ..Check::new(key, &limit, Ask::take(1)) }`.
    pub fn new(key: &'a [u8], limit: &'a Limit, ask: Ask) -> Self {
        Check {
            key,
            limit,
            ask,
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error: None,
        }
    }
}

/// Errors of a store backend.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend could not decide the request; `kind` says why (for metrics and the circuit
    /// breaker), `message` the details.
    #[error("{backend} unavailable: {message}")]
    Unavailable {
        backend: &'static str,
        kind: ErrorKind,
        message: String,
    },
}

impl StoreError {
    pub fn new(backend: &'static str, kind: ErrorKind, message: impl Into<String>) -> Self {
        StoreError::Unavailable {
            backend,
            kind,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        let StoreError::Unavailable { kind, .. } = self;
        *kind
    }
}

/// Why a store call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No answer within the command timeout (or the request's deadline, when sooner).
    Timeout,
    /// Not connected: refused, lost, reset, TLS or authentication failures.
    Connection,
    /// The circuit breaker is open: the backend was not called.
    BreakerOpen,
    /// Redis Cluster in flux: `CLUSTERDOWN`, a slot with no reachable node, redirections.
    Cluster,
    /// The server answered that it cannot serve now: `BUSY`, `LOADING`, `OOM`, `READONLY`,
    /// `MASTERDOWN`, `TRYAGAIN`.
    Server,
    /// The server answered, but with an error from the script or a reply that could not be
    /// read: a bug or a version mismatch rather than an outage.
    Script,
    /// The store is at a cap of its own (the in-memory store's reservation records): no
    /// outage, and not retried; answered RESOURCE_EXHAUSTED.
    Full,
}

impl ErrorKind {
    /// The `kind` label of `sluice_store_errors_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::BreakerOpen => "breaker_open",
            ErrorKind::Cluster => "cluster",
            ErrorKind::Server => "server",
            ErrorKind::Script => "script",
            ErrorKind::Full => "full",
        }
    }

    /// Whether the backend is failing (what a circuit breaker counts): not a script error,
    /// which a healthy server answers, nor the breaker's own refusal.
    pub fn is_outage(self) -> bool {
        !matches!(
            self,
            ErrorKind::Script | ErrorKind::BreakerOpen | ErrorKind::Full
        )
    }
}

/// When the caller stops waiting for an answer (a gRPC call's `grpc-timeout`), passed with
/// the checks so that a slow backend fails in time for the failure policy to answer before
/// the caller gives up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// No deadline: the backend's own timeouts apply.
    pub const NONE: Deadline = Deadline(None);

    pub fn at(instant: Instant) -> Self {
        Deadline(Some(instant))
    }

    /// `timeout` from now (none: no deadline).
    // A deadline bounds real waiting (I/O on tokio's real timers, CPU spent matching), which
    // ManualClock cannot drive: these three read the real monotonic clock.
    #[allow(clippy::disallowed_methods)]
    pub fn after(timeout: Option<Duration>) -> Self {
        Deadline(timeout.map(|t| crate::clock::monotonic() + t))
    }

    pub fn instant(self) -> Option<Instant> {
        self.0
    }

    /// Whether the deadline has passed (never, without one).
    #[allow(clippy::disallowed_methods)] // real time, as in `after`
    pub fn expired(self) -> bool {
        self.0.is_some_and(|d| crate::clock::monotonic() >= d)
    }

    /// What a store call may take of the time left: nine tenths of it, keeping the rest for
    /// the failure policy and the answer. `None` without a deadline.
    #[allow(clippy::disallowed_methods)] // real time, as in `after`
    pub fn budget(self) -> Option<Duration> {
        self.0.map(|d| {
            let left = d.saturating_duration_since(crate::clock::monotonic());
            left - left / 10
        })
    }
}

/// A backend that keeps rate-limit state.
pub trait Store: Send + Sync + 'static {
    /// Decides every check of one request at `now`, atomically: either all checks that the
    /// request admits are charged, or (when any check rejects) only those whose policy is
    /// [`Charge::Always`] and refunds. Verdicts come back in the order of `checks`. A backend
    /// that waits on I/O gives up by `deadline`.
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send;
}

impl<S: Store> Store for std::sync::Arc<S> {
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        (**self).decide(checks, now, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_nine_tenths_of_what_is_left() {
        assert_eq!(Deadline::NONE.budget(), None);
        let b = Deadline::after(Some(Duration::from_secs(100)))
            .budget()
            .expect("a budget");
        assert!(b <= Duration::from_secs(90) && b > Duration::from_secs(80));
        // A passed deadline leaves nothing.
        assert_eq!(
            Deadline::after(Some(Duration::ZERO)).budget(),
            Some(Duration::ZERO)
        );
    }
}
