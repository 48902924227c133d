//! concurrency: at most `max_in_flight` requests in flight. A request takes `hits` leases, all
//! or none; a refund (Envoy's `is_negative_hits` at stream end) gives leases back. Each lease
//! also expires by itself a lease time after it was taken, so a release that never comes (a
//! crashed client, a lost stream-end call) cannot leak capacity for longer than that.
//!
//! Leases are anonymous, so a release gives back the oldest ones (those nearest to expiring
//! by themselves): the leases left are the newest, the safe side when a release was lost.
//!
//! The state is the live leases grouped by expiry. Expiries are rounded up to a slot of
//! `lease_time / LEASE_SLOTS` (a lease lasts between the lease time and 0.1% longer), so at
//! most `LEASE_SLOTS + 1` groups are live at once whatever `max_in_flight` is (with clocks
//! that agree; a clock ahead adds its own expiries): the work of a decision and the state's
//! size do not grow with the limit. There is no debt (`charge: always` takes no lease for a
//! rejected request: it is not in flight).

use super::{ceil_div, Ask, Limit, Outcome};
use crate::model::Micros;

/// A lease time is cut into this many expiry slots: the most groups of leases a state holds.
pub(crate) const LEASE_SLOTS: u64 = 1_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// `(expiry, leases)`: expiries ascending and distinct, each group at least one lease.
    pub leases: Vec<(Micros, u64)>,
}

/// The expiry of a lease taken at `now`: `now + lease_time` rounded up to a whole slot of
/// `ceil(lease_time / LEASE_SLOTS)` µs.
pub(crate) fn expiry(now: Micros, lease_time: Micros) -> Micros {
    let slot = ceil_div(lease_time.max(1) as u64, LEASE_SLOTS) as Micros;
    let e = now + lease_time;
    match e.rem_euclid(slot) {
        0 => e,
        r => e + slot - r,
    }
}

pub(crate) fn evaluate(limit: &Limit, prev: Option<&State>, now: Micros, ask: Ask) -> Outcome {
    let n = limit.requests();
    let mut leases: Vec<(Micros, u64)> = match prev {
        Some(s) => {
            let live_from = s.leases.partition_point(|&(e, _)| e <= now);
            s.leases[live_from..].to_vec()
        }
        None => Vec::new(),
    };
    let held = |l: &[(Micros, u64)]| l.iter().fold(0u64, |a, &(_, c)| a.saturating_add(c));
    let until_empty = |l: &[(Micros, u64)]| l.last().map_or(0, |&(e, _)| (e - now).max(0));

    if ask.refund {
        // Give back the oldest leases first.
        let mut left = ask.hits;
        let mut gone = 0;
        for g in leases.iter_mut() {
            if g.1 > left {
                g.1 -= left;
                break;
            }
            left -= g.1;
            gone += 1;
        }
        leases.drain(..gone);
        let reset = until_empty(&leases);
        return Outcome {
            allowed: true,
            remaining: n.saturating_sub(held(&leases)),
            reset,
            debt_reset: reset,
            expires_at: now + reset,
            charged: super::State::Concurrency(State { leases }),
        };
    }

    let in_flight = held(&leases);
    let allowed = ask.hits <= n && in_flight.saturating_add(ask.hits) <= n;
    let reset = if allowed {
        if ask.hits > 0 {
            take(&mut leases, expiry(now, limit.window()), ask.hits);
        }
        until_empty(&leases)
    } else if ask.hits > n {
        // Never fits: the time until every lease has expired.
        until_empty(&leases)
    } else {
        // The oldest `in_flight + hits - n` leases must expire first.
        let must_go = in_flight + ask.hits - n;
        let mut seen = 0u64;
        let at = leases
            .iter()
            .find(|&&(_, c)| {
                seen = seen.saturating_add(c);
                seen >= must_go
            })
            .map_or(now, |&(e, _)| e);
        (at - now).max(0)
    };
    let remaining = if allowed {
        n.saturating_sub(held(&leases))
    } else {
        0
    };
    let expires_at = now + until_empty(&leases);
    Outcome {
        allowed,
        remaining,
        reset,
        debt_reset: reset,
        expires_at,
        charged: super::State::Concurrency(State { leases }),
    }
}

