//! The decision functions: pure arithmetic on `(limit, previous state, frame, ask)`.
//!
//! Nothing here performs I/O, awaits, or reads a clock: time arrives in a [`Frame`]. The Redis
//! Lua scripts are ports of these functions, so every quantity is an integer number of
//! microseconds or hits and stays below 2^53 for limits that [`Limit::validate`] accepts.
//! Calendar windows (time zones) are the one exception: [`calendar`] computes their bounds in
//! Rust and hands them over in the [`Frame`]. ALGORITHMS.md states every definition.

pub(crate) mod bucket;
pub(crate) mod calendar;
pub(crate) mod concurrency;
pub mod distinct;
pub mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

#[cfg(test)]
pub(crate) mod timeline;

use chrono_tz::Tz;

use crate::model::{Micros, Unit};

/// The largest integer every intermediate value must stay within (Lua numbers are doubles).
pub const MAX_SAFE: u64 = (1 << 53) - 1;
/// Counts (including debt) saturate here, so that `count + hits` stays below 2^53.
pub const COUNT_CAP: u64 = 1 << 52;
/// The longest window: 10 years of 365 days, so that `now + 2 * window` stays below 2^53 µs
/// for centuries.
pub const MAX_WINDOW: Micros = 10 * 365 * 86_400 * 1_000_000;
/// sliding_log keeps one timestamp per hit: at most this many per key.
pub const MAX_LOG: u64 = 10_000;
/// sliding_window keeps `precision + 1` counters: at most this many sub-windows.
pub const MAX_PRECISION: u32 = 100;
/// The default number of sub-windows of a sliding_window.
pub const DEFAULT_PRECISION: u32 = 10;

/// Which algorithm decides a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    LeakyBucket,
    Gcra,
    Distinct,
    /// Requests in flight: `requests` is `max_in_flight`, `window` the lease time.
    Concurrency,
}

impl Algorithm {
    pub const ALL: [Algorithm; 8] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::Distinct,
        Algorithm::Concurrency,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::Distinct => "distinct",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// token_bucket, leaky_bucket and gcra take a `burst`.
    pub fn has_burst(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        )
    }

    /// The algorithms that count per window and so can align windows to a calendar.
    pub fn has_windows(self) -> bool {
        matches!(self, Algorithm::FixedWindow | Algorithm::Distinct)
    }
}

/// Windows aligned to local calendar boundaries in a time zone (`align: calendar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Calendar {
    /// Hour, day, week (from Monday), month (from the 1st) or year (from January 1st).
    pub unit: Unit,
    pub tz: Tz,
}

/// A validated limit: `requests` per `window`, decided by `algorithm`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    pub algorithm: Algorithm,
    pub requests: u64,
    /// Window length in microseconds (> 0); for calendar windows, the nominal length.
    pub window: Micros,
    /// token_bucket / leaky_bucket / gcra: the capacity, i.e. how many single-hit requests pass
    /// back to back from idle. Ignored by the other algorithms.
    pub burst: u64,
    /// sliding_window: sub-windows per window. Ignored by the other algorithms.
    pub precision: u32,
    /// fixed_window / distinct: calendar windows instead of windows aligned to the epoch.
    pub calendar: Option<Calendar>,
}

impl Limit {
    /// A limit of `algorithm` with its defaults: `burst = requests`, precision 10, epoch windows.
    pub fn new(algorithm: Algorithm, requests: u64, window: Micros) -> Self {
        Limit {
            algorithm,
            requests,
            window,
            burst: requests,
            precision: DEFAULT_PRECISION,
            calendar: None,
        }
    }

    pub fn fixed_window(requests: u64, window: Micros) -> Self {
        Limit::new(Algorithm::FixedWindow, requests, window)
    }

    /// The frame of `now` for this limit: windows aligned to the epoch, or to the calendar.
    pub fn frame(&self, now: Micros) -> Frame {
        match self.calendar {
            Some(c) if self.algorithm.has_windows() => calendar::frame(now, c),
            _ => Frame::epoch_aligned(now, self.window),
        }
    }

    /// distinct: whether the values are kept as a HyperLogLog (limits above
    /// [`distinct::EXACT_MAX`]) rather than an exact set.
    pub fn is_approximate(&self) -> bool {
        self.algorithm == Algorithm::Distinct && self.requests > distinct::EXACT_MAX
    }

