//! A limit that cannot be built invalid (governor's `Quota` is the model): the constructors
//! check that every value the decision function computes stays exact in a double (below
//! 2^53) and that the state stays small, and each parameter lives only in the limits of the
//! algorithms that take it. A [`InvalidLimit`] says what to change.

use std::num::NonZeroU32;

use chrono_tz::Tz;

use super::{bucket, calendar, distinct, Algorithm, Param, Window};
use crate::model::{Micros, Unit};

/// The longest window: 10 years of 365 days, so that `now + 2 * window` stays below 2^53 µs
/// for centuries.
pub const MAX_WINDOW: Micros = 10 * 365 * 86_400 * 1_000_000;
/// sliding_log keeps one timestamp per hit: at most this many per key.
pub const MAX_LOG: u64 = 10_000;
/// sliding_window keeps `precision + 1` counters: at most this many sub-windows.
pub const MAX_PRECISION: u32 = 100;
/// The default number of sub-windows of a sliding_window.
pub const DEFAULT_PRECISION: NonZeroU32 = NonZeroU32::new(10).unwrap();

/// Windows aligned to local calendar boundaries in a time zone (`align: calendar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Calendar {
    /// Hour, day, week (from Monday), month (from the 1st) or year (from January 1st); a
    /// [`Limit`] accepts no other.
    pub unit: Unit,
    pub tz: Tz,
}

/// Why a limit cannot be built. The messages are the config's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLimit {
    #[error("the window must be longer than zero")]
    EmptyWindow,
    #[error(
        "the window ({} s) is longer than the longest supported window of 10 years",
        .0 / 1_000_000
    )]
    LongWindow(Micros),
    #[error("requests_per_unit {0} exceeds {max}", max = u32::MAX)]
    TooManyRequests(u64),
    #[error("{} applies to {}, not to {}", .param.as_str(), takers(.param), .algorithm.as_str())]
    NotApplicable { param: Param, algorithm: Algorithm },
    #[error("precision must be between 1 and {MAX_PRECISION} (got {0})")]
    Precision(u32),
    #[error(
        "a window of {window} µs cannot be split into {precision} sub-windows of whole microseconds; choose a precision that divides it"
    )]
    Indivisible { window: Micros, precision: u32 },
    #[error(
        "sliding_log keeps one timestamp per request, and {0} is more than the {MAX_LOG} it keeps per key; use algorithm: sliding_window for large limits"
    )]
    LongLog(u64),
    #[error("burst needs requests_per_unit above zero (nothing would refill the bucket)")]
    BurstWithoutRate,
    #[error("burst must be at least 1")]
    NoBurst,
    #[error(
        "burst {burst} with {requests} requests per {window} µs needs more than 2^51 units of exact arithmetic (burst × window / gcd(window, requests_per_unit)); lower burst, or pick a requests_per_unit that divides the window more evenly"
    )]
    InexactBucket {
        burst: u64,
        requests: u64,
        window: Micros,
    },
    #[error(
        "align: calendar needs a unit of hour, day, week, month or year (not a window or a shorter unit)"
    )]
    CalendarUnit,
}

/// "token_bucket, leaky_bucket and gcra": the algorithms that take `param`.
fn takers(param: &Param) -> String {
    Algorithm::names_where(|a| a.takes(*param))
}

/// The parameter of a limit, in the one shape its algorithm takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Params {
    None,
    /// Epoch-aligned windows, or calendar ones.
    Windows(Option<Calendar>),
    Precision(NonZeroU32),
    /// A bucket's capacity: at least 1, or 0 when `requests` is 0 (nothing refills).
    Burst(u64),
}

/// A validated limit: `requests` per `window`, decided by `algorithm`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    algorithm: Algorithm,
    requests: u64,
    window: Micros,
    params: Params,
}

impl Limit {
    /// A limit of `algorithm` with its defaults: `burst = requests`, precision 10, epoch
    /// windows.
    ///
    /// ```
    /// use sluice::algorithm::{Algorithm, Limit, MAX_WINDOW};
    ///
    /// assert!(Limit::new(Algorithm::Gcra, 100, 1_000_000).is_ok());
    /// let err = Limit::fixed_window(5, MAX_WINDOW + 1).unwrap_err();
    /// assert!(err.to_string().contains("longest supported window"), "{err}");
    /// ```
    pub fn new(algorithm: Algorithm, requests: u64, window: Micros) -> Result<Self, InvalidLimit> {
        let params = match algorithm.param() {
            None => Params::None,
            Some(Param::Calendar) => Params::Windows(None),
            Some(Param::Precision) => Params::Precision(DEFAULT_PRECISION),
            Some(Param::Burst) => Params::Burst(requests),
        };
        Limit {
            algorithm,
            requests,
            window,
            params,
        }
        .checked()
    }

    /// A limit of [`Algorithm::DEFAULT`], fixed_window.
    pub fn fixed_window(requests: u64, window: Micros) -> Result<Self, InvalidLimit> {
        Limit::new(Algorithm::DEFAULT, requests, window)
    }

