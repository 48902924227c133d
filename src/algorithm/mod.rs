//! The decision functions: pure arithmetic on `(limit, previous state, frame, ask)`.
//!
//! Nothing here performs I/O, awaits, or reads a clock: time arrives in a [`Window`]. The Redis
//! Lua scripts are ports of these functions, so every quantity is an integer number of
//! microseconds or hits and stays below 2^53 for any [`Limit`] (one cannot be built otherwise).
//! Calendar windows (time zones) are the one exception: [`calendar`] computes their bounds in
//! Rust and hands them over in the [`Window`]. ALGORITHMS.md states every definition.

pub(crate) mod bucket;
pub(crate) mod calendar;
pub(crate) mod concurrency;
pub mod distinct;
pub mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
mod limit;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

#[cfg(test)]
pub(crate) mod timeline;

pub use limit::{
    Calendar, InvalidLimit, Limit, DEFAULT_PRECISION, MAX_LOG, MAX_PRECISION, MAX_WINDOW,
};

use crate::model::Micros;

/// The largest integer every intermediate value must stay within (Lua numbers are doubles).
pub const MAX_SAFE: u64 = (1 << 53) - 1;
/// Counts (including debt) saturate here, so that `count + hits` stays below 2^53.
pub const COUNT_CAP: u64 = 1 << 52;

/// Which algorithm decides a limit. What each one is and takes is answered here, by
/// its row in one table (`traits`), so that no code outside this module asks which algorithm it holds.
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

/// The optional parameter an algorithm takes beyond its rate and window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// A bucket's capacity ([`Limit::with_burst`]).
    Burst,
    /// A sliding window's sub-windows ([`Limit::with_precision`]).
    Precision,
    /// Windows aligned to a calendar ([`Limit::with_calendar`]).
    Calendar,
}

impl Param {
    /// Its name as the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Param::Burst => "burst",
            Param::Precision => "precision",
            Param::Calendar => "align: calendar",
        }
    }
}

/// What an algorithm is, as the code outside this module needs to know it.
struct Traits {
    name: &'static str,
    param: Option<Param>,
    leases: bool,
    counts_values: bool,
    cacheable: bool,
}

/// Most algorithms count requests in some window and take no parameter.
const COUNTS: Traits = Traits {
    name: "",
    param: None,
    leases: false,
    counts_values: false,
    cacheable: true,
};

impl Algorithm {
    /// The algorithm of a limit that names none (envoyproxy/ratelimit's only one).
    pub const DEFAULT: Algorithm = Algorithm::FixedWindow;

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

    /// The table: a new algorithm gets its row here (and its decision function in
    /// [`evaluate`]).
    const fn traits(self) -> Traits {
        match self {
            Algorithm::FixedWindow => Traits {
                name: "fixed_window",
                param: Some(Param::Calendar),
                ..COUNTS
            },
            Algorithm::SlidingWindow => Traits {
                name: "sliding_window",
                param: Some(Param::Precision),
                ..COUNTS
            },
            Algorithm::SlidingLog => Traits {
                name: "sliding_log",
                ..COUNTS
            },
            Algorithm::TokenBucket => Traits {
                name: "token_bucket",
                param: Some(Param::Burst),
                ..COUNTS
            },
            Algorithm::LeakyBucket => Traits {
                name: "leaky_bucket",
                param: Some(Param::Burst),
                ..COUNTS
            },
            Algorithm::Gcra => Traits {
                name: "gcra",
                param: Some(Param::Burst),
                ..COUNTS
            },
            // A cache cannot tell whether a value it has not seen would be counted.
            Algorithm::Distinct => Traits {
                name: "distinct",
                param: Some(Param::Calendar),
                counts_values: true,
                cacheable: false,
                ..COUNTS
            },
            // A release (at any replica) frees leases long before they would expire, so a
            // cached rejection would be wrong.
            Algorithm::Concurrency => Traits {
                name: "concurrency",
                leases: true,
                cacheable: false,
                ..COUNTS
            },
        }
    }

