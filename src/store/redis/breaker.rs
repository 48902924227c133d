//! A circuit breaker in front of Redis, so an outage costs each request a failed check of a
//! flag rather than a command timeout.
//!
//! Closed: every call goes through. After `threshold` consecutive failures it opens: calls fail
//! at once for `backoff`. Then one call at a time is let through as a probe (a request's call,
//! or the store's background PING): success closes the breaker, failure reopens it with the
//! back-off doubled up to `max_backoff`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Breaker settings.
#[derive(Clone, Copy, Debug)]
pub struct BreakerOptions {
    /// Consecutive failures that open the breaker.
    pub threshold: u32,
    /// How long it stays open the first time.
    pub backoff: Duration,
    /// The longest it stays open between probes.
    pub max_backoff: Duration,
}

impl Default for BreakerOptions {
    fn default() -> Self {
        BreakerOptions {
            threshold: 5,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// What a caller may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Call Redis.
    Call,
    /// Call Redis as the one probe of an open breaker.
    Probe,
    /// Do not call: the breaker is open.
    Reject,
}

#[derive(Debug)]
struct Inner {
    failures: u32,
    open_until: Option<Instant>,
    probing: bool,
    backoff: Duration,
}

#[derive(Debug)]
pub struct Breaker {
    opts: BreakerOptions,
    inner: Mutex<Inner>,
}

impl Breaker {
    pub fn new(opts: BreakerOptions) -> Self {
        Breaker {
            opts,
            inner: Mutex::new(Inner {
                failures: 0,
                open_until: None,
                probing: false,
                backoff: opts.backoff,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few integers, valid after any panic: ignore poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn permit(&self) -> Permit {
        let mut s = self.lock();
        match s.open_until {
            None => Permit::Call,
            Some(until) if crate::clock::monotonic() >= until && !s.probing => {
                s.probing = true;
                Permit::Probe
            }
            Some(_) => Permit::Reject,
        }
    }

    pub fn is_open(&self) -> bool {
        self.lock().open_until.is_some()
    }

    pub fn success(&self) {
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!(target: "sluice::store::redis", "redis is back: circuit breaker closed");
        }
        s.failures = 0;
        s.open_until = None;
        s.probing = false;
        s.backoff = self.opts.backoff;
    }

    /// Records a failed call; `probe` when the call was this breaker's probe.
    pub fn failure(&self, probe: bool) {
        let mut s = self.lock();
        s.failures = s.failures.saturating_add(1);
        if probe {
            s.probing = false;
        }
        let was_open = s.open_until.is_some();
        if (was_open && probe) || (!was_open && s.failures >= self.opts.threshold) {
            s.open_until = Some(crate::clock::monotonic() + s.backoff);
            if !was_open {
                tracing::warn!(
                    target: "sluice::store::redis",
                    failures = s.failures,
                    backoff = ?s.backoff,
                    "redis failing: circuit breaker open"
                );
            }
            s.backoff = (s.backoff * 2).min(self.opts.max_backoff);
        }
    }

    /// Gives up a probe permit without a verdict (the call was cancelled).
    pub fn release_probe(&self) {
        self.lock().probing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_probes_one_at_a_time() {
        let b = Breaker::new(BreakerOptions {
            threshold: 2,
            backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        });
        assert_eq!(b.permit(), Permit::Call);
        b.failure(false);
        assert!(!b.is_open());
        b.failure(false);
        assert!(b.is_open());
        // Back-off of zero: the next call is the probe, others wait for its verdict.
        assert_eq!(b.permit(), Permit::Probe);
        assert_eq!(b.permit(), Permit::Reject);
        b.failure(true);
        assert!(b.is_open());
        assert_eq!(b.permit(), Permit::Probe);
        b.success();
        assert!(!b.is_open());
        assert_eq!(b.permit(), Permit::Call);
    }

    #[test]
    fn open_breaker_rejects_until_backoff_ends() {
        let b = Breaker::new(BreakerOptions {
            threshold: 1,
            backoff: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
        });
        b.failure(false);
        assert_eq!(b.permit(), Permit::Reject);
    }
}
