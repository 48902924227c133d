//! The charging policy of one request, shared by every store (and mirrored by the Lua
//! scripts): decide all checks first, then charge.
//!
//! 1. Every check is evaluated in request order against the state left by the checks before it
//!    (so the same key twice in one request counts twice).
//! 2. A descriptor (a `group` of checks) is allowed when all its checks are. The request is
//!    admitted unless a descriptor not in quota mode is rejected, or every quota-mode
//!    descriptor is (envoyproxy/ratelimit's quota mode).
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

/// Read and write access to stored states, for [`decide`].
pub trait StateTable {
    fn get(&self, key: &[u8]) -> Option<&State>;
    fn put(&mut self, key: &[u8], state: State, expires_at: Micros);
}

/// Whether a request whose checks came out as `outcomes` is admitted, and which descriptors
/// (groups) are allowed.
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
    let mut quota_groups = 0;
    let mut quota_rejected = 0;
    let mut admitted = true;
    for g in 0..groups {
        if !present[g] {
            continue;
        }
        if is_quota[g] {
            quota_groups += 1;
            if !group_ok[g] {
                quota_rejected += 1;
            }
        } else if !group_ok[g] {
            admitted = false;
        }
    }
    if quota_groups > 0 && quota_rejected == quota_groups {
        admitted = false;
    }
    (admitted, group_ok)
}

/// Runs the policy above over `table`.
pub fn decide<T: StateTable>(table: &mut T, checks: &[Check<'_>], now: Micros) -> Vec<Verdict> {
    let forced = |c: &Check<'_>| c.charge == Charge::Always || c.ask.refund;
    // Optimistic pass: assume every allowed (or forced) check is charged.
    let first = evaluate_in_order(table, checks, now, |c, o| o.allowed || forced(c));
    if first.iter().all(|o| o.allowed) {
        for (check, o) in checks.iter().zip(&first) {
            if takes_effect(check.ask) {
                table.put(check.key, o.charged.clone(), o.expires_at);
            }
        }
        return first
            .iter()
            .zip(checks)
            .map(|(o, c)| verdict(o, takes_effect(c.ask)))
            .collect();
    }

    let (admitted, group_ok) = admission(checks, |i| first[i].allowed);
    let charged = |c: &Check<'_>| (admitted && group_ok[c.group as usize]) || forced(c);
    let second = evaluate_in_order(table, checks, now, |c, _| charged(c));
    let mut verdicts = Vec::with_capacity(checks.len());
    for ((check, before), after) in checks.iter().zip(&first).zip(&second) {
        if charged(check) {
            if takes_effect(check.ask) {
                table.put(check.key, after.charged.clone(), after.expires_at);
            }
            verdicts.push(verdict(after, takes_effect(check.ask)));
        } else if before.allowed {
            // Allowed on its own but not charged: report the allowance without this request.
            let state = table.get(check.key).cloned();
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

/// A check of zero hits changes no state (it only looks).
fn takes_effect(ask: Ask) -> bool {
    ask.hits > 0
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
    let mut overlay: Vec<(&[u8], State)> = Vec::new();
    let mut out = Vec::with_capacity(checks.len());
    for check in checks {
        let state = overlay
            .iter()
            .rev()
            .find(|(k, _)| *k == check.key)
            .map(|(_, s)| s)
            .or_else(|| table.get(check.key));
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
    use super::*;
    use crate::algorithm::Limit;
    use crate::store::MapTable;

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
        let small = Limit::fixed_window(1, 60_000_000);
        let big = Limit::fixed_window(100, 60_000_000);
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
        let l = Limit::fixed_window(3, 60_000_000);
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
    fn quota_mode_admits_while_one_quota_descriptor_passes() {
        let zero = Limit::fixed_window(0, 60_000_000);
        let some = Limit::fixed_window(5, 60_000_000);
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
}
