//! sliding_log: exact. A log of hit timestamps (one entry per hit, oldest first); allowed when
//! the entries in `(now - window, now]` plus this request's hits stay within the limit.
//!
//! Memory per key is at most `limit` entries ([`super::MAX_LOG`] caps the limit): admitted hits
//! never exceed it, and debt (`charge: always`) logs the rejected hits as well but keeps only
//! the newest `limit` entries, so a client that keeps hammering stays locked out until a whole
//! window after it stops. A refund drops the newest entries. Entries stamped later than `now`
//! (another instance's clock runs ahead) count until they are a window old.

use super::{Ask, Limit, Outcome};
use crate::model::Micros;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Hit timestamps, ascending.
    pub log: Vec<Micros>,
}

pub(crate) fn evaluate(limit: &Limit, prev: Option<&State>, now: Micros, ask: Ask) -> Outcome {
    let window = limit.window();
    let n = limit.requests();
    let mut log: Vec<Micros> = match prev {
        Some(s) => {
            let keep_from = s.log.partition_point(|&t| t <= now - window);
            s.log[keep_from..].to_vec()
        }
        None => Vec::new(),
    };
    let until_empty = |log: &[Micros]| log.last().map_or(0, |&t| (t + window - now).max(0));
    // Time until `hits` more fit: the oldest `len + hits - n` entries must have left.
    let retry = |log: &[Micros], hits: u64| {
        let len = log.len() as u64;
        if hits > n {
            return until_empty(log);
        }
        match (len + hits).checked_sub(n) {
            None | Some(0) => 0,
            Some(m) => (log[(m - 1) as usize] + window - now).max(0),
        }
    };

    if ask.refund {
        let keep = log
            .len()
            .saturating_sub(usize::try_from(ask.hits).unwrap_or(usize::MAX));
        log.truncate(keep);
        let reset = until_empty(&log);
        return Outcome {
            allowed: true,
            remaining: n.saturating_sub(log.len() as u64),
            reset,
            debt_reset: reset,
            expires_at: now + reset,
            charged: super::State::SlidingLog(State { log }),
        };
    }

    let len = log.len() as u64;
    let allowed = ask.hits <= n && len + ask.hits <= n;
    let uncharged_retry = if allowed { 0 } else { retry(&log, ask.hits) };
    // Charge: insert `hits` entries at `now`, keeping only the newest `n` (debt included).
    let add = ask.hits.min(n) as usize;
    let at = log.partition_point(|&t| t <= now);
    log.splice(at..at, std::iter::repeat_n(now, add));
    let excess = log.len().saturating_sub(n as usize);
    log.drain(..excess);
    let until = until_empty(&log);
    Outcome {
        allowed,
        remaining: if allowed { n - log.len() as u64 } else { 0 },
        reset: if allowed { until } else { uncharged_retry },
        debt_reset: if allowed {
            until
        } else {
            retry(&log, ask.hits)
        },
        expires_at: now + until,
        charged: super::State::SlidingLog(State { log }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline;
    use super::super::{Algorithm, State as AnyState, MAX_LOG, MAX_WINDOW};
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn limit(n: u64, window: Micros) -> Limit {
        Limit::new(Algorithm::SlidingLog, n, window).unwrap()
    }

    fn log_of(o: &Outcome) -> &[Micros] {
        match &o.charged {
            AnyState::SlidingLog(s) => &s.log,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn table() {
        let l = limit(3, 10 * S);
        // (previous log, now, hits, allowed, remaining, reset)
        type Case = (&'static [Micros], Micros, u64, bool, u64, Micros);
        let cases: &[Case] = &[
            (&[], 100 * S, 1, true, 2, 10 * S),
            (&[], 100 * S, 0, true, 3, 0),
            (&[], 100 * S, 3, true, 0, 10 * S),
            (&[], 100 * S, 4, false, 0, 0),
            (&[91 * S, 95 * S], 100 * S, 1, true, 0, 10 * S),
            // Full: one more fits when the oldest (91 s) leaves at 101 s, two at 105 s.
            (&[91 * S, 95 * S, 99 * S], 100 * S, 1, false, 0, S),
            (&[91 * S, 95 * S, 99 * S], 100 * S, 2, false, 0, 5 * S),
            (&[91 * S, 95 * S, 99 * S], 100 * S, 0, true, 0, 9 * S),
            // Exactly a window old: gone.
            (&[90 * S, 95 * S, 99 * S], 100 * S, 1, true, 0, 10 * S),
            // Long idle.
            (&[91 * S, 95 * S, 99 * S], 10_000 * S, 3, true, 0, 10 * S),
            // Clock behind the log: the future entries still count.
            (&[91 * S, 95 * S, 99 * S], 90 * S, 1, false, 0, 11 * S),
        ];
        for (i, &(prev, now, hits, allowed, remaining, reset)) in cases.iter().enumerate() {
            let st = State { log: prev.to_vec() };
            let o = evaluate(&l, Some(&st), now, Ask::take(hits));
            assert_eq!(
                (o.allowed, o.remaining, o.reset),
                (allowed, remaining, reset),
                "case {i}"
            );
            assert!(log_of(&o).len() as u64 <= l.requests());
        }
    }

    #[test]
    fn debt_keeps_the_newest_entries_and_refund_drops_the_newest() {
        let l = limit(3, 10 * S);
        let st = State {
            log: vec![91 * S, 95 * S, 99 * S],
        };
        let o = evaluate(&l, Some(&st), 100 * S, Ask::take(2));
        assert!(!o.allowed);
        assert_eq!(log_of(&o), [99 * S, 100 * S, 100 * S]);
        assert_eq!(
            o.debt_reset,
            10 * S,
            "two more fit once 99 s and a 100 s entry left"
        );
        let r = evaluate(&l, Some(&st), 100 * S, Ask::refund(2));
        assert_eq!(log_of(&r), [91 * S]);
        assert_eq!(r.remaining, 2);
        let r = evaluate(&l, Some(&st), 100 * S, Ask::refund(u64::MAX));
        assert!(log_of(&r).is_empty());
        assert_eq!(r.expires_at, 100 * S);
    }

    #[test]
    fn huge_windows_and_hits_do_not_overflow() {
        let l = limit(MAX_LOG, MAX_WINDOW);
        let o = evaluate(&l, None, 4_000_000_000 * S, Ask::take(u64::MAX));
        assert!(!o.allowed);
        assert_eq!(log_of(&o).len() as u64, MAX_LOG);
        let o = evaluate(
            &l,
            Some(&State {
                log: log_of(&o).to_vec(),
            }),
            0,
            Ask::take(1),
        );
        assert!(!o.allowed);
    }

    #[test]
    fn boundary_burst_demo() {
        let admitted = timeline::hammer(&limit(3, 5 * S), 3 * S, 7 * S, 100_000);
        assert_eq!(timeline::max_in_span(&admitted, 5 * S), 3);
    }

    proptest! {
        #[test]
        fn exactly_the_limit_in_any_window(
            n in 1u64..10, events in timeline::events(80, 3 * S),
        ) {
            let l = limit(n, 7 * S);
            let admitted = timeline::run(&l, &events, false);
            prop_assert!(timeline::max_in_span(&admitted, l.window()) <= n);
            // And exact: a request is rejected only when the window really is full.
            timeline::check_log_exactness(&l, &events);
        }
    }
}