    /// Checks that every value the decision function computes for this limit stays exact in a
    /// double (below 2^53) and that the state stays small. The message says what to change.
    ///
    /// ```
    /// use sluice::algorithm::{Algorithm, Limit, MAX_WINDOW};
    ///
    /// assert!(Limit::new(Algorithm::Gcra, 100, 1_000_000).validate().is_ok());
    /// let err = Limit::fixed_window(5, MAX_WINDOW + 1).validate().unwrap_err();
    /// assert!(err.contains("longest supported window"), "{err}");
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.window <= 0 {
            return Err("the window must be longer than zero".into());
        }
        if self.window > MAX_WINDOW {
            return Err(format!(
                "the window ({} s) is longer than the longest supported window of 10 years",
                self.window / 1_000_000
            ));
        }
        if self.requests > u64::from(u32::MAX) {
            return Err(format!(
                "requests_per_unit {} exceeds {}",
                self.requests,
                u32::MAX
            ));
        }
        match self.algorithm {
            // concurrency: any max_in_flight and lease time within the bounds above.
            Algorithm::FixedWindow | Algorithm::Distinct | Algorithm::Concurrency => Ok(()),
            Algorithm::SlidingWindow => {
                if self.precision == 0 || self.precision > MAX_PRECISION {
                    return Err(format!(
                        "precision must be between 1 and {MAX_PRECISION} (got {})",
                        self.precision
                    ));
                }
                if self.window % Micros::from(self.precision) != 0 {
                    return Err(format!(
                        "a window of {} µs cannot be split into {} sub-windows of whole microseconds; choose a precision that divides it",
                        self.window, self.precision
                    ));
                }
                Ok(())
            }
            Algorithm::SlidingLog => {
                if self.requests > MAX_LOG {
                    return Err(format!(
                        "sliding_log keeps one timestamp per request, and {} is more than the {MAX_LOG} it keeps per key; use algorithm: sliding_window for large limits",
                        self.requests
                    ));
                }
                Ok(())
            }
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
                if self.requests == 0 {
                    // Nothing ever refills: every request is rejected and no state is kept.
                    return if self.burst == self.requests {
                        Ok(())
                    } else {
                        Err("burst needs requests_per_unit above zero (nothing would refill the bucket)".into())
                    };
                }
                if self.burst == 0 {
                    return Err("burst must be at least 1".into());
                }
                let p = bucket::Params::of(self);
                match p.cap_checked() {
                    Some(cap) if cap <= bucket::MAX_CAP => Ok(()),
                    _ => Err(format!(
                        "burst {} with {} requests per {} µs needs more than 2^51 units of exact arithmetic (burst × window / gcd(window, requests_per_unit)); lower burst, or pick a requests_per_unit that divides the window more evenly",
                        self.burst, self.requests, self.window
                    )),
                }
            }
        }
    }
}

/// "Now", and the bounds of the window that contains it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub now: Micros,
    pub window_start: Micros,
    pub window_end: Micros,
}

impl Frame {
    /// The window of length `window` (µs) that contains `now`, counted from the Unix epoch, so
    /// every instance with the same clock agrees on it:
    ///
    /// ```
    /// use sluice::algorithm::Frame;
    ///
    /// let f = Frame::epoch_aligned(125_000_000, 60_000_000); // 2 min 5 s, minute windows
    /// assert_eq!((f.window_start, f.window_end), (120_000_000, 180_000_000));
    /// ```
    pub fn epoch_aligned(now: Micros, window: Micros) -> Frame {
        let window = window.max(1);
        let window_start = now - now.rem_euclid(window);
        Frame {
            now,
            window_start,
            window_end: window_start.saturating_add(window),
        }
    }
}

/// What one request asks of one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    /// 0 only looks (no state changes).
    pub hits: u64,
    /// Give `hits` back instead of taking them.
    pub refund: bool,
    /// distinct: the hash of the counted value ([`distinct::hash`]); 0 for other algorithms.
    pub value: u64,
    /// Decide as if taking `hits`, but change no state (the native API's `dry_run`). The
    /// algorithms ignore it: whether an outcome's state is kept is the store's business.
    pub dry_run: bool,
}

impl Ask {
    pub fn take(hits: u64) -> Self {
        Ask {
            hits,
            refund: false,
            value: 0,
            dry_run: false,
        }
    }
    pub fn refund(hits: u64) -> Self {
        Ask {
            refund: true,
            ..Ask::take(hits)
        }
    }
    pub fn peek() -> Self {
        Ask::take(0)
    }
}

/// The state an algorithm keeps per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    FixedWindow(fixed_window::State),
    SlidingWindow(sliding_window::State),
    SlidingLog(sliding_log::State),
    /// token_bucket, leaky_bucket and gcra share one state (see [`bucket`]).
    Bucket(bucket::State),
    Distinct(distinct::State),
    Concurrency(concurrency::State),
}

/// The answer of one decision function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    /// When allowed: how many more single-hit requests would pass after this one is charged.
    /// When rejected: 0.
    pub remaining: u64,
    /// When allowed: time until the limit is back to its full allowance (after charging).
    /// When rejected: time after which this request would be allowed (retry-after), if it is
    /// not charged.
    pub reset: Micros,
    /// When rejected: the retry-after if the request is charged anyway (`charge: always`), its
    /// debt included. Equal to `reset` when allowed.
    pub debt_reset: Micros,
    /// The state after charging this ask (beyond the limit, as debt, when rejected). The store
    /// keeps it only if the request is charged.
    pub charged: State,
    /// When `charged` becomes equivalent to no state at all: the store may forget it then.
    pub expires_at: Micros,
}

