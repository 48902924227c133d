//! Where counters live. One trait, one decision call per request: [`Store::decide`] takes every
//! check of a request and applies the charging policy atomically (see [`batch`]).

pub mod batch;
pub mod fallback;
pub mod key;
pub mod memory;
pub mod redis;

use std::future::Future;

use crate::algorithm::{Algorithm, Ask, Limit};
use crate::model::Micros;

pub use batch::{Charge, Verdict};
pub use fallback::{FailurePolicy, Fallback};
pub use memory::MemoryStore;
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
}

/// Errors of a store backend.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached or did not answer in time; worth retrying later.
    #[error("{backend} unavailable: {message}")]
    Unavailable {
        backend: &'static str,
        message: String,
    },
}

/// A backend that keeps rate-limit state.
pub trait Store: Send + Sync + 'static {
    /// Decides every check of one request at `now`, atomically: either all checks that the
    /// request admits are charged, or (when any check rejects) only those whose policy is
    /// [`Charge::Always`] and refunds. Verdicts come back in the order of `checks`.
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send;

    /// Whether this store can decide `algorithm`; a config using one it cannot is rejected
    /// at load time instead of failing requests.
    fn supports(&self, _algorithm: Algorithm) -> bool {
        true
    }
}

impl<S: Store> Store for std::sync::Arc<S> {
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        (**self).decide(checks, now)
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        (**self).supports(algorithm)
    }
}
