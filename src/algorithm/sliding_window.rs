//! sliding_window: the window is split into `precision` sub-windows of `S = window / precision`
//! µs, aligned to the epoch; the count is the sum of every sub-window that overlaps
//! `(now - window, now]`, which is always `precision + 1` of them: the current one and the
//! `precision` before it.
//!
//! Allowed when `count + hits <= limit`. Because the oldest counted sub-window may lie mostly
//! before `now - window`, no window-long span ever holds more than `limit` admitted hits; the
//! slack is on the safe side: a hit is remembered for between `window` and `window + S`.
//!
//! State: the index of the newest sub-window (`head`) and `precision + 1` counters, newest
//! first. Debt (`charge: always`) lands in the current sub-window, saturating the total at
//! [`COUNT_CAP`]; a refund takes hits back from the newest sub-windows first, never below zero.
//! A clock behind the state's newest sub-window (skew between instances) counts into that
//! newest sub-window, which never frees quota early.

use super::{Ask, Limit, Outcome, COUNT_CAP};
use crate::model::Micros;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Index (`floor(t / S)`) of the sub-window `counts[0]` belongs to.
    pub head: i64,
    /// `counts[j]` belongs to sub-window `head - j`; `precision + 1` entries.
    pub counts: Vec<u64>,
}

