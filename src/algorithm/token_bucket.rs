//! token_bucket: a bucket of capacity `burst` tokens (default `requests_per_unit`), refilled
//! continuously at `requests_per_unit` per window and full when first seen. A request takes
//! `hits` tokens or is rejected without taking any, so `burst: N` admits exactly N
//! back-to-back single-hit requests from idle, and never more than `burst + rate * elapsed`
//! over any stretch of time.
//!
//! The arithmetic is the shared [`bucket`] meter: tokens available are
//! `(cap - level) / hit`. The tests below hold it to a textbook token bucket.

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
        Limit::new(Algorithm::TokenBucket, requests, window)
            .and_then(|l| l.with_burst(burst))
            .unwrap()
    }

    fn state(o: &Outcome) -> bucket::State {
        match &o.charged {
            AnyState::Bucket(s) => *s,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn burst_n_admits_exactly_n_back_to_back() {
        for n in [1u64, 2, 5, 150] {
            let l = limit(100, 60 * S, n);
            let mut st = None;
            let mut admitted = 0;
            for _ in 0..n + 5 {
                let o = evaluate(&l, st.as_ref(), 1_000 * S, Ask::take(1));
                if o.allowed {
                    admitted += 1;
                    st = Some(state(&o));
                }
            }
            assert_eq!(admitted, n, "burst {n}");
        }
    }

    #[test]
    fn table() {
        // 10 per 10 s (one token per second), capacity 5.
        let l = limit(10, 10 * S, 5);
        let full = None;
        let empty = Some(bucket::State {
            at: 100 * S,
            level: Params::of(&l).cap,
        });
        // (state, now, hits, allowed, remaining, reset)
        type Case = (Option<bucket::State>, Micros, u64, bool, u64, Micros);
        let cases: &[Case] = &[
            (full, 100 * S, 1, true, 4, S),
            (full, 100 * S, 0, true, 5, 0),
            (full, 100 * S, 5, true, 0, 5 * S),
            (full, 100 * S, 6, false, 0, 0),
            (empty, 100 * S, 1, false, 0, S),
            (empty, 100 * S, 0, true, 0, 5 * S),
            (empty, 100 * S + S / 2, 1, false, 0, S / 2),
            (empty, 101 * S, 1, true, 0, 5 * S),
            (empty, 102 * S, 3, false, 0, S),
            // Long idle: full again, never more than full.
            (empty, 1_000_000 * S, 5, true, 0, 5 * S),
            (empty, 1_000_000 * S, 6, false, 0, 0),
            // Clock behind the state: nothing refills.
            (empty, 50 * S, 1, false, 0, 51 * S),
        ];
        for (i, &(st, now, hits, allowed, remaining, reset)) in cases.iter().enumerate() {
            let o = evaluate(&l, st.as_ref(), now, Ask::take(hits));
            assert_eq!(
                (o.allowed, o.remaining, o.reset),
                (allowed, remaining, reset),
                "case {i}"
            );
        }
    }

    #[test]
    fn refund_fills_back_but_never_beyond_full() {
        let l = limit(10, 10 * S, 5);
        let o = evaluate(&l, None, 0, Ask::take(3));
        let r = evaluate(&l, Some(&state(&o)), 0, Ask::refund(2));
        assert_eq!(r.remaining, 4);
        let r = evaluate(&l, Some(&state(&o)), 0, Ask::refund(u64::MAX));
        assert_eq!((r.remaining, r.reset, r.expires_at), (5, 0, 0));
    }

    /// A textbook token bucket in unreduced 128-bit arithmetic: tokens = `num / window`.
    struct Textbook {
        requests: u128,
        window: u128,
        burst: u128,
        at: Micros,
        num: u128,
    }

    impl Textbook {
        fn new(l: &Limit) -> Self {
            Textbook {
                requests: l.requests().into(),
                window: l.window() as u128,
                burst: l.param().into(),
                at: Micros::MIN,
                num: l.param() as u128 * l.window() as u128,
            }
        }

        /// (allowed, remaining, reset or retry-after) and takes the tokens when allowed.
        fn ask(&mut self, now: Micros, hits: u64) -> (bool, u64, Micros) {
            let cap = self.burst * self.window;
            if self.at != Micros::MIN && now > self.at {
                self.num = (self.num + (now - self.at) as u128 * self.requests).min(cap);
            }
            self.at = self.at.max(now);
            let need = hits as u128 * self.window;
            let ceil = |a: u128| a.div_ceil(self.requests) as Micros;
            if hits as u128 <= self.burst && need <= self.num {
                self.num -= need;
                (true, (self.num / self.window) as u64, ceil(cap - self.num))
            } else if hits as u128 <= self.burst {
                (false, 0, ceil(need - self.num))
            } else {
                (false, 0, ceil(cap - self.num))
            }
        }
    }

    fn bucket_limit() -> impl Strategy<Value = Limit> {
        (1u64..50, 1i64..20, 1u64..20).prop_map(|(r, w, b)| limit(r, w * S / 4, b))
    }

    proptest! {
        #[test]
        fn agrees_with_a_textbook_token_bucket(
            l in bucket_limit(), events in timeline::events(60, 2 * S),
        ) {
            let mut book = Textbook::new(&l);
            let mut st: Option<bucket::State> = None;
            let mut now = 1_000 * S;
            for Event { advance, hits } in events {
                now += advance;
                let o = evaluate(&l, st.as_ref(), now, Ask::take(hits));
                let want = book.ask(now, hits);
                prop_assert_eq!((o.allowed, o.remaining, o.reset), want);
                if o.allowed {
                    st = Some(state(&o));
                }
            }
        }

        #[test]
        fn never_more_than_burst_plus_rate_times_elapsed(
            l in bucket_limit(), events in timeline::events(60, S),
        ) {
            let admitted = timeline::run(&l, &events, false);
            for (i, &(t0, _)) in admitted.iter().enumerate() {
                let mut sum = 0u128;
                for &(t1, h) in &admitted[i..] {
                    sum += u128::from(h);
                    let refill = (t1 - t0) as u128 * u128::from(l.requests()) / l.window() as u128;
                    prop_assert!(sum <= u128::from(l.param()) + refill);
                }
            }
        }
    }
}
