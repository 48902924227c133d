//! Warnings that cannot flood the log. [`QuietWarn`] lets one line of a kind through per
//! [`WARN_INTERVAL`] and counts the others; sluice's own repeated warnings (connection cap,
//! failed accepts) use it directly, and [`QuietLog`] applies it per call site to the WARN and
//! ERROR events of other crates, which sluice cannot word itself: h2 warns once per connection
//! that trips its reset limits, so an HTTP/2 rapid-reset flood that reconnects would otherwise
//! write a line per connection. What was held back is logged once per interval, with counts
//! ([`QuietLog::report_held`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::{Event, Level, Metadata};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

use crate::clock::Clock;

/// One warning of a kind per this interval; the others are counted.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// A warning logged at most once per [`WARN_INTERVAL`], with how many were held back.
#[derive(Debug, Default)]
pub struct QuietWarn {
    last: Mutex<Option<Instant>>,
    held: AtomicU64,
}

impl QuietWarn {
    /// Whether this occurrence, at `now` (monotonic), may be logged (the first of its
    /// interval); if not, it is counted as held back.
    pub fn passes(&self, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some(t) if now.duration_since(t) < WARN_INTERVAL => {
                self.held.fetch_add(1, Ordering::Relaxed);
                false
            }
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    /// The occurrences held back since the last call.
    pub fn take_held(&self) -> u64 {
        self.held.swap(0, Ordering::Relaxed)
    }

    /// `Some(held back since the last line)` when this occurrence, at `now`, should be logged.
    pub fn due(&self, now: Instant) -> Option<u64> {
        self.passes(now).then(|| self.take_held())
    }
}

/// A `tracing` filter: WARN and ERROR events of other crates at most once per call site and
/// interval. sluice's own events and lower levels pass untouched.
#[derive(Clone)]
pub struct QuietLog {
    sites: Arc<Mutex<HashMap<Identifier, Site>>>,
    clock: Arc<dyn Clock>,
}

#[derive(Clone)]
struct Site {
    meta: &'static Metadata<'static>,
    warn: Arc<QuietWarn>,
}

impl QuietLog {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        QuietLog {
            sites: Arc::default(),
            clock,
        }
    }

    fn passes(&self, meta: &'static Metadata<'static>) -> bool {
        if *meta.level() > Level::WARN || meta.target().starts_with("sluice") {
            return true;
        }
        let warn = {
            let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
            let site = sites.entry(meta.callsite()).or_insert_with(|| Site {
                meta,
                warn: Arc::default(),
            });
            site.warn.clone()
        };
        warn.passes(self.clock.monotonic())
    }

    /// Logs, per call site, how many of its events were held back since the last call (meant
    /// to run every [`WARN_INTERVAL`]).
    pub fn report_held(&self) {
        let sites: Vec<Site> = {
            let sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
            sites.values().cloned().collect()
        };
        for site in sites {
            let held = site.warn.take_held();
            if held > 0 {
                tracing::warn!(
                    held,
                    target = site.meta.target(),
                    site = site.meta.name(),
                    "repeated warnings held back (one per {WARN_INTERVAL:?} is logged)"
                );
            }
        }
    }
}

impl<S> Filter<S> for QuietLog {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    // This filter judges events only after they are made (`event_enabled`) and leaves levels
    // to the filter it is combined with. Without a hint `And` has none either, so every
    // disabled span and event of h2, hyper and tonic would pass the level check and be
    // judged per call (the memory store's CPU per request tripled in bench/run.sh).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        self.passes(event.metadata())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_warning_is_due_once_per_interval_with_the_count_held_back() {
        let clock = ManualClock::new(0);
        let w = QuietWarn::default();
        assert_eq!(w.due(clock.monotonic()), Some(0));
        assert_eq!(w.due(clock.monotonic()), None);
        clock.advance(WARN_INTERVAL.as_micros() as i64 - 1);
        assert_eq!(w.due(clock.monotonic()), None);
        clock.advance(1);
        assert_eq!(w.due(clock.monotonic()), Some(2));
    }

    /// Counts the events a layer behind the filter sees.
    struct Count(Arc<AtomicU64>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, _: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn other_crates_warnings_pass_once_per_call_site_and_ours_always() {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::Layer;
        let seen = Arc::new(AtomicU64::new(0));
        let quiet = QuietLog::new(Arc::new(ManualClock::new(0)));
        let subscriber =
            tracing_subscriber::registry().with(Count(seen.clone()).with_filter(quiet.clone()));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..50 {
                tracing::warn!(target: "h2::proto", "reset limit reached");
            }
            for _ in 0..3 {
                tracing::warn!(target: "sluice::config", "config load failed");
                tracing::info!(target: "h2::proto", "not a warning");
            }
            assert_eq!(seen.load(Ordering::Relaxed), 1 + 3 + 3);
            // The 49 held back are reported in one line of our own.
            quiet.report_held();
            assert_eq!(seen.load(Ordering::Relaxed), 8);
            quiet.report_held();
            assert_eq!(seen.load(Ordering::Relaxed), 8, "nothing more held back");
        });
    }
}
