//! distinct: at most `limit` distinct values of the descriptor's last entry per window, per
//! parent entries (e.g. at most 5 distinct IPs per user per hour). A value already seen in the
//! window is always allowed; windows are fixed (epoch or calendar), as for fixed_window.
//!
//! Values are identified by a 64-bit SipHash-2-4 ([`hash`], fixed key) computed by the caller,
//! so stores keep 8 bytes per value and never the value itself. Up to [`EXACT_MAX`] the state is
//! an exact set of hashes (a different value is mistaken for a seen one only on a 64-bit hash
//! collision). Above it, a HyperLogLog of 2^14 one-byte registers (16 KiB, about 0.8%
//! standard error) keeps memory constant. A HyperLogLog cannot answer "seen before?" without
//! adding, so there the rule is: every request passes while the estimated count is below the
//! limit (values are added; the one that brings the estimate to the limit may overshoot it by
//! one register step); from then on every request is refused until the window ends, values
//! seen earlier included. What is approximated is the count (the estimate), and with it the
//! moment the window closes; nothing passes after it closes.
//!
//! `hits` only says whether to look (0) or to add the value (any other number, once). A refund
//! cannot forget a value (a HyperLogLog cannot remove one): it is accepted and changes nothing.
//! There is no debt either: `charge: always` does not add a rejected value, since adding it
//! would let it through as "seen" next time.

use super::{Ask, Limit, Outcome, Window};
use crate::model::Micros;

/// Limits up to this many distinct values keep an exact set; larger ones a HyperLogLog.
pub const EXACT_MAX: u64 = 1_000;
/// HyperLogLog register index bits (2^14 registers, as Redis's PFADD).
pub const HLL_BITS: u32 = 14;
const REGISTERS: usize = 1 << HLL_BITS;
/// SipHash key ("sluice-distinct!"): fixed, so every instance and store hashes alike.
const KEY: (u64, u64) = (0x736c_7569_6365_2d64, 0x6973_7469_6e63_7421);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub window_start: Micros,
    pub values: Values,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    /// Sorted, distinct hashes.
    Exact(Vec<u64>),
    /// 2^14 registers: the highest rank seen per register.
    Hll(Box<[u8]>),
}

/// The 64-bit identity of a value.
pub fn hash(value: &[u8]) -> u64 {
    use std::hash::Hasher;
    // std's SipHasher is SipHash-2-4 exactly (deprecated only in favour of the unspecified
    // DefaultHasher, whose output may change between Rust versions).
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(KEY.0, KEY.1);
    h.write(value);
    h.finish()
}

impl Values {
    fn empty(approximate: bool) -> Values {
        if approximate {
            Values::Hll(vec![0; REGISTERS].into_boxed_slice())
        } else {
            Values::Exact(Vec::new())
        }
    }

    fn count(&self) -> u64 {
        match self {
            Values::Exact(v) => v.len() as u64,
            Values::Hll(r) => estimate(r),
        }
    }

    /// Whether the value is already counted (for a HyperLogLog: adding it changes nothing).
    fn contains(&self, h: u64) -> bool {
        match self {
            Values::Exact(v) => v.binary_search(&h).is_ok(),
            Values::Hll(r) => {
                let (i, rank) = register(h);
                r[i] >= rank
            }
        }
    }

    fn insert(&mut self, h: u64) {
        match self {
            Values::Exact(v) => {
                if let Err(at) = v.binary_search(&h) {
                    v.insert(at, h);
                }
            }
            Values::Hll(r) => {
                let (i, rank) = register(h);
                r[i] = r[i].max(rank);
            }
        }
    }
}

/// The register of a hash (its top 14 bits) and its rank: 1 + the leading zeros of the other
/// 50 bits (51 when they are all zero).
fn register(h: u64) -> (usize, u8) {
    let rest = h << HLL_BITS;
    let rank = if rest == 0 {
        64 - HLL_BITS + 1
    } else {
        rest.leading_zeros() + 1
    };
    ((h >> (64 - HLL_BITS)) as usize, rank as u8)
}

