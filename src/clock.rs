//! The one place that reads the clock. Everything else receives time as an argument or reads
//! it through the [`Clock`] it was given, so tests drive time through [`ManualClock`] instead
//! of sleeping. clippy.toml's `disallowed-methods` bans every other read.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Micros;

/// A source of time: wall-clock "now" for decisions, monotonic time for durations.
pub trait Clock: std::fmt::Debug + Send + Sync + 'static {
    /// Microseconds since the Unix epoch.
    fn now(&self) -> Micros;

    /// Monotonic time, for the durations the process measures (latencies, load times, log
    /// throttling); never for rate decisions, which use [`Clock::now`].
    fn monotonic(&self) -> Instant;

    /// The time since `start` (a [`Clock::monotonic`] of this clock), zero if none.
    fn since(&self, start: Instant) -> Duration {
        self.monotonic().saturating_duration_since(start)
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one real wall-clock read of the crate (clippy.toml bans it everywhere else).
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Micros {
        // A clock before 1970 or after year 294247 is not a case worth a panic: clamp.
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    }

    #[allow(clippy::disallowed_methods)] // the real clock
    fn monotonic(&self) -> Instant {
        monotonic()
    }
}

/// A clock the tests set and advance by hand. Its monotonic time is the real instant it was
/// made plus how far [`ManualClock::set`] and [`ManualClock::advance`] moved it (never before
/// that instant).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Manual>);

#[derive(Debug)]
struct Manual {
    now: AtomicI64,
    start: Micros,
    base: Instant,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(0)
    }
}

impl ManualClock {
    #[allow(clippy::disallowed_methods)] // the real instant its monotonic time counts from
    pub fn new(start: Micros) -> Self {
        Self(Arc::new(Manual {
            now: AtomicI64::new(start),
            start,
            base: monotonic(),
        }))
    }
    pub fn set(&self, now: Micros) {
        self.0.now.store(now, Ordering::SeqCst);
    }
    pub fn advance(&self, by: Micros) {
        self.0.now.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.0.now.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Instant {
        let moved = self.now().saturating_sub(self.0.start).max(0);
        self.0.base + Duration::from_micros(moved.unsigned_abs())
    }
}

/// The real monotonic clock, for what must wait in real time and cannot be driven by
/// [`ManualClock`]: deadlines of I/O and of CPU work, and the back-offs and timeouts of
/// connections, which run on tokio's real timers. Banned by clippy.toml outside this file;
/// each of those places allows it, saying why.
#[allow(clippy::disallowed_methods)] // the one sanctioned monotonic read
pub fn monotonic() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_drives_its_monotonic_time_forward_only() {
        let c = ManualClock::new(1_000);
        let start = c.monotonic();
        c.advance(2_500);
        assert_eq!(c.since(start), Duration::from_micros(2_500));
        c.set(0);
        assert_eq!(c.monotonic(), start);
    }
}
