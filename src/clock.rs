//! The one place that reads wall-clock time. Everything else receives time as an argument, so
//! tests drive time through [`ManualClock`] instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::model::Micros;

/// A source of "now" in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Micros;
}

/// The system wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one real clock read of the crate (clippy.toml bans it everywhere else).
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Micros {
        // A clock before 1970 or after year 294247 is not a case worth a panic: clamp.
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    }
}

/// A clock the tests set and advance by hand.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start: Micros) -> Self {
        Self(Arc::new(AtomicI64::new(start)))
    }
    pub fn set(&self, now: Micros) {
        self.0.store(now, Ordering::SeqCst);
    }
    pub fn advance(&self, by: Micros) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.0.load(Ordering::SeqCst)
    }
}

/// Monotonic time for timeouts and back-offs of the process itself (never for rate
/// decisions, which use a [`Clock`]).
#[allow(clippy::disallowed_methods)] // the one sanctioned monotonic read
pub fn monotonic() -> std::time::Instant {
    std::time::Instant::now()
}