/// The HyperLogLog estimate (Flajolet et al.), with linear counting while it is at most 2.5 m
/// and some register is still zero. The only floating-point step of any algorithm. The sum of
/// `2^-register` is taken by rank (how many registers hold 0, 1, ... 51, each count times its
/// exact power of two, in rank order), so a port in IEEE doubles gets the same value and can
/// keep the 52 counts instead of summing all 2^14 registers on every request.
fn estimate(r: &[u8]) -> u64 {
    let mut ranks = [0u32; MAX_RANK + 1];
    for &v in r {
        ranks[usize::from(v).min(MAX_RANK)] += 1;
    }
    estimate_by_rank(r.len(), &ranks)
}

/// The highest register value: 1 + the 50 bits below the index all zero.
const MAX_RANK: usize = (64 - HLL_BITS + 1) as usize;

fn estimate_by_rank(m: usize, ranks: &[u32; MAX_RANK + 1]) -> u64 {
    let m = m as f64;
    let mut sum = 0.0f64;
    for (k, &n) in ranks.iter().enumerate() {
        sum += f64::from(n) * 2f64.powi(-(k as i32));
    }
    let zeros = ranks[0];
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let raw = alpha * m * m / sum;
    let e = if raw <= 2.5 * m && zeros > 0 {
        m * (m / f64::from(zeros)).ln()
    } else {
        raw
    };
    e.round() as u64
}

