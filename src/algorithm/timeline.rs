//! Test support: random timelines of requests run through a decision function in simulated
//! time, and the span arithmetic the properties check.

use proptest::prelude::*;

use super::{evaluate, Ask, Limit, State};
use crate::model::Micros;

/// A request after `advance` µs of quiet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    pub(crate) advance: Micros,
    pub(crate) hits: u64,
}

pub(crate) const START: Micros = 1_000_000_000;

/// Up to `len` events, each after 0..=`max_advance` µs (often 0: bursts), of 0..=3 hits.
pub(crate) fn events(len: usize, max_advance: Micros) -> impl Strategy<Value = Vec<Event>> {
    proptest::collection::vec(
        (
            prop_oneof![Just(0), 0..=max_advance / 20, 0..=max_advance],
            prop_oneof![3 => Just(1u64), 1 => 0u64..=3],
        )
            .prop_map(|(advance, hits)| Event { advance, hits }),
        0..len,
    )
}

fn step(limit: &Limit, state: &mut Option<State>, now: Micros, hits: u64, always: bool) -> bool {
    let o = evaluate(limit, state.as_ref(), limit.frame(now), Ask::take(hits));
    if hits > 0 && (o.allowed || always) {
        *state = Some(o.charged);
    }
    o.allowed
}

/// The admitted `(time, hits)` of a timeline (charging rejected requests too if `always`).
pub(crate) fn run(limit: &Limit, events: &[Event], always: bool) -> Vec<(Micros, u64)> {
    let mut state = None;
    let mut now = START;
    let mut admitted = Vec::new();
    for e in events {
        now += e.advance;
        if step(limit, &mut state, now, e.hits, always) && e.hits > 0 {
            admitted.push((now, e.hits));
        }
    }
    admitted
}

/// The state after a timeline, and the time of its last event.
pub(crate) fn final_state(
    limit: &Limit,
    events: &[Event],
    always: bool,
) -> (Option<State>, Micros) {
    let mut state = None;
    let mut now = START;
    for e in events {
        now += e.advance;
        step(limit, &mut state, now, e.hits, always);
    }
    (state, now)
}

/// Every answer of a timeline: (allowed, remaining, reset, debt_reset).
pub(crate) fn outcomes(
    limit: &Limit,
    events: &[Event],
    always: bool,
) -> Vec<(bool, u64, Micros, Micros)> {
    let mut state: Option<State> = None;
    let mut now = START;
    events
        .iter()
        .map(|e| {
            now += e.advance;
            let o = evaluate(limit, state.as_ref(), limit.frame(now), Ask::take(e.hits));
            let out = (o.allowed, o.remaining, o.reset, o.debt_reset);
            if e.hits > 0 && (o.allowed || always) {
                state = Some(o.charged);
            }
            out
        })
        .collect()
}

/// One single-hit request every `step` µs in `[from, to)`.
pub(crate) fn hammer(
    limit: &Limit,
    from: Micros,
    to: Micros,
    step_by: Micros,
) -> Vec<(Micros, u64)> {
    let mut state = None;
    let mut admitted = Vec::new();
    let mut now = from;
    while now < to {
        if step(limit, &mut state, now, 1, false) {
            admitted.push((now, 1));
        }
        now += step_by;
    }
    admitted
}

