//! A circuit breaker in front of one Redis server (the store's, or one Cluster primary's), so
//! an outage costs each request a check of a flag rather than a command timeout.
//!
//! Closed: every call goes through. After `threshold` consecutive outage failures it opens:
//! calls fail at once. While open, the store's monitor PINGs the server every `probe_every`
//! (no request is spent on probing, and no back-off grows while Redis is down): the first
//! answer closes it, so traffic resumes within one probe interval plus a round trip of
//! Redis answering again. A stall shorter than the command timeout fails no call, so it
//! opens nothing.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::store::StoreError;

/// Tells `breaker` how a call went.
pub(super) fn record<T>(breaker: &Breaker, result: &Result<T, StoreError>) {
    match result {
        Ok(_) => breaker.success(),
        // Redis answered (with an error of ours): it is up.
        Err(e) if !e.kind().is_outage() => {
            tracing::warn!(target: "sluice::store::redis", error = %e, "redis call failed");
            breaker.success();
        }
        Err(e) => {
            tracing::debug!(target: "sluice::store::redis", error = %e, "redis call failed");
            breaker.failure();
        }
    }
}

/// Breaker settings.
#[derive(Clone, Copy, Debug)]
pub struct BreakerOptions {
    /// Consecutive outage failures that open the breaker.
    pub threshold: u32,
    /// How often the open breaker PINGs Redis to find it answering again.
    pub probe_every: Duration,
}

impl Default for BreakerOptions {
    fn default() -> Self {
        BreakerOptions {
            threshold: 5,
            probe_every: Duration::from_millis(20),
        }
    }
}

/// The breaker of one server. Lock-free: it is read on every call.
#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    failures: AtomicU32,
    open: AtomicBool,
    /// The connection drop counted last ([`Breaker::failure_of_drop`]).
    last_drop: AtomicU64,
}

impl Breaker {
    pub fn new(opts: BreakerOptions) -> Self {
        Breaker {
            threshold: opts.threshold.max(1),
            failures: AtomicU32::new(0),
            open: AtomicBool::new(false),
            last_drop: AtomicU64::new(0),
        }
    }

    /// Whether a call may go to the server now.
    pub fn allows(&self) -> bool {
        !self.open.load(Ordering::Relaxed)
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Records an answer from the server (a call's or a probe's): it is up.
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.open.swap(false, Ordering::Relaxed) {
            tracing::info!(target: "sluice::store::redis", "redis is back: circuit breaker closed");
        }
    }

    /// Records a call that failed for want of the server (an outage, not a script error).
    /// Records a call cut by connection drop `drop`: one failure per drop, not one per call
    /// it cut (a thread's connection carries many calls; one drop must not open the breaker
    /// for every thread).
    pub fn failure_of_drop(&self, drop: u64) {
        if self.last_drop.swap(drop, Ordering::Relaxed) != drop {
            self.failure();
        }
    }

    pub fn failure(&self) {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if failures >= self.threshold && !self.open.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "sluice::store::redis",
                failures,
                "redis failing: circuit breaker open"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_consecutive_failures_and_closes_on_an_answer() {
        let b = Breaker::new(BreakerOptions {
            threshold: 2,
            probe_every: Duration::from_millis(20),
        });
        assert!(b.allows());
        b.failure();
        b.success();
        b.failure();
        assert!(b.allows(), "failures must be consecutive");
        b.failure();
        assert!(b.is_open() && !b.allows());
        b.failure();
        assert!(b.is_open());
        b.success();
        assert!(b.allows() && !b.is_open());
        b.failure();
        assert!(b.allows(), "closing resets the count");
    }

    #[test]
    fn the_calls_of_one_connection_drop_count_once() {
        let b = Breaker::new(BreakerOptions {
            threshold: 2,
            probe_every: Duration::from_millis(20),
        });
        for _ in 0..16 {
            b.failure_of_drop(7);
        }
        assert!(b.allows(), "one drop");
        b.failure_of_drop(8);
        assert!(b.is_open(), "two drops");
    }
}