    /// This limit with a bucket capacity of `burst` (token_bucket, leaky_bucket, gcra).
    pub fn with_burst(self, burst: u64) -> Result<Self, InvalidLimit> {
        self.expect(Param::Burst)?;
        Limit {
            params: Params::Burst(burst),
            ..self
        }
        .checked()
    }

    /// This limit with `precision` sub-windows (sliding_window).
    pub fn with_precision(self, precision: u32) -> Result<Self, InvalidLimit> {
        self.expect(Param::Precision)?;
        let p = NonZeroU32::new(precision).ok_or(InvalidLimit::Precision(precision))?;
        Limit {
            params: Params::Precision(p),
            ..self
        }
        .checked()
    }

    /// This limit with windows aligned to `calendar` (fixed_window, distinct).
    pub fn with_calendar(self, calendar: Calendar) -> Result<Self, InvalidLimit> {
        self.expect(Param::Calendar)?;
        if calendar.unit < Unit::Hour {
            return Err(InvalidLimit::CalendarUnit);
        }
        Limit {
            params: Params::Windows(Some(calendar)),
            ..self
        }
        .checked()
    }

    /// The same algorithm and parameters at another rate (a limit override): a bucket's burst
    /// becomes the new `requests`; calendar windows follow `unit` if it is one a calendar
    /// takes, and are epoch-aligned otherwise.
    pub fn with_rate(
        self,
        requests: u64,
        window: Micros,
        unit: Unit,
    ) -> Result<Self, InvalidLimit> {
        let params = match self.params {
            Params::Burst(_) => Params::Burst(requests),
            Params::Windows(c) => Params::Windows(
                c.filter(|_| unit >= Unit::Hour)
                    .map(|c| Calendar { unit, ..c }),
            ),
            p => p,
        };
        Limit {
            requests,
            window,
            params,
            ..self
        }
        .checked()
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Requests per window (max_in_flight for an algorithm that [`Algorithm::leases`]).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Window length in microseconds (> 0); for calendar windows, the nominal length; the
    /// lease time for an algorithm that [`Algorithm::leases`].
    pub fn window(&self) -> Micros {
        self.window
    }

    /// token_bucket / leaky_bucket / gcra: how many single-hit requests pass back to back
    /// from idle.
    pub fn burst(&self) -> Option<u64> {
        match self.params {
            Params::Burst(b) => Some(b),
            _ => None,
        }
    }

    /// sliding_window: sub-windows per window.
    pub fn precision(&self) -> Option<NonZeroU32> {
        match self.params {
            Params::Precision(p) => Some(p),
            _ => None,
        }
    }

    /// fixed_window / distinct: calendar windows instead of windows aligned to the epoch.
    pub fn calendar(&self) -> Option<Calendar> {
        match self.params {
            Params::Windows(c) => c,
            _ => None,
        }
    }

    /// The number parameter beyond rate and window (burst or precision), 0 if none: what a
    /// port of the decision functions takes.
    pub fn param(&self) -> u64 {
        match self.params {
            Params::Burst(b) => b,
            Params::Precision(p) => u64::from(p.get()),
            Params::None | Params::Windows(_) => 0,
        }
    }

    /// The frame of `now` for this limit: windows aligned to the epoch, or to the calendar.
    pub fn frame(&self, now: Micros) -> Window {
        match self.calendar() {
            Some(c) => calendar::frame(now, c),
            None => Window::epoch_aligned(now, self.window),
        }
    }

    /// distinct: whether the values are kept as a HyperLogLog (limits above
    /// [`distinct::EXACT_MAX`]) rather than an exact set.
    pub fn is_approximate(&self) -> bool {
        self.algorithm.counts_values() && self.requests > distinct::EXACT_MAX
    }

    fn expect(&self, param: Param) -> Result<(), InvalidLimit> {
        if self.algorithm.takes(param) {
            Ok(())
        } else {
            Err(InvalidLimit::NotApplicable {
                param,
                algorithm: self.algorithm,
            })
        }
    }

    /// `self` if every value its decision function computes stays exact and its state small.
    fn checked(self) -> Result<Self, InvalidLimit> {
        if self.window <= 0 {
            return Err(InvalidLimit::EmptyWindow);
        }
        if self.window > MAX_WINDOW {
            return Err(InvalidLimit::LongWindow(self.window));
        }
        if self.requests > u64::from(u32::MAX) {
            return Err(InvalidLimit::TooManyRequests(self.requests));
        }
        // sliding_log's state is one timestamp per request.
        if self.algorithm == Algorithm::SlidingLog && self.requests > MAX_LOG {
            return Err(InvalidLimit::LongLog(self.requests));
        }
        match self.params {
            Params::None | Params::Windows(_) => Ok(self),
            Params::Precision(p) => {
                if p.get() > MAX_PRECISION {
                    return Err(InvalidLimit::Precision(p.get()));
                }
                if self.window % Micros::from(p.get()) != 0 {
                    return Err(InvalidLimit::Indivisible {
                        window: self.window,
                        precision: p.get(),
                    });
                }
                Ok(self)
            }
            Params::Burst(burst) => self.checked_bucket(burst),
        }
    }

    fn checked_bucket(self, burst: u64) -> Result<Self, InvalidLimit> {
        if self.requests == 0 {
            // Nothing ever refills: every request is rejected and no state is kept.
            return if burst == 0 {
                Ok(self)
            } else {
                Err(InvalidLimit::BurstWithoutRate)
            };
        }
        if burst == 0 {
            return Err(InvalidLimit::NoBurst);
        }
        match bucket::Params::of(&self).cap_checked() {
            Some(cap) if cap <= bucket::MAX_CAP => Ok(self),
            _ => Err(InvalidLimit::InexactBucket {
                burst,
                requests: self.requests,
                window: self.window,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn validation_rejects_what_cannot_be_exact() {
        let ok = |l: Result<Limit, InvalidLimit>| l.is_ok();
        let new = Limit::new;
        assert!(ok(Limit::fixed_window(u64::from(u32::MAX), MAX_WINDOW)));
        assert!(!ok(Limit::fixed_window(1, MAX_WINDOW + 1)));
        assert!(!ok(Limit::fixed_window(1, 0)));
        assert!(ok(new(Algorithm::SlidingLog, MAX_LOG, 60 * S)));
        assert!(!ok(new(Algorithm::SlidingLog, MAX_LOG + 1, 60 * S)));
        let sw = new(Algorithm::SlidingWindow, 100, S).unwrap();
        assert_eq!(
            sw.clone().with_precision(3),
            Err(InvalidLimit::Indivisible {
                window: S,
                precision: 3
            }),
            "1 s is not divisible into 3 whole-µs sub-windows"
        );
        assert_eq!(
            sw.clone().with_precision(0),
            Err(InvalidLimit::Precision(0))
        );
        assert!(ok(sw.with_precision(10)));
        // 100 000 per day: gcd reduces the arithmetic to 100 000 × 864 000 units.
        assert!(ok(new(Algorithm::TokenBucket, 100_000, 86_400 * S)));
        // A prime rate per year does not reduce at all.
        assert!(!ok(new(Algorithm::Gcra, 4_294_967_291, 365 * 86_400 * S)));
        let zero = new(Algorithm::LeakyBucket, 0, S).unwrap();
        assert_eq!(zero.burst(), Some(0));
        assert_eq!(zero.with_burst(5), Err(InvalidLimit::BurstWithoutRate));
    }

    #[test]
    fn each_parameter_belongs_to_its_algorithms() {
        let fw = Limit::fixed_window(5, S).unwrap();
        assert_eq!((fw.burst(), fw.precision(), fw.param()), (None, None, 0));
        let err = fw.clone().with_burst(3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "burst applies to token_bucket, leaky_bucket and gcra, not to fixed_window"
        );
        let err = fw.with_precision(5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "precision applies to sliding_window only, not to fixed_window"
        );
        let gcra = Limit::new(Algorithm::Gcra, 5, S).unwrap();
        let cal = Calendar {
            unit: Unit::Day,
            tz: chrono_tz::UTC,
        };
        assert_eq!(
            gcra.clone().with_calendar(cal).unwrap_err().to_string(),
            "align: calendar applies to fixed_window and distinct, not to gcra"
        );
        assert_eq!(gcra.with_burst(2).map(|l| l.param()), Ok(2));
        let minute = Calendar {
            unit: Unit::Minute,
            ..cal
        };
        assert_eq!(
            Limit::fixed_window(5, 60 * S)
                .unwrap()
                .with_calendar(minute),
            Err(InvalidLimit::CalendarUnit)
        );
    }

    #[test]
    fn an_override_keeps_the_parameters_that_still_apply() {
        let cal = Calendar {
            unit: Unit::Day,
            tz: chrono_tz::Asia::Shanghai,
        };
        let daily = Limit::fixed_window(5, 86_400 * S)
            .unwrap()
            .with_calendar(cal)
            .unwrap();
        let hourly = daily.clone().with_rate(7, 3_600 * S, Unit::Hour).unwrap();
        assert_eq!(hourly.calendar().map(|c| c.unit), Some(Unit::Hour));
        let per_second = daily.with_rate(7, S, Unit::Second).unwrap();
        assert_eq!(per_second.calendar(), None);
        let bucket = Limit::new(Algorithm::TokenBucket, 5, S)
            .unwrap()
            .with_burst(9)
            .unwrap();
        assert_eq!(
            bucket.with_rate(20, S, Unit::Second).unwrap().burst(),
            Some(20)
        );
    }

    #[test]
    fn calendar_applies_to_windowed_algorithms_only() {
        let cal = Calendar {
            unit: Unit::Day,
            tz: chrono_tz::Asia::Shanghai,
        };
        let l = Limit::fixed_window(1, 86_400 * S)
            .unwrap()
            .with_calendar(cal)
            .unwrap();
        // 2024-01-01T00:00:00Z is 08:00 in Shanghai: the day began at 16:00Z the day before.
        let now = 1_704_067_200 * S;
        assert_eq!(l.frame(now).window_start, now - 8 * 3_600 * S);
        let sw = Limit::new(Algorithm::SlidingWindow, 1, 86_400 * S).unwrap();
        assert_eq!(sw.frame(now).window_start, now);
    }
}
