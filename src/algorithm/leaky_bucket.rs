//! leaky_bucket: a meter (the seeds' "funnel"). The level rises by `hits`, drains continuously
//! at `requests_per_unit` per window, and a request that would overflow the capacity `burst`
//! (default `requests_per_unit`) is rejected; empty when first seen.
//!
//! Seen from the other side this is token_bucket (level = capacity - tokens), so both make the
//! same decisions and report the same numbers; the test below proves it over random timelines.
//! Pick the one whose words fit how you think about the limit. The arithmetic is the shared
//! [`bucket`] meter.

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
    use super::super::timeline;
    use super::super::{Algorithm, State as AnyState};
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn limit(requests: u64, window: Micros, burst: u64) -> Limit {
        Limit::new(Algorithm::LeakyBucket, requests, window)
            .and_then(|l| l.with_burst(burst))
            .unwrap()
    }

    fn level(o: &Outcome) -> u64 {
        match &o.charged {
            AnyState::Bucket(s) => s.level,
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn the_funnel_fills_drains_and_overflows() {
        // 2 per second, capacity 4: one hit weighs 500 000 ticks, 1 tick drains per µs.
        let l = limit(2, S, 4);
        let o = evaluate(&l, None, 0, Ask::take(3));
        assert!(o.allowed);
        assert_eq!(level(&o), 1_500_000, "empty when first seen, then 3 hits");
        assert_eq!((o.remaining, o.reset), (1, 3 * S / 2));
        let st = bucket::State {
            at: 0,
            level: level(&o),
        };
        // 2 more would overflow now; after 0.5 s one has drained.
        let o = evaluate(&l, Some(&st), 0, Ask::take(2));
        assert!(!o.allowed);
        assert_eq!(o.reset, S / 2);
        let o = evaluate(&l, Some(&st), S / 2, Ask::take(2));
        assert!(o.allowed);
        assert_eq!(level(&o), 2_000_000);
        // Idle for a long time: empty, never below.
        let o = evaluate(&l, Some(&st), 1_000_000 * S, Ask::take(0));
        assert_eq!(
            (level(&o), o.remaining, o.expires_at),
            (0, 4, 1_000_000 * S)
        );
    }

    proptest! {
        #[test]
        fn same_decisions_as_token_bucket_and_gcra(
            (r, w, b) in (1u64..50, 1i64..20, 1u64..20), events in timeline::events(60, 2 * S),
            always in any::<bool>(),
        ) {
            let leaky = limit(r, w * S / 4, b);
            let same = |a| Limit::new(a, r, w * S / 4).and_then(|l| l.with_burst(b)).unwrap();
            let (token, gcra) = (same(Algorithm::TokenBucket), same(Algorithm::Gcra));
            let a = timeline::outcomes(&leaky, &events, always);
            prop_assert_eq!(&a, &timeline::outcomes(&token, &events, always));
            prop_assert_eq!(&a, &timeline::outcomes(&gcra, &events, always));
        }
    }
}