/// Adds `hits` leases expiring at `at`, keeping the groups sorted and distinct.
fn take(leases: &mut Vec<(Micros, u64)>, at: Micros, hits: u64) {
    let i = leases.partition_point(|&(e, _)| e < at);
    match leases.get_mut(i) {
        Some(g) if g.0 == at => g.1 = g.1.saturating_add(hits),
        _ => leases.insert(i, (at, hits)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, State as AnyState, MAX_WINDOW};
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn limit(n: u64, lease: Micros) -> Limit {
        Limit::new(Algorithm::Concurrency, n, lease).unwrap()
    }

    fn leases_of(o: &Outcome) -> Vec<(Micros, u64)> {
        match &o.charged {
            AnyState::Concurrency(s) => s.leases.clone(),
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn expiries_round_up_to_a_slot() {
        // 60 s leases: slots of 60 ms.
        assert_eq!(expiry(0, 60 * S), 60 * S);
        assert_eq!(expiry(1, 60 * S), 60 * S + 60_000);
        assert_eq!(expiry(59_999, 60 * S), 60 * S + 60_000);
        // Short leases: slots of 1 µs, exact.
        assert_eq!(expiry(7, 999), 1_006);
        // Before the epoch too.
        assert_eq!(expiry(-60 * S - 1, 60 * S), 0);
    }

    #[test]
    fn table() {
        let l = limit(3, 10 * S);
        let now = 100 * S;
        // (held leases, hits, allowed, remaining, reset)
        type Case = (&'static [(Micros, u64)], u64, bool, u64, Micros);
        let cases: &[Case] = &[
            (&[], 1, true, 2, 10 * S),
            (&[], 0, true, 3, 0),
            (&[], 3, true, 0, 10 * S),
            (&[], 4, false, 0, 0),
            (&[(101 * S, 1), (105 * S, 1)], 1, true, 0, 10 * S),
            // Full: one fits when the oldest lease expires at 101 s, two at 105 s.
            (&[(101 * S, 1), (105 * S, 2)], 1, false, 0, S),
            (&[(101 * S, 1), (105 * S, 2)], 2, false, 0, 5 * S),
            (&[(101 * S, 1), (105 * S, 2)], 0, true, 0, 5 * S),
            // An expiry of exactly now is gone.
            (&[(100 * S, 1), (105 * S, 2)], 1, true, 0, 10 * S),
            // A lease from a clock ahead still counts.
            (&[(200 * S, 3)], 1, false, 0, 100 * S),
        ];
        for (i, &(held, hits, allowed, remaining, reset)) in cases.iter().enumerate() {
            let st = State {
                leases: held.to_vec(),
            };
            let o = evaluate(&l, Some(&st), now, Ask::take(hits));
            assert_eq!(
                (o.allowed, o.remaining, o.reset, o.debt_reset),
                (allowed, remaining, reset, reset),
                "case {i}"
            );
            if !allowed {
                assert_eq!(
                    leases_of(&o),
                    st.leases,
                    "case {i}: a rejection takes nothing"
                );
            }
        }
    }

    #[test]
    fn releases_give_back_the_oldest_leases() {
        let l = limit(5, 10 * S);
        let st = State {
            leases: vec![(101 * S, 2), (105 * S, 2)],
        };
        let r = evaluate(&l, Some(&st), 100 * S, Ask::refund(3));
        assert_eq!(leases_of(&r), [(105 * S, 1)]);
        assert_eq!((r.allowed, r.remaining, r.reset), (true, 4, 5 * S));
        let r = evaluate(&l, Some(&st), 100 * S, Ask::refund(u64::MAX));
        assert!(leases_of(&r).is_empty());
        assert_eq!((r.remaining, r.expires_at), (5, 100 * S));
        // A release with nothing held changes nothing.
        let r = evaluate(&l, None, 100 * S, Ask::refund(1));
        assert_eq!((r.remaining, leases_of(&r)), (5, vec![]));
    }

    #[test]
    fn a_lease_never_released_frees_after_the_lease_time() {
        let l = limit(1, 30 * S);
        // 1000.01 s: 30 s later is not on a 30 ms slot; the lease lasts to the next one.
        let t = 1_000 * S + 10_000;
        let end = 1_030 * S + 20_000;
        assert_eq!(expiry(t, l.window()), end);
        let first = evaluate(&l, None, t, Ask::take(1));
        assert_eq!((first.allowed, first.expires_at), (true, end));
        let held = match &first.charged {
            AnyState::Concurrency(s) => s.clone(),
            _ => unreachable!(),
        };
        let st = Some(&held);
        let blocked = evaluate(&l, st, end - 1, Ask::take(1));
        assert_eq!((blocked.allowed, blocked.reset), (false, 1));
        assert!(evaluate(&l, st, end, Ask::take(1)).allowed);
    }

    #[test]
    fn zero_blocks_and_limits_never_overflow() {
        let l = limit(0, 10 * S);
        let o = evaluate(&l, None, 0, Ask::take(1));
        assert!(!o.allowed && leases_of(&o).is_empty());
        assert!(evaluate(&l, None, 0, Ask::peek()).allowed);
        let l = limit(u64::from(u32::MAX), MAX_WINDOW);
        let o = evaluate(&l, None, 4_000_000_000 * S, Ask::take(u64::from(u32::MAX)));
        assert!(o.allowed);
        let o = evaluate(
            &l,
            Some(&State {
                leases: leases_of(&o),
            }),
            4_000_000_000 * S,
            Ask::take(u64::MAX),
        );
        assert!(!o.allowed);
    }

    /// A request that takes a lease (`true`) or the release of the oldest one (`false`),
    /// after some quiet.
    fn steps() -> impl Strategy<Value = Vec<(Micros, bool, u64)>> {
        proptest::collection::vec(
            (
                prop_oneof![Just(0), 0..=S / 10, 0..=4 * S],
                any::<bool>(),
                1u64..3,
            ),
            0..80,
        )
    }

    proptest! {
        /// Against a brute-force list of lease expiries: the same decisions, the same
        /// in-flight count, and never more than the limit held; groups stay bounded.
        #[test]
        fn matches_a_list_of_leases(n in 0u64..6, lease in 1i64..6, steps in steps()) {
            let l = limit(n, lease * S);
            let mut state: Option<State> = None;
            let mut list: Vec<Micros> = Vec::new();
            let mut now = 1_000 * S;
            for (advance, take, hits) in steps {
                now += advance;
                list.retain(|&e| e > now);
                list.sort_unstable();
                let ask = if take { Ask::take(hits) } else { Ask::refund(hits) };
                let o = evaluate(&l, state.as_ref(), now, ask);
                if take {
                    let fits = list.len() as u64 + hits <= n;
                    prop_assert_eq!(o.allowed, fits);
                    if fits {
                        list.extend(std::iter::repeat_n(expiry(now, l.window()), hits as usize));
                    }
                } else {
                    list.drain(..list.len().min(hits as usize));
                }
                let AnyState::Concurrency(s) = o.charged else { unreachable!() };
                let held: u64 = s.leases.iter().map(|g| g.1).sum();
                prop_assert_eq!(held, list.len() as u64);
                prop_assert!(held <= n);
                prop_assert!(s.leases.len() as u64 <= LEASE_SLOTS + 1);
                prop_assert!(s.leases.windows(2).all(|w| w[0].0 < w[1].0));
                state = Some(s);
            }
        }
    }
}
