//! The core shared by token_bucket, leaky_bucket and gcra: a meter whose level rises by the
//! hits admitted and drains continuously at `requests / window`, in exact integer arithmetic.
//!
//! Units: one hit weighs `hit = window / g` ticks and the level drains `drain = requests / g`
//! ticks per µs, with `g = gcd(window, requests)`, so the rate is exact (no rounding of the
//! emission interval `window / requests`). The capacity is `cap = burst * hit` ticks; a request
//! of `hits` is allowed when `hits <= burst` and `level + hits * hit <= cap`.
//!
//! * token_bucket: the tokens available are `(cap - level) / hit`; full = level 0.
//! * leaky_bucket: the level itself (the "funnel"); empty = level 0.
//! * gcra: the theoretical arrival time is `TAT = at + level / drain` µs (redis-cell's state).
//!
//! Debt (`charge: always`): a rejected request still adds its hits, the level saturating at
//! `2 * cap`, so a client that keeps hammering waits at most `2 * burst / rate` after it stops.
//! Refunds lower the level (back toward a full bucket), never below zero. A clock behind the
//! state's `at` (skew between instances) drains nothing; `at` never moves back.
//!
//! Bounds: validation keeps `cap <= 2^50`, so `level <= 2 * cap` and `level + hits * hit <=
//! 4 * cap` stay below 2^53; `dt * drain` is only computed when it is at most `level`.

use super::{ceil_div, Ask, Limit, Outcome};
use crate::model::Micros;

/// The largest capacity in ticks that validation accepts.
pub(crate) const MAX_CAP: u64 = 1 << 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// When `level` was last computed (never moves back).
    pub at: Micros,
    /// Ticks in the meter at `at`.
    pub level: u64,
}

/// A limit's parameters in ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// Ticks one hit adds.
    pub hit: u64,
    /// Ticks drained per µs (0: nothing ever drains; every request is rejected).
    pub drain: u64,
    pub burst: u64,
    /// `burst * hit`, saturating (validation rejects saturated values).
    pub cap: u64,
}

impl Params {
    pub(crate) fn of(limit: &Limit) -> Params {
        if limit.requests() == 0 {
            return Params {
                hit: 1,
                drain: 0,
                burst: 0,
                cap: 0,
            };
        }
        let burst = limit.burst().unwrap_or(0);
        let window = limit.window().max(1) as u64;
        let g = gcd(window, limit.requests());
        let hit = window / g;
        Params {
            hit,
            drain: limit.requests() / g,
            burst,
            cap: burst.saturating_mul(hit),
        }
    }

