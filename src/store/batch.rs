//! The charging policy of one request, shared by every store (and mirrored by the Lua
//! scripts): decide all checks first, then charge.
//!
//! 1. Every check is evaluated in request order against the state left by the checks before it
//!    (so the same key twice in one request counts twice).
//! 2. A descriptor (a `group` of checks) is allowed when all its checks are. The request is
//!    admitted unless a descriptor not in quota mode is rejected, or every quota-mode
//!    descriptor is (envoyproxy/ratelimit's quota mode): [`admitted`], the one copy of this
//!    rule in Rust, also used by the limiter's overall code and the Redis Cluster path.
//! 3. If every check was allowed, every state is charged. Otherwise, starting again from the
//!    stored states, a check is charged only if the request is admitted and its descriptor is
//!    allowed, or its policy is [`Charge::Always`], or it is a refund. Checks not charged report
//!    their verdict without consuming anything (an allowed one shows its unchanged remaining).

use crate::algorithm::{self, Ask, Outcome, State};
use crate::model::Micros;

use super::Check;

/// When a check consumes quota: a word of the rule vocabulary.
pub use crate::rules::policy::Charge;

/// The store's answer for one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// See [`Outcome::remaining`]; for an allowed check that was not charged, the remaining
    /// allowance without this request.
    pub remaining: u64,
    /// See [`Outcome::reset`].
    pub reset: Micros,
    /// Whether the check's ask was applied to the stored state.
    pub charged: bool,
    /// Answered by the local over-limit cache ([`super::local_cache`]) without the backend.
    pub cached: bool,
}

/// Read and write access to stored states, for [`decide`]. `i` is the index of the check
/// whose `key` it is, for a table that prepared its lookups per check (the memory store
/// hashes each key once per request).
pub trait StateTable {
    fn get(&self, i: usize, key: &[u8]) -> Option<&State>;
    /// Stores a charged state. `open`: one more single hit would pass after it (the
    /// outcome's `remaining`), which saves a table that ranks its entries by that from
    /// evaluating the state again.
    fn put(&mut self, i: usize, key: &[u8], state: State, expires_at: Micros, open: bool);
}

/// How one descriptor came out, for [`admitted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The descriptor is in quota mode.
    pub quota: bool,
    /// Every check of the descriptor allowed it.
    pub allowed: bool,
}

/// The admission rule (envoyproxy/ratelimit's, quota mode included), the only copy in Rust
/// (`batch.lua` has the script's): a request is admitted unless a descriptor not in quota
/// mode is rejected, or there are quota-mode descriptors and every one of them is.
pub fn admitted(groups: impl IntoIterator<Item = Group>) -> bool {
    let (mut quota, mut quota_rejected) = (0usize, 0usize);
    for g in groups {
        match (g.quota, g.allowed) {
            (false, false) => return false,
            (true, allowed) => {
                quota += 1;
                quota_rejected += usize::from(!allowed);
            }
            (false, true) => {}
        }
    }
    quota == 0 || quota_rejected < quota
}