pub(crate) fn evaluate(limit: &Limit, prev: Option<&State>, now: Micros, ask: Ask) -> Outcome {
    let p = limit.precision().map_or(1, |p| p.get()) as usize;
    let sub = (limit.window() / p as Micros).max(1);
    let window = sub * p as Micros;
    let i = now.div_euclid(sub);
    let mut st = match prev {
        Some(s) if s.counts.len() == p + 1 => {
            let head = s.head.max(i);
            let shift = (head - s.head).min(p as i64 + 1) as usize;
            let mut counts = vec![0; shift];
            counts.extend_from_slice(&s.counts[..p + 1 - shift]);
            State { head, counts }
        }
        _ => State {
            head: i,
            counts: vec![0; p + 1],
        },
    };
    let count: u64 = st.counts.iter().sum();
    // The first instant sub-window `k` no longer overlaps the window.
    let drop_at = |k: i64| (k + 1) * sub + window;
    // Time until every counted hit has left the window.
    let until_empty = |s: &State| {
        s.counts
            .iter()
            .position(|&c| c > 0)
            .map_or(0, |j| (drop_at(s.head - j as i64) - now).max(0))
    };
    // Time until `hits` more would fit, oldest sub-windows leaving first.
    let retry = |s: &State, hits: u64| {
        if hits > limit.requests() {
            return until_empty(s);
        }
        let mut total: u64 = s.counts.iter().sum();
        for j in (0..=p).rev() {
            if total + hits <= limit.requests() {
                // Fits once the sub-window older than `j` has left.
                return if j == p {
                    0
                } else {
                    (drop_at(s.head - j as i64 - 1) - now).max(0)
                };
            }
            total -= s.counts[j];
        }
        until_empty(s)
    };

    if ask.refund {
        let mut left = ask.hits;
        for c in st.counts.iter_mut() {
            let take = left.min(*c);
            *c -= take;
            left -= take;
        }
        let count: u64 = st.counts.iter().sum();
        let reset = until_empty(&st);
        return Outcome {
            allowed: true,
            remaining: limit.requests().saturating_sub(count),
            reset,
            debt_reset: reset,
            expires_at: now + reset,
            charged: super::State::SlidingWindow(st),
        };
    }

    let allowed = count
        .checked_add(ask.hits)
        .is_some_and(|a| a <= limit.requests());
    let uncharged_retry = if allowed { 0 } else { retry(&st, ask.hits) };
    st.counts[0] += ask.hits.min(COUNT_CAP.saturating_sub(count));
    let after: u64 = st.counts.iter().sum();
    let until = until_empty(&st);
    Outcome {
        allowed,
        remaining: if allowed { limit.requests() - after } else { 0 },
        reset: if allowed { until } else { uncharged_retry },
        debt_reset: if allowed { until } else { retry(&st, ask.hits) },
        expires_at: now + until,
        charged: super::State::SlidingWindow(st),
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline;
    use super::super::{Algorithm, State as AnyState};
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn limit(n: u64, window: Micros, precision: u32) -> Limit {
        Limit::new(Algorithm::SlidingWindow, n, window)
            .and_then(|l| l.with_precision(precision))
            .unwrap()
    }

    fn st(o: &Outcome) -> &State {
        match &o.charged {
            AnyState::SlidingWindow(s) => s,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn table() {
        let l = limit(10, 10 * S, 10);
        // (previous counts newest first at head 100, now, hits, allowed, remaining, reset)
        type Case = (Option<[u64; 11]>, Micros, u64, bool, u64, Micros);
        let full = [1u64; 11];
        let cases: &[Case] = &[
            // Empty state: the hit stays until its sub-window (100) leaves at 111 s.
            (None, 100 * S, 1, true, 9, 11 * S),
            (None, 100 * S, 0, true, 10, 0),
            (None, 100 * S, 10, true, 0, 11 * S),
            (None, 100 * S, 11, false, 0, 0),
            // 11 sub-windows each holding 1 is 11 > 10: over; one hit fits once sub-window
            // 90 leaves at 101 s, two once 91 leaves too.
            (Some(full), 100 * S + S / 2, 0, false, 0, S / 2),
            (Some(full), 100 * S + S / 2, 1, false, 0, S + S / 2),
            // Half a second later the oldest sub-window has moved out.
            (Some(full), 101 * S, 0, true, 0, 10 * S),
            // Long idle: everything forgotten.
            (Some(full), 10_000 * S, 10, true, 0, 11 * S),
            // Clock behind the state: counts into the newest sub-window, frees nothing.
            (Some(full), 50 * S, 1, false, 0, 52 * S),
        ];
        for (i, &(prev, now, hits, allowed, remaining, reset)) in cases.iter().enumerate() {
            let prev = prev.map(|c| State {
                head: 100,
                counts: c.to_vec(),
            });
            let o = evaluate(&l, prev.as_ref(), now, Ask::take(hits));
            assert_eq!(
                (o.allowed, o.remaining, o.reset),
                (allowed, remaining, reset),
                "case {i}"
            );
        }
    }

    #[test]
    fn debt_and_refund() {
        let l = limit(2, 10 * S, 10);
        let s = State {
            head: 5,
            counts: vec![0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
        };
        let o = evaluate(&l, Some(&s), 5 * S, Ask::take(1));
        assert!(!o.allowed);
        assert_eq!(o.reset, 8 * S, "sub-window 2 leaves at 13 s");
        assert_eq!(st(&o).counts[0], 1, "debt in the current sub-window");
        assert_eq!(
            o.debt_reset,
            8 * S,
            "one of the three must leave: still sub-window 2"
        );
        let r = evaluate(&l, Some(st(&o)), 5 * S, Ask::refund(2));
        assert_eq!(st(&r).counts, vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.remaining, 1);
        let r = evaluate(&l, Some(&s), 5 * S, Ask::refund(u64::MAX));
        assert_eq!(r.remaining, 2);
        assert_eq!(r.expires_at, 5 * S);
    }

    #[test]
    fn huge_limits_and_windows_do_not_overflow() {
        let l = limit(u64::from(u32::MAX), super::super::MAX_WINDOW, 100);
        let now = 4_000_000_000 * S;
        let o = evaluate(&l, None, now, Ask::take(u64::from(u32::MAX)));
        assert!(o.allowed);
        let o = evaluate(&l, Some(st(&o)), now + 1, Ask::take(u64::from(u32::MAX)));
        assert!(!o.allowed);
        assert!(o.reset <= l.window() + l.window() / 100);
        assert!(o.expires_at < super::super::MAX_SAFE as i64);
    }

    #[test]
    fn boundary_burst_demo() {
        // 3 per 5 s hammered around a window boundary never admits more than 3 in any 5 s.
        let l = limit(3, 5 * S, 5);
        let admitted = timeline::hammer(&l, 3 * S, 7 * S, 100_000);
        assert!(timeline::max_in_span(&admitted, 5 * S) <= 3);
        assert!(admitted.len() >= 3);
    }

    proptest! {
        #[test]
        fn never_more_than_the_limit_in_any_window(
            n in 1u64..8, precision in 1u32..6, events in timeline::events(60, 3 * S),
        ) {
            let l = limit(n, 5 * S * Micros::from(precision), precision);
            let admitted = timeline::run(&l, &events, false);
            prop_assert!(timeline::max_in_span(&admitted, l.window()) <= n);
        }

        #[test]
        fn a_hit_is_forgotten_within_window_plus_one_sub_window(
            n in 1u64..8, events in timeline::events(30, 2 * S),
        ) {
            let l = limit(n, 10 * S, 5);
            let (state, last) = timeline::final_state(&l, &events, true);
            let later = last + l.window() + l.window() / 5;
            let o = evaluate(&l, match &state { Some(AnyState::SlidingWindow(s)) => Some(s), _ => None }, later, Ask::take(n));
            prop_assert!(o.allowed);
        }
    }

    #[test]
    fn charge_always_debt_is_bounded() {
        let l = limit(1, 2 * S, 2);
        let mut s: Option<State> = None;
        for k in 0..1000 {
            let o = evaluate(&l, s.as_ref(), k, Ask::take(u64::from(u32::MAX)));
            s = Some(st(&o).clone());
        }
        assert!(s.unwrap().counts.iter().sum::<u64>() <= COUNT_CAP);
    }
}