    /// `burst * hit`, or `None` when it overflows.
    pub(crate) fn cap_checked(&self) -> Option<u64> {
        self.burst.checked_mul(self.hit)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The level after draining for `dt` µs.
fn drained(p: &Params, level: u64, dt: u64) -> u64 {
    if dt > level / p.drain {
        0
    } else {
        level - dt * p.drain
    }
}

/// µs until the level is down to `target`.
fn until(p: &Params, level: u64, target: u64) -> Micros {
    if level <= target {
        0
    } else {
        ceil_div(level - target, p.drain) as Micros
    }
}

pub(crate) fn evaluate(p: &Params, prev: Option<&State>, now: Micros, ask: Ask) -> Outcome {
    if p.drain == 0 {
        // requests_per_unit 0: nothing passes but looks and refunds, and nothing is kept.
        return Outcome {
            allowed: ask.hits == 0 || ask.refund,
            remaining: 0,
            reset: 0,
            debt_reset: 0,
            charged: super::State::Bucket(State { at: now, level: 0 }),
            expires_at: now,
        };
    }
    let (at, level) = match prev {
        Some(s) if s.at >= now => (s.at, s.level),
        Some(s) => (now, drained(p, s.level, (now - s.at) as u64)),
        None => (now, 0),
    };
    // Times are computed from `at`; when the clock is behind it, the difference is added.
    let skew = at - now;
    let outcome = |allowed: bool, remaining: u64, reset: Micros, debt_reset: Micros, level| {
        let empty_in = until(p, level, 0);
        Outcome {
            allowed,
            remaining,
            reset: skew + reset,
            debt_reset: skew + debt_reset,
            charged: super::State::Bucket(State { at, level }),
            expires_at: at + empty_in,
        }
    };
    let remaining_at = |level: u64| p.cap.saturating_sub(level) / p.hit;

    if ask.refund {
        let level = if ask.hits > level / p.hit {
            0
        } else {
            level - ask.hits * p.hit
        };
        let r = until(p, level, 0);
        return outcome(true, remaining_at(level), r, r, level);
    }

    let fits = ask.hits <= p.burst && level + ask.hits * p.hit <= p.cap;
    if fits {
        let level = level + ask.hits * p.hit;
        let r = until(p, level, 0);
        return outcome(true, remaining_at(level), r, r, level);
    }
    // Time until this request would fit into `level`; a request larger than the capacity
    // never fits, and reports when the bucket is back to its full allowance.
    let retry = |level: u64| {
        if ask.hits > p.burst {
            until(p, level, 0)
        } else {
            until(p, level, p.cap - ask.hits * p.hit)
        }
    };
    let debt_cap = p.cap.saturating_mul(2);
    let debt = if ask.hits > p.burst.saturating_mul(2) {
        debt_cap.max(level)
    } else {
        (level + ask.hits * p.hit).min(debt_cap).max(level)
    };
    outcome(false, 0, retry(level), retry(debt), debt)
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, State as AnyState, MAX_WINDOW};
    use super::*;

    const S: Micros = 1_000_000;

    fn params(requests: u64, window: Micros, burst: u64) -> Params {
        let l = Limit::new(Algorithm::TokenBucket, requests, window);
        let l = l.and_then(|l| l.with_burst(burst)).unwrap();
        Params::of(&l)
    }

    fn level(o: &Outcome) -> u64 {
        match &o.charged {
            AnyState::Bucket(s) => s.level,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn units_are_reduced_by_the_gcd() {
        let p = params(100_000, 86_400 * S, 100_000);
        assert_eq!((p.hit, p.drain), (864_000, 1));
        let p = params(3, S, 3);
        assert_eq!((p.hit, p.drain, p.cap), (1_000_000, 3, 3_000_000));
    }

    #[test]
    fn debt_saturates_at_twice_the_capacity() {
        let p = params(1, S, 2);
        let mut st: Option<State> = None;
        for _ in 0..10 {
            let o = evaluate(&p, st.as_ref(), 0, Ask::take(1));
            st = Some(State {
                at: 0,
                level: level(&o),
            });
        }
        assert_eq!(st.unwrap().level, 2 * p.cap);
        let o = evaluate(&p, st.as_ref(), 0, Ask::take(1));
        assert!(!o.allowed);
        assert_eq!(o.reset, 3 * S, "three hits must drain before one fits");
        let o = evaluate(&p, None, 0, Ask::take(u64::MAX));
        assert_eq!(level(&o), 2 * p.cap);
    }

    #[test]
    fn clock_behind_the_state_drains_nothing() {
        let p = params(1, S, 1);
        let st = State {
            at: 100 * S,
            level: p.cap,
        };
        let o = evaluate(&p, Some(&st), 90 * S, Ask::take(1));
        assert!(!o.allowed);
        assert_eq!(o.reset, 11 * S);
        assert_eq!(o.expires_at, 102 * S, "the charged state holds the debt");
    }

    #[test]
    fn the_largest_valid_capacity_stays_exact() {
        let l = Limit::new(Algorithm::Gcra, 1, MAX_WINDOW)
            .and_then(|l| l.with_burst(MAX_CAP / (MAX_WINDOW as u64)))
            .expect("the largest capacity is valid");
        let p = Params::of(&l);
        let o = evaluate(&p, None, 0, Ask::take(u64::from(u32::MAX)));
        assert!(level(&o) <= 2 * p.cap && 4 * p.cap < 1 << 53);
        assert!(o.expires_at > 0);
    }
}
