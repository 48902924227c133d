//! gcra: the generic cell rate algorithm with the semantics of redis-cell's `CL.THROTTLE`.
//!
//! Emission interval `T = window / requests_per_unit`; the state is the theoretical arrival
//! time `TAT`; a request of `hits` moves it to `max(TAT, now) + hits * T` and is allowed when
//! that is at most `now + burst * T`. So `burst: N` (default `requests_per_unit`) admits
//! exactly **N** back-to-back requests from idle; redis-cell's `max_burst` counts the requests
//! beyond the first, so `burst: N` here is `CL.THROTTLE key N-1 ...` there (which admits N).
//! The answers are redis-cell's: `limit_remaining` (its "remaining"), and
//! `duration_until_reset` = its "retry after" when rejected and its "reset after" when allowed.
//!
//! The state is kept as the shared [`bucket`] meter (`TAT = at + level /
//! drain`), so gcra, token_bucket and leaky_bucket decide identically; the test below holds it
//! to a transcription of redis-cell's code in exact arithmetic.

use super::bucket::{self, Params};
use super::{Ask, Limit, Outcome};
use crate::model::Micros;

pub(crate) fn evaluate(
    limit: &Limit,
    prev: Option<&bucket::State>,
    now: Micros,
    ask: Ask,
) -> Outcome {
    bucket::evaluate(&Params::of(limit), prev, now, ask)
}

#[cfg(test)]
mod tests {
    use super::super::timeline::{self, Event};
    use super::super::{Algorithm, State as AnyState};
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn limit(requests: u64, window: Micros, burst: u64) -> Limit {
        Limit::new(Algorithm::Gcra, requests, window)
            .and_then(|l| l.with_burst(burst))
            .unwrap()
    }

    fn state(o: &Outcome) -> bucket::State {
        match &o.charged {
            AnyState::Bucket(s) => *s,
            other => panic!("unexpected state {other:?}"),
        }
    }

    /// redis-cell's `CL.THROTTLE` (src/throttle/mod.rs, rate_limit) with times scaled by
    /// `requests` so the emission interval is exact: every time below is µs × requests.
    struct RedisCell {
        requests: i128,
        /// Emission interval (scaled): `window`.
        t: i128,
        /// Delay variation tolerance: `T * (max_burst + 1)`.
        dvt: i128,
        tat: Option<i128>,
    }

    impl RedisCell {
        fn new(l: &Limit, max_burst: u64) -> Self {
            let t = l.window() as i128;
            RedisCell {
                requests: l.requests().into(),
                t,
                dvt: t * (i128::from(max_burst) + 1),
                tat: None,
            }
        }

        /// (limited, remaining, retry_after µs or -1, reset_after µs), rounded up to µs.
        fn throttle(&mut self, now: Micros, quantity: u64) -> (bool, i128, i128, i128) {
            let now = i128::from(now) * self.requests;
            let increment = self.t * i128::from(quantity);
            let tat = self.tat.unwrap_or(now).max(now);
            let new_tat = tat + increment;
            let allow_at = new_tat - self.dvt;
            let diff = now - allow_at;
            let (limited, retry_after, ttl) = if diff < 0 {
                let retry = if increment <= self.dvt { -diff } else { -1 };
                (true, retry, tat - now)
            } else {
                self.tat = Some(new_tat);
                (false, -1, new_tat - now)
            };
            let next = self.dvt - ttl;
            let remaining = if next > -self.t {
                next.div_euclid(self.t)
            } else {
                0
            };
            let up = |v: i128| {
                if v < 0 {
                    v
                } else {
                    (v + self.requests - 1).div_euclid(self.requests)
                }
            };
            (limited, remaining, up(retry_after), up(ttl))
        }
    }

    #[test]
    fn burst_n_admits_n_and_redis_cell_max_burst_n_admits_n_plus_1() {
        let l = limit(10, S, 4);
        let mut st = None;
        let mut ours = 0;
        let mut cell = RedisCell::new(&l, 4);
        let mut theirs = 0;
        for _ in 0..10 {
            let o = evaluate(&l, st.as_ref(), 0, Ask::take(1));
            if o.allowed {
                ours += 1;
                st = Some(state(&o));
            }
            if !cell.throttle(0, 1).0 {
                theirs += 1;
            }
        }
        assert_eq!((ours, theirs), (4, 5));
    }

    #[test]
    fn table() {
        // 1 per 100 ms, burst 3: strict pacing after the burst.
        let l = limit(10, S, 3);
        let t = S / 10;
        let mut st = None;
        let mut ask = |now: Micros, hits: u64| {
            let o = evaluate(&l, st.as_ref(), now, Ask::take(hits));
            if o.allowed {
                st = Some(state(&o));
            }
            (o.allowed, o.remaining, o.reset)
        };
        assert_eq!(ask(0, 1), (true, 2, t));
        assert_eq!(ask(0, 2), (true, 0, 3 * t));
        assert_eq!(
            ask(0, 1),
            (false, 0, t),
            "retry after one emission interval"
        );
        assert_eq!(ask(t - 1, 1), (false, 0, 1));
        assert_eq!(ask(t, 1), (true, 0, 3 * t));
        assert_eq!(
            ask(t, 4),
            (false, 0, 3 * t),
            "more than the burst never fits"
        );
        assert_eq!(ask(t, 0), (true, 0, 3 * t));
        // Long idle: full burst, nothing more.
        assert_eq!(ask(3_600 * S, 3), (true, 0, 3 * t));
    }

    proptest! {
        #[test]
        fn agrees_with_redis_cell(
            (r, w, b) in (1u64..50, 1i64..20, 1u64..20), events in timeline::events(60, 2 * S),
        ) {
            let l = limit(r, w * S / 4, b);
            let mut cell = RedisCell::new(&l, b - 1);
            let mut st: Option<bucket::State> = None;
            let mut now = 1_000 * S;
            for Event { advance, hits } in events {
                now += advance;
                let o = evaluate(&l, st.as_ref(), now, Ask::take(hits));
                let (limited, remaining, retry, reset) = cell.throttle(now, hits);
                prop_assert_eq!(o.allowed, !limited);
                if o.allowed {
                    st = Some(state(&o));
                    prop_assert_eq!(i128::from(o.remaining), remaining);
                    prop_assert_eq!(i128::from(o.reset), reset);
                } else if retry >= 0 {
                    prop_assert_eq!(i128::from(o.reset), retry);
                }
            }
        }
    }
}