/// Whether a request whose checks came out as `allowed` is admitted, and which descriptors
/// (groups) are allowed (a refund never rejects its descriptor).
pub fn admission(checks: &[Check<'_>], allowed: impl Fn(usize) -> bool) -> (bool, Vec<bool>) {
    let groups = checks
        .iter()
        .map(|c| c.group as usize + 1)
        .max()
        .unwrap_or(0);
    let mut group_ok = vec![true; groups];
    let mut is_quota = vec![false; groups];
    let mut present = vec![false; groups];
    for (i, c) in checks.iter().enumerate() {
        let g = c.group as usize;
        present[g] = true;
        is_quota[g] |= c.quota;
        if !allowed(i) && !c.ask.refund {
            group_ok[g] = false;
        }
    }
    let admitted = admitted((0..groups).filter(|&g| present[g]).map(|g| Group {
        quota: is_quota[g],
        allowed: group_ok[g],
    }));
    (admitted, group_ok)
}

/// Runs the policy above over `table`.
pub fn decide<T: StateTable>(table: &mut T, checks: &[Check<'_>], now: Micros) -> Vec<Verdict> {
    let forced = |c: &Check<'_>| c.charge == Charge::Always || c.ask.refund;
    // Optimistic pass: assume every allowed (or forced) check is charged.
    let first = evaluate_in_order(table, checks, now, |c, o| o.allowed || forced(c));
    if first.iter().all(|o| o.allowed) {
        let mut verdicts = Vec::with_capacity(checks.len());
        for (i, (check, o)) in checks.iter().zip(first).enumerate() {
            let effect = takes_effect(check.ask);
            verdicts.push(verdict(&o, effect));
            if effect {
                let open = open(&o);
                table.put(i, check.key, o.charged, o.expires_at, open);
            }
        }
        return verdicts;
    }

    let (admitted, group_ok) = admission(checks, |i| first[i].allowed);
    let charged = |c: &Check<'_>| (admitted && group_ok[c.group as usize]) || forced(c);
    let second = evaluate_in_order(table, checks, now, |c, _| charged(c));
    let mut verdicts = Vec::with_capacity(checks.len());
    for (i, ((check, before), after)) in checks.iter().zip(&first).zip(second).enumerate() {
        if charged(check) {
            let effect = takes_effect(check.ask);
            verdicts.push(verdict(&after, effect));
            if effect {
                let open = open(&after);
                table.put(i, check.key, after.charged, after.expires_at, open);
            }
        } else if before.allowed {
            // Allowed on its own but not charged: report the allowance without this request.
            let state = table.get(i, check.key).cloned();
            let peek = algorithm::evaluate(
                check.limit,
                state.as_ref(),
                check.limit.frame(now),
                Ask {
                    hits: 0,
                    ..check.ask
                },
            );
            verdicts.push(Verdict {
                allowed: true,
                remaining: peek.remaining,
                reset: peek.reset,
                charged: false,
                cached: false,
            });
        } else {
            verdicts.push(verdict(before, false));
        }
    }
    verdicts
}

/// One more single hit would pass after `o` is charged.
fn open(o: &Outcome) -> bool {
    o.allowed && o.remaining > 0
}

/// A check of zero hits, or a dry run, changes no state (it only looks).
fn takes_effect(ask: Ask) -> bool {
    ask.hits > 0 && !ask.dry_run
}

fn verdict(o: &Outcome, charged: bool) -> Verdict {
    Verdict {
        allowed: o.allowed,
        remaining: o.remaining,
        // A rejected request that is charged anyway must also wait out its own debt.
        reset: if charged { o.debt_reset } else { o.reset },
        charged,
        cached: false,
    }
}

/// Evaluates each check in order; a check for which `applies` holds leaves its charged state
/// for the checks after it.
fn evaluate_in_order<T: StateTable>(
    table: &T,
    checks: &[Check<'_>],
    now: Micros,
    applies: impl Fn(&Check<'_>, &Outcome) -> bool,
) -> Vec<Outcome> {
    // Requests carry a handful of descriptors: a linear overlay beats a map here.
    let mut overlay: Vec<(&[u8], State)> = Vec::with_capacity(checks.len());
    let mut out = Vec::with_capacity(checks.len());
    for (i, check) in checks.iter().enumerate() {
        let state = overlay
            .iter()
            .rev()
            .find(|(k, _)| *k == check.key)
            .map(|(_, s)| s)
            .or_else(|| table.get(i, check.key));
        let o = algorithm::evaluate(check.limit, state, check.limit.frame(now), check.ask);
        if takes_effect(check.ask) && applies(check, &o) {
            overlay.push((check.key, o.charged.clone()));
        }
        out.push(o);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::timeline::{events, Event, START};
    use crate::algorithm::{Algorithm, Limit};
    use crate::store::MapTable;

    const S: Micros = 1_000_000;

    fn check<'a>(
        key: &'a [u8],
        limit: &'a Limit,
        hits: u64,
        charge: Charge,
        group: u32,
    ) -> Check<'a> {
        Check {
            charge,
            group,
            ..Check::new(key, limit, Ask::take(hits))
        }
    }

    #[test]
    fn rejected_request_charges_nothing_but_always_rules() {
        let small = Limit::fixed_window(1, 60_000_000).unwrap();
        let big = Limit::fixed_window(100, 60_000_000).unwrap();
        let mut t = MapTable::default();
        let checks = [
            check(b"a", &small, 1, Charge::IfAdmitted, 0),
            check(b"b", &big, 1, Charge::IfAdmitted, 1),
            check(b"c", &big, 1, Charge::Always, 2),
        ];
        let v = decide(&mut t, &checks, 0);
        assert!(v.iter().all(|v| v.allowed && v.charged));
        let v = decide(&mut t, &checks, 1);
        assert_eq!(
            v.iter().map(|v| (v.allowed, v.charged)).collect::<Vec<_>>(),
            [(false, false), (true, false), (true, true)]
        );
        assert_eq!(v[1].remaining, 99, "b shows its unchanged remaining");
        assert_eq!(v[2].remaining, 98);
    }

    #[test]
    fn same_key_twice_counts_twice() {
        let l = Limit::fixed_window(3, 60_000_000).unwrap();
        let mut t = MapTable::default();
        let checks = [
            check(b"k", &l, 2, Charge::IfAdmitted, 0),
            check(b"k", &l, 2, Charge::IfAdmitted, 1),
        ];
        let v = decide(&mut t, &checks, 0);
        assert!(v[0].allowed && !v[1].allowed);
        assert!(t.0.is_empty(), "nothing charged");
    }

    #[test]
    fn the_admission_rule() {
        let g = |quota, allowed| Group { quota, allowed };
        assert!(admitted([]));
        assert!(admitted([g(false, true), g(true, false), g(true, true)]));
        assert!(!admitted([g(false, false), g(true, true)]));
        assert!(!admitted([g(true, false), g(true, false)]));
        assert!(!admitted([g(false, true), g(true, false)]));
    }

    #[test]
    fn quota_mode_admits_while_one_quota_descriptor_passes() {
        let zero = Limit::fixed_window(0, 60_000_000).unwrap();
        let some = Limit::fixed_window(5, 60_000_000).unwrap();
        let mut t = MapTable::default();
        let mut checks = [
            check(b"q1", &zero, 1, Charge::IfAdmitted, 0),
            check(b"q2", &some, 1, Charge::IfAdmitted, 1),
        ];
        checks.iter_mut().for_each(|c| c.quota = true);
        let v = decide(&mut t, &checks, 0);
        assert_eq!(
            v.iter().map(|v| (v.allowed, v.charged)).collect::<Vec<_>>(),
            [(false, false), (true, true)]
        );
        assert_eq!(v[1].remaining, 4);
    }

    fn bucket(algorithm: Algorithm, requests: u64, window: Micros, burst: u64) -> Limit {
        let l = Limit::new(algorithm, requests, window).unwrap();
        l.with_burst(burst).unwrap()
    }

    /// Through the charging policy (default: charge only when admitted), a rejected request
    /// leaves the stored state exactly as it was.
    fn check_rejections_are_free(limit: &Limit, events: &[Event]) {
        let mut table = MapTable::default();
        let mut now = START;
        for (i, e) in events.iter().enumerate() {
            now += e.advance;
            let before = table.0.get(&b"k"[..]).cloned();
            let check = Check {
                // distinct: a handful of values that come back (others ignore it).
                ask: Ask {
                    value: i as u64 % 7,
                    ..Ask::take(e.hits)
                },
                ..check(b"k", limit, e.hits, Charge::IfAdmitted, 0)
            };
            let v = decide(&mut table, &[check], now);
            if !v[0].allowed {
                assert_eq!(table.0.get(&b"k"[..]), before.as_ref(), "at {now}");
                assert!(!v[0].charged);
            }
        }
    }

    proptest! {
        #[test]
        fn fixed_window_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&Limit::fixed_window(2, 3 * S).unwrap(), &events);
        }

        #[test]
        fn leaky_bucket_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&bucket(Algorithm::LeakyBucket, 3, S, 2), &events);
        }

        #[test]
        fn token_bucket_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&bucket(Algorithm::TokenBucket, 2, S, 3), &events);
        }

        #[test]
        fn gcra_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&bucket(Algorithm::Gcra, 5, S, 1), &events);
        }

        #[test]
        fn sliding_log_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&Limit::new(Algorithm::SlidingLog, 3, 4 * S).unwrap(), &events);
        }

        #[test]
        fn sliding_window_rejections_are_free(events in events(40, S)) {
            let l = Limit::new(Algorithm::SlidingWindow, 3, 4 * S).unwrap();
            let l = l.with_precision(4).unwrap();
            check_rejections_are_free(&l, &events);
        }

        #[test]
        fn distinct_rejections_are_free(events in events(40, 20 * S)) {
            check_rejections_are_free(&Limit::new(Algorithm::Distinct, 3, 60 * S).unwrap(), &events);
        }

        #[test]
        fn concurrency_rejections_are_free(events in events(40, S)) {
            check_rejections_are_free(&Limit::new(Algorithm::Concurrency, 3, 2 * S).unwrap(), &events);
        }
    }
}