/// Decides `ask` against `limit` given the previous state (if any).
///
/// The caller keeps the state: it stores `charged` when the request is charged. Two requests a
/// minute on a fixed window, three asked for in one window:
///
/// ```
/// use sluice::algorithm::{evaluate, Ask, Limit};
///
/// const MINUTE: i64 = 60_000_000; // µs
/// let limit = Limit::fixed_window(2, MINUTE);
/// let now = 10 * MINUTE + 15_000_000; // 15 s into a window
///
/// let first = evaluate(&limit, None, limit.frame(now), Ask::take(1));
/// assert!(first.allowed);
/// assert_eq!(first.remaining, 1);
/// let second = evaluate(&limit, Some(&first.charged), limit.frame(now), Ask::take(1));
/// assert_eq!((second.allowed, second.remaining), (true, 0));
///
/// // Over the limit: allowed again when the window ends, 45 s later.
/// let third = evaluate(&limit, Some(&second.charged), limit.frame(now), Ask::take(1));
/// assert!(!third.allowed);
/// assert_eq!(third.reset, 45_000_000);
///
/// // In the next window the count starts again.
/// let next = limit.frame(now + 45_000_000);
/// assert!(evaluate(&limit, Some(&second.charged), next, Ask::take(1)).allowed);
/// ```
pub fn evaluate(limit: &Limit, state: Option<&State>, frame: Frame, ask: Ask) -> Outcome {
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let prev = match state {
                Some(State::FixedWindow(s)) => Some(s),
                _ => None,
            };
            fixed_window::evaluate(limit.requests, prev, frame, ask)
        }
        Algorithm::SlidingWindow => {
            let prev = match state {
                Some(State::SlidingWindow(s)) => Some(s),
                _ => None,
            };
            sliding_window::evaluate(limit, prev, frame.now, ask)
        }
        Algorithm::SlidingLog => {
            let prev = match state {
                Some(State::SlidingLog(s)) => Some(s),
                _ => None,
            };
            sliding_log::evaluate(limit, prev, frame.now, ask)
        }
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
            let prev = match state {
                Some(State::Bucket(s)) => Some(s),
                _ => None,
            };
            match limit.algorithm {
                Algorithm::TokenBucket => token_bucket::evaluate(limit, prev, frame.now, ask),
                Algorithm::LeakyBucket => leaky_bucket::evaluate(limit, prev, frame.now, ask),
                _ => gcra::evaluate(limit, prev, frame.now, ask),
            }
        }
        Algorithm::Distinct => {
            let prev = match state {
                Some(State::Distinct(s)) => Some(s),
                _ => None,
            };
            distinct::evaluate(limit, prev, frame, ask)
        }
        Algorithm::Concurrency => {
            let prev = match state {
                Some(State::Concurrency(s)) => Some(s),
                _ => None,
            };
            concurrency::evaluate(limit, prev, frame.now, ask)
        }
    }
}

/// `a / b` rounded up, for `a >= 0`, `b > 0` (Lua: `math.ceil` of an exact quotient is not
/// exact above 2^53; ports compute `floor` and correct).
pub(crate) fn ceil_div(a: u64, b: u64) -> u64 {
    a / b + u64::from(!a.is_multiple_of(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn validation_rejects_what_cannot_be_exact() {
        let ok = |l: &Limit| l.validate().is_ok();
        assert!(ok(&Limit::fixed_window(u64::from(u32::MAX), MAX_WINDOW)));
        assert!(!ok(&Limit::fixed_window(1, MAX_WINDOW + 1)));
        assert!(!ok(&Limit::fixed_window(1, 0)));
        assert!(ok(&Limit::new(Algorithm::SlidingLog, MAX_LOG, 60 * S)));
        assert!(!ok(&Limit::new(Algorithm::SlidingLog, MAX_LOG + 1, 60 * S)));
        let mut sw = Limit::new(Algorithm::SlidingWindow, 100, S);
        sw.precision = 3;
        assert!(!ok(&sw), "1 s is not divisible into 3 whole-µs sub-windows");
        sw.precision = 0;
        assert!(!ok(&sw));
        sw.precision = 10;
        assert!(ok(&sw));
        // 100 000 per day: gcd reduces the arithmetic to 100 000 × 864 000 units.
        assert!(ok(&Limit::new(Algorithm::TokenBucket, 100_000, 86_400 * S)));
        // A prime rate per year does not reduce at all.
        let l = Limit::new(Algorithm::Gcra, 4_294_967_291, 365 * 86_400 * S);
        assert!(!ok(&l));
        let mut zero = Limit::new(Algorithm::LeakyBucket, 0, S);
        assert!(ok(&zero));
        zero.burst = 5;
        assert!(!ok(&zero));
    }

    #[test]
    fn calendar_applies_to_windowed_algorithms_only() {
        let cal = Calendar {
            unit: Unit::Day,
            tz: chrono_tz::Asia::Shanghai,
        };
        let mut l = Limit::fixed_window(1, 86_400 * S);
        l.calendar = Some(cal);
        // 2024-01-01T00:00:00Z is 08:00 in Shanghai: the day began at 16:00Z the day before.
        let now = 1_704_067_200 * S;
        assert_eq!(l.frame(now).window_start, now - 8 * 3_600 * S);
        l.algorithm = Algorithm::SlidingWindow;
        assert_eq!(l.frame(now).window_start, now);
    }
}
