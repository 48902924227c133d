//! fixed_window: a counter per window aligned to the epoch (or to calendar boundaries, which
//! the caller computes into the [`Window`]).
//!
//! Allowed when `count + hits <= limit`. A rejected request leaves the count alone unless the
//! store charges it anyway (`charge: always`), in which case the count goes past the limit as a
//! debt that lasts until the window ends (saturating at [`COUNT_CAP`]). A refund lowers the
//! count, never below zero.

use super::{Ask, Outcome, Window, COUNT_CAP};
use crate::model::Micros;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub window_start: Micros,
    pub count: u64,
}

pub fn evaluate(limit: u64, prev: Option<&State>, frame: Window, ask: Ask) -> Outcome {
    let len = frame.window_end - frame.window_start;
    // A state from a later window means another instance's clock runs ahead of ours: keep
    // counting in that window rather than granting a fresh one (clock skew must not add quota).
    let (start, count) = match prev {
        Some(s) if s.window_start >= frame.window_start => (s.window_start, s.count),
        _ => (frame.window_start, 0),
    };
    let end = if start == frame.window_start {
        frame.window_end
    } else {
        start.saturating_add(len)
    };
    let until_end = (end - frame.now).max(0);

    if ask.refund {
        let count = count.saturating_sub(ask.hits);
        return Outcome {
            allowed: true,
            remaining: limit.saturating_sub(count),
            reset: until_end,
            debt_reset: until_end,
            charged: super::State::FixedWindow(State {
                window_start: start,
                count,
            }),
            expires_at: end,
        };
    }

    let after = count.saturating_add(ask.hits).min(COUNT_CAP.max(count));
    let allowed = count.checked_add(ask.hits).is_some_and(|a| a <= limit);
    Outcome {
        allowed,
        remaining: if allowed { limit - after } else { 0 },
        // Rejected or not, the count starts again from zero when the window ends.
        reset: until_end,
        debt_reset: until_end,
        charged: super::State::FixedWindow(State {
            window_start: start,
            count: after,
        }),
        expires_at: end,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ask, Window};
    use super::*;

    const S: Micros = 1_000_000;

    fn frame(now: Micros) -> Window {
        Window::epoch_aligned(now, 60 * S)
    }

    fn count_of(o: &Outcome) -> u64 {
        match &o.charged {
            super::super::State::FixedWindow(s) => s.count,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn table() {
        // (limit, previous count in the current window, hits, allowed, remaining)
        let cases: &[(u64, Option<u64>, u64, bool, u64)] = &[
            (10, None, 1, true, 9),
            (10, Some(9), 1, true, 0),
            (10, Some(10), 1, false, 0),
            (10, Some(10), 0, true, 0),
            (10, Some(11), 0, false, 0),
            (10, None, 11, false, 0),
            (10, None, 10, true, 0),
            (0, None, 1, false, 0),
            (0, None, 0, true, 0),
            (u64::MAX, Some(u64::MAX - 1), 5, false, 0),
            (u64::from(u32::MAX), Some(0), u64::from(u32::MAX), true, 0),
        ];
        for &(limit, prev, hits, allowed, remaining) in cases {
            let f = frame(100 * S + 5);
            let st = prev.map(|count| State {
                window_start: f.window_start,
                count,
            });
            let o = evaluate(limit, st.as_ref(), f, Ask::take(hits));
            assert_eq!(
                (o.allowed, o.remaining),
                (allowed, remaining),
                "limit {limit} prev {prev:?} hits {hits}"
            );
            assert_eq!(o.reset, f.window_end - f.now);
        }
    }

    #[test]
    fn window_boundary_resets_count() {
        let old = State {
            window_start: 60 * S,
            count: 10,
        };
        let o = evaluate(10, Some(&old), frame(120 * S), Ask::take(1));
        assert!(o.allowed);
        assert_eq!(o.remaining, 9);
        assert_eq!(o.reset, 60 * S);
    }

    #[test]
    fn clock_going_backwards_grants_nothing() {
        let ahead = State {
            window_start: 120 * S,
            count: 10,
        };
        let o = evaluate(10, Some(&ahead), frame(119 * S), Ask::take(1));
        assert!(!o.allowed);
        assert_eq!(o.reset, 61 * S);
    }

    #[test]
    fn refund_never_below_zero() {
        let f = frame(0);
        let st = State {
            window_start: 0,
            count: 2,
        };
        let o = evaluate(10, Some(&st), f, Ask::refund(5));
        assert!(o.allowed);
        assert_eq!(count_of(&o), 0);
        assert_eq!(o.remaining, 10);
    }

    #[test]
    fn rejected_charge_is_debt() {
        let f = frame(0);
        let st = State {
            window_start: 0,
            count: 10,
        };
        let o = evaluate(10, Some(&st), f, Ask::take(3));
        assert!(!o.allowed);
        assert_eq!(count_of(&o), 13);
    }
}