/// The most hits admitted within any span `(t - span, t]`.
pub(crate) fn max_in_span(admitted: &[(Micros, u64)], span: Micros) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    let mut sum = 0;
    for &(t, h) in admitted {
        sum += h;
        while admitted[lo].0 <= t - span {
            sum -= admitted[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// sliding_log is exact: a request is rejected exactly when the hits already admitted in
/// `(now - window, now]` plus its own exceed the limit.
pub(crate) fn check_log_exactness(limit: &Limit, events: &[Event]) {
    let mut state = None;
    let mut now = START;
    let mut admitted: Vec<(Micros, u64)> = Vec::new();
    for e in events {
        now += e.advance;
        let in_window: u64 = admitted
            .iter()
            .filter(|&&(t, _)| t > now - limit.window())
            .map(|&(_, h)| h)
            .sum();
        let allowed = step(limit, &mut state, now, e.hits, false);
        assert_eq!(allowed, in_window + e.hits <= limit.requests(), "at {now}");
        if allowed && e.hits > 0 {
            admitted.push((now, e.hits));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Param};
    use super::*;

    const S: Micros = 1_000_000;

    /// The seeds' demonstration: 3 per 5 s, one request every 0.5 s from 3.5 s to 5.5 s
    /// around the boundary at 5 s.
    fn demo(algorithm: Algorithm) -> Vec<(Micros, u64)> {
        let mut l = Limit::new(algorithm, 3, 5 * S).unwrap();
        if algorithm.takes(Param::Precision) {
            l = l.with_precision(5).unwrap();
        }
        hammer(&l, 3 * S + S / 2, 6 * S, S / 2)
    }

    #[test]
    fn boundary_burst_fixed_window_lets_5_through_in_2_seconds() {
        let admitted = demo(Algorithm::FixedWindow);
        assert_eq!(admitted.len(), 5);
        assert_eq!(admitted[4].0 - admitted[0].0, 2 * S);
    }

    #[test]
    fn boundary_burst_sliding_algorithms_let_3_through() {
        for a in [Algorithm::SlidingLog, Algorithm::SlidingWindow] {
            assert_eq!(demo(a).len(), 3, "{a:?}");
            assert_eq!(max_in_span(&demo(a), 5 * S), 3);
        }
    }

    #[test]
    fn fixed_window_stays_within_twice_the_limit() {
        let l = Limit::fixed_window(3, 5 * S).unwrap();
        let admitted = hammer(&l, 4 * S + 7 * S / 10, 5 * S + 3 * S / 10, S / 10);
        assert_eq!(max_in_span(&admitted, 5 * S), 6);
    }

    fn any_limit() -> impl Strategy<Value = Limit> {
        (
            proptest::sample::select(Algorithm::ALL.to_vec()),
            0u64..6,
            1i64..8,
            1u64..6,
        )
            .prop_map(|(a, n, w, b)| {
                let l = Limit::new(a, n, w * S).unwrap();
                match a.param() {
                    Some(Param::Precision) => l.with_precision(4).unwrap(),
                    Some(Param::Burst) if n > 0 => l.with_burst(b).unwrap(),
                    _ => l,
                }
            })
    }

    proptest! {
        /// The memory store forgets a state at its `expires_at`: from then on it must decide
        /// exactly as no state would, debt included.
        #[test]
        fn an_expired_state_is_equivalent_to_no_state(
            l in any_limit(), events in events(30, 2 * S), after in 0i64..(20 * S), hits in 0u64..3,
        ) {
            let (state, last) = final_state(&l, &events, true);
            let Some(state) = state else { return Ok(()) };
            let o = evaluate(&l, Some(&state), l.frame(last), Ask::peek());
            let at = o.expires_at.max(last) + after;
            let ask = Ask { value: 7, ..Ask::take(hits) };
            let with = evaluate(&l, Some(&state), l.frame(at), ask);
            let without = evaluate(&l, None, l.frame(at), ask);
            prop_assert_eq!(
                (with.allowed, with.remaining, with.reset, with.expires_at),
                (without.allowed, without.remaining, without.reset, without.expires_at)
            );
        }

        /// A clock behind the state (skew between instances) never grants more than the
        /// state's own time would.
        #[test]
        fn a_clock_behind_grants_nothing_extra(
            l in any_limit(), events in events(30, 2 * S), back in 0i64..(30 * S), hits in 0u64..3,
        ) {
            let (state, last) = final_state(&l, &events, true);
            let ask = Ask::take(hits);
            let behind = evaluate(&l, state.as_ref(), l.frame(last - back), ask);
            let on_time = evaluate(&l, state.as_ref(), l.frame(last), ask);
            prop_assert!(!behind.allowed || on_time.allowed);
            prop_assert!(behind.remaining <= on_time.remaining);
        }

        /// Hits of 0 look without changing anything.
        #[test]
        fn a_look_changes_nothing(l in any_limit(), events in events(30, 2 * S), gap in 0i64..S) {
            let (state, last) = final_state(&l, &events, true);
            let at = last + gap;
            let o = evaluate(&l, state.as_ref(), l.frame(at), Ask::peek());
            let again = evaluate(&l, Some(&o.charged), l.frame(at), Ask::take(1));
            let direct = evaluate(&l, state.as_ref(), l.frame(at), Ask::take(1));
            prop_assert_eq!((again.allowed, again.remaining, again.reset), (direct.allowed, direct.remaining, direct.reset));
        }

        #[test]
        fn fixed_window_never_more_than_twice_the_limit(
            n in 1u64..8, events in events(80, 3 * S),
        ) {
            let l = Limit::fixed_window(n, 5 * S).unwrap();
            let admitted = run(&l, &events, false);
            prop_assert!(max_in_span(&admitted, l.window()) <= 2 * n);
        }
    }
}