    /// Its name as the config and the storage keys write it.
    pub const fn as_str(self) -> &'static str {
        self.traits().name
    }

    /// The parameter beyond rate and window it takes, if any.
    pub const fn param(self) -> Option<Param> {
        self.traits().param
    }

    /// Whether it takes `param`.
    pub fn takes(self, param: Param) -> bool {
        self.param() == Some(param)
    }

    /// The algorithms that count per window and so can align windows to a calendar.
    pub fn has_windows(self) -> bool {
        self.takes(Param::Calendar)
    }

    /// Its requests are leases held until released or expired, not requests per window:
    /// `requests` is how many may be in flight, `window` how long a lease lasts. A settlement
    /// releases every lease whatever was used, an override keeps the lease time, and the
    /// quota unit reported is concurrent requests.
    pub const fn leases(self) -> bool {
        self.traits().leases
    }

    /// It counts the distinct values of a descriptor's last entry (which is then not part of
    /// the key) rather than requests.
    pub const fn counts_values(self) -> bool {
        self.traits().counts_values
    }

    /// Whether a replica's local cache may answer a take of this algorithm from a decision it
    /// remembers (see `store::local_cache`).
    pub const fn cacheable(self) -> bool {
        self.traits().cacheable
    }

    /// The names of the algorithms for which `pick` holds, as a message lists them:
    /// "sliding_window only", "fixed_window and distinct", "a, b and c".
    pub fn names_where(pick: impl Fn(Algorithm) -> bool) -> String {
        let names: Vec<&str> = Algorithm::ALL
            .into_iter()
            .filter(|a| pick(*a))
            .map(Algorithm::as_str)
            .collect();
        match names.as_slice() {
            [] => "no algorithm".to_string(),
            [one] => format!("{one} only"),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// "Now", and the bounds of the window that contains it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub now: Micros,
    pub window_start: Micros,
    pub window_end: Micros,
}

impl Window {
    /// The window of length `window` (µs) that contains `now`, counted from the Unix epoch, so
    /// every instance with the same clock agrees on it:
    ///
    /// ```
    /// use sluice::algorithm::Window;
    ///
    /// let f = Window::epoch_aligned(125_000_000, 60_000_000); // 2 min 5 s, minute windows
    /// assert_eq!((f.window_start, f.window_end), (120_000_000, 180_000_000));
    /// ```
    pub fn epoch_aligned(now: Micros, window: Micros) -> Window {
        let window = window.max(1);
        let window_start = now - now.rem_euclid(window);
        Window {
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

impl State {
    /// Requested heap bytes beyond its inline size (the memory store's accounting).
    pub fn heap_bytes(&self) -> usize {
        let words = |n: usize| n * 8;
        match self {
            State::FixedWindow(_) | State::Bucket(_) => 0,
            State::SlidingWindow(s) => words(s.counts.capacity()),
            State::SlidingLog(s) => words(s.log.capacity()),
            // (expiry, leases): two words per group.
            State::Concurrency(s) => words(2 * s.leases.capacity()),
            State::Distinct(s) => match &s.values {
                distinct::Values::Exact(v) => words(v.capacity()),
                distinct::Values::Hll(r) => r.len(),
            },
        }
    }

    /// Drops spare heap capacity (a charged state's log grew by pushing): a stored state
    /// holds what a copy of it would.
    pub fn shrink(&mut self) {
        match self {
            State::FixedWindow(_) | State::Bucket(_) => {}
            State::SlidingWindow(s) => s.counts.shrink_to_fit(),
            State::SlidingLog(s) => s.log.shrink_to_fit(),
            State::Concurrency(s) => s.leases.shrink_to_fit(),
            State::Distinct(s) => {
                if let distinct::Values::Exact(v) = &mut s.values {
                    v.shrink_to_fit();
                }
            }
        }
    }
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
/// let limit = Limit::fixed_window(2, MINUTE)?;
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
/// # Ok::<(), sluice::algorithm::InvalidLimit>(())
/// ```
pub fn evaluate(limit: &Limit, state: Option<&State>, frame: Window, ask: Ask) -> Outcome {
    match limit.algorithm() {
        Algorithm::FixedWindow => {
            let prev = match state {
                Some(State::FixedWindow(s)) => Some(s),
                _ => None,
            };
            fixed_window::evaluate(limit.requests(), prev, frame, ask)
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
            match limit.algorithm() {
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