pub fn evaluate(limit: &Limit, prev: Option<&State>, frame: Window, ask: Ask) -> Outcome {
    let approximate = limit.is_approximate();
    let len = frame.window_end - frame.window_start;
    // A state from a later window (another instance's clock runs ahead) keeps counting there.
    let (start, values) = match prev {
        Some(s)
            if s.window_start >= frame.window_start
                && matches!(s.values, Values::Hll(_)) == approximate =>
        {
            (s.window_start, s.values.clone())
        }
        _ => (frame.window_start, Values::empty(approximate)),
    };
    let end = if start == frame.window_start {
        frame.window_end
    } else {
        start.saturating_add(len)
    };
    let until_end = (end - frame.now).max(0);
    let before = values.count();
    let seen = values.contains(ask.value);

    let (allowed, values) = if ask.refund {
        (true, values)
    } else if approximate {
        match (before < limit.requests(), ask.hits > 0 && !seen) {
            (false, _) => (false, values),
            (true, true) => {
                let mut added = values;
                added.insert(ask.value);
                (true, added)
            }
            (true, false) => (true, values),
        }
    } else if seen {
        (true, values)
    } else {
        let mut added = values.clone();
        added.insert(ask.value);
        let ok = added.count() <= limit.requests();
        match (ok, ask.hits > 0) {
            (true, true) => (true, added),
            (ok, _) => (ok, values),
        }
    };
    let after = values.count();
    let remaining = if !allowed {
        0
    } else if ask.hits == 0 || ask.refund {
        limit.requests().saturating_sub(before)
    } else {
        limit.requests().saturating_sub(after)
    };
    Outcome {
        allowed,
        remaining,
        reset: until_end,
        debt_reset: until_end,
        charged: super::State::Distinct(State {
            window_start: start,
            values,
        }),
        expires_at: end,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, State as AnyState};
    use super::*;

    const S: Micros = 1_000_000;

    fn ask(v: &str, hits: u64) -> Ask {
        Ask {
            value: hash(v.as_bytes()),
            ..Ask::take(hits)
        }
    }

    fn state(o: &Outcome) -> State {
        match &o.charged {
            AnyState::Distinct(s) => s.clone(),
            other => panic!("unexpected state {other:?}"),
        }
    }

    #[test]
    fn siphash_2_4_reference_vector() {
        // From the SipHash paper: key 00..0f, message 00..0e.
        use std::hash::Hasher;
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(0x0706050403020100, 0x0f0e0d0c0b0a0908);
        h.write(&(0u8..15).collect::<Vec<_>>());
        assert_eq!(h.finish(), 0xa129ca6149be45e5);
        assert_ne!(hash(b"a"), hash(b"b"));
    }

    #[test]
    fn at_most_n_new_values_per_window_seen_ones_always_pass() {
        let l = Limit::new(Algorithm::Distinct, 3, 3_600 * S).unwrap();
        let f = l.frame(7_200 * S + 5);
        let mut st: Option<State> = None;
        let mut run = |v: &str, hits: u64, f: Window| {
            let o = evaluate(&l, st.as_ref(), f, ask(v, hits));
            if o.allowed && hits > 0 {
                st = Some(state(&o));
            }
            (o.allowed, o.remaining)
        };
        assert_eq!(run("a", 1, f), (true, 2));
        assert_eq!(run("a", 5, f), (true, 2), "seen: allowed, counted once");
        assert_eq!(run("b", 1, f), (true, 1));
        assert_eq!(run("c", 0, f), (true, 1), "a look adds nothing");
        assert_eq!(run("c", 1, f), (true, 0));
        assert_eq!(run("d", 1, f), (false, 0));
        assert_eq!(run("d", 0, f), (false, 0));
        assert_eq!(run("b", 1, f), (true, 0));
        // The next window starts empty.
        let next = l.frame(f.window_end);
        assert_eq!(run("d", 1, next), (true, 2));
    }

    #[test]
    fn refunds_and_forced_charges_change_nothing() {
        let l = Limit::new(Algorithm::Distinct, 1, 60 * S).unwrap();
        let f = l.frame(0);
        let o = evaluate(&l, None, f, ask("a", 1));
        let st = state(&o);
        let r = evaluate(&l, Some(&st), f, Ask::refund(1));
        assert!(r.allowed);
        assert_eq!(state(&r), st);
        let o = evaluate(&l, Some(&st), f, ask("b", 1));
        assert!(!o.allowed);
        assert_eq!(state(&o), st, "no debt: the rejected value is not added");
        assert_eq!((o.reset, o.expires_at), (60 * S, 60 * S));
    }

    #[test]
    fn clock_behind_keeps_the_later_window() {
        let l = Limit::new(Algorithm::Distinct, 1, 60 * S).unwrap();
        let o = evaluate(&l, None, l.frame(120 * S), ask("a", 1));
        let o = evaluate(&l, Some(&state(&o)), l.frame(100 * S), ask("b", 1));
        assert!(!o.allowed);
        assert_eq!(o.reset, 80 * S);
    }

    #[test]
    fn large_limits_use_a_hyperloglog_within_about_one_percent() {
        let l = Limit::new(Algorithm::Distinct, 20_000, 60 * S).unwrap();
        assert!(l.is_approximate());
        let f = l.frame(0);
        let mut st: Option<State> = None;
        let mut admitted = 0u64;
        for i in 0..30_000u32 {
            let o = evaluate(
                &l,
                st.as_ref(),
                f,
                ask(&format!("10.0.{}.{}", i / 256, i % 256), 1),
            );
            if o.allowed {
                admitted += 1;
                st = Some(state(&o));
            }
        }
        let err = (admitted as f64 - 20_000.0).abs() / 20_000.0;
        assert!(err < 0.02, "admitted {admitted}");
        // Closed: even a value admitted earlier is refused (the sketch cannot recognise it).
        let o = evaluate(&l, st.as_ref(), f, ask("10.0.0.1", 1));
        assert!(!o.allowed);
        assert_eq!(o.remaining, 0);
        match &state(&o).values {
            Values::Hll(r) => assert_eq!(r.len(), 16_384),
            Values::Exact(_) => panic!("expected a HyperLogLog"),
        }
    }

    #[test]
    fn estimate_tracks_large_cardinalities() {
        let mut v = Values::empty(true);
        for i in 0..200_000u32 {
            v.insert(hash(&i.to_le_bytes()));
        }
        let err = (v.count() as f64 - 200_000.0).abs() / 200_000.0;
        assert!(err < 0.02, "estimate {}", v.count());
        assert_eq!(Values::empty(true).count(), 0);
    }
}
