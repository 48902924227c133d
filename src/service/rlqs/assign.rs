//! One bucket of one stream: what it matched, what it was granted, and the store calls that
//! turn a report into an [`Assignment`] (the order of `limiter::share`'s module doc).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;

use super::bucket::Assignment;
use crate::limiter::plan::Plan;
use crate::limiter::resolve::Resolved;
use crate::limiter::share::{self, Demands, Ledger};
use crate::limiter::{LimitError, Limiter};
use crate::model::{Micros, Request};
use crate::rules::RuleSet;
use crate::store::{Charge, Check, Deadline, Store, Verdict};

/// What a bucket matched, to tell on a reload whether its assignment must change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Matched {
    /// No rule, or a rule whose limits another replaced.
    Nothing,
    Unlimited,
    Limited {
        /// A hash of the limits and their storage keys: a bucket keeps only what tells a
        /// change (the limits and keys themselves were about 200 bytes a bucket). Two
        /// different sets hash alike once in 2^64 reloads; the old grant then stands until its
        /// window ends.
        fingerprint: u64,
        shadow: bool,
    },
}

/// One bucket of a stream (its id is the stream's map key; its request is built from that id
/// when it is assessed: `bucket::request_of`).
pub(crate) struct BucketState {
    pub ledger: Ledger,
    /// Allowed + denied in the last report.
    pub demand: u64,
    /// What it matched when last assessed (`None`: never yet).
    pub matched: Option<Matched>,
    /// The storage key its demand is recorded under.
    pub share_key: Option<Vec<u8>>,
    /// The last assignment sent.
    pub sent: Option<Assignment>,
    /// The bytes counted for it ([`budget`](super::budget)).
    pub bytes: usize,
    /// What the store said remained at its last answer for this bucket: a report with
    /// nothing to charge is recorded with it, and a renewal sizes its share from it.
    pub seen: u64,
}

impl BucketState {
    pub(crate) fn new() -> Self {
        BucketState {
            ledger: Ledger::default(),
            demand: 0,
            matched: None,
            share_key: None,
            sent: None,
            bytes: 0,
            seen: 0,
        }
    }
}

/// What an assessment needs besides the bucket.
pub(crate) struct Context<'a, S> {
    pub limiter: &'a Limiter<S>,
    pub rules: &'a RuleSet,
    pub demands: &'a Mutex<Demands>,
    pub stream: u64,
    /// How long another stream's demand counts (the assignment TTL).
    pub demand_ttl: Micros,
    pub now: Micros,
}

/// Why a bucket is assessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A report: `allowed` and `denied` since the last one.
    Report { allowed: u64, denied: u64 },
    /// A window ended or the rules changed: renew if due.
    Renewal,
}

/// Assesses `b`, the bucket of `request`: charges what the report admitted beyond its grant, records demand and
/// statistics, and decides its assignment (a new grant only when [`Ledger::renew`] says so).
/// `Ok(None)`: the bucket no longer matches a rule it matched before (abandon it).
pub(crate) async fn assess<S: Store>(
    cx: &Context<'_, S>,
    request: &Request,
    b: &mut BucketState,
    cause: Cause,
) -> Result<Option<Assignment>, LimitError> {
    let (allowed, denied) = match cause {
        Cause::Report { allowed, denied } => (allowed, denied),
        Cause::Renewal => (0, 0),
    };
    if let Cause::Report { .. } = cause {
        b.demand = allowed.saturating_add(denied);
    }
    // A report has no deadline of its own; the bucket is one size-checked descriptor.
    let plan = cx.limiter.plan(cx.rules, request, Deadline::NONE)?;
    let matched = matched(&plan, cx.limiter.options().shadow_mode);
    let before = b.matched.replace(matched);
    if before.as_ref().is_some_and(|m| *m != matched) {
        if matched == Matched::Nothing {
            return Ok(None);
        }
        // A changed rule: whatever was granted under the old one no longer says anything.
        b.ledger.outstanding = 0;
        b.ledger.ends = None;
        // What remained under the old limits says nothing: a renewal reads the store.
        b.seen = 0;
    }
    let Matched::Limited { shadow, .. } = matched else {
        return Ok(Some(Assignment::AllowAll));
    };
    let checks = plan.checks();
    let share_key: &[u8] = checks.first().map_or(&[], |c| c.key);
    if let Cause::Report { .. } = cause {
        let mut d = cx.demands.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = b.share_key.as_ref().filter(|k| k[..] != *share_key) {
            d.remove(old, cx.stream);
        }
        d.set(share_key, cx.stream, b.demand, cx.now);
    }
    // Copied only when it changed (a renewal every window end would copy it each time).
    if b.share_key.as_deref() != Some(share_key) {
        b.share_key = Some(share_key.to_vec());
    }

    // What Envoy admitted beyond its grant is consumed: charged, never refused. With nothing
    // to charge the store is not read here: the grant was charged when given, and a renewal's
    // reservation tells what remained ([`reserve`]); distinct decides each assessment anew.
    let excess = b.ledger.settle(allowed);
    let distinct = checks.iter().any(|c| c.limit.algorithm().counts_values());
    let renew = b.ledger.renew(cx.now);
    let read = if excess > 0 || distinct {
        let r = remaining_of(&decide(cx, &checks, excess, Charge::Always).await?);
        b.seen = r;
        Some(r)
    } else {
        None
    };
    // A renewal (nothing reported) records nothing: skip looking its counters up.
    if allowed > 0 || denied > 0 {
        cx.limiter
            .record_reported(&plan, allowed, denied, read.unwrap_or(b.seen));
    }

    let ends = window_end(&checks, cx.now);
    if shadow {
        return Ok(Some(Assignment::AllowAll));
    }
    if distinct {
        // Distinct counts values, not requests: the bucket's value is in the set or not.
        let v = decide(cx, &checks, 1, Charge::IfAdmitted).await?;
        b.ledger.grant(0, ends);
        return Ok(Some(if v.iter().all(|v| v.allowed) {
            Assignment::AllowAll
        } else {
            Assignment::DenyAll
        }));
    }
    if !renew {
        return Ok(b.sent);
    }
    let others = cx.demands.lock().unwrap_or_else(|e| e.into_inner()).others(
        share_key,
        cx.stream,
        cx.now,
        cx.demand_ttl,
    );
    let tokens = reserve(cx, &checks, b, read, others).await?;
    b.ledger.grant(tokens, ends);
    Ok(Some(if tokens == 0 {
        Assignment::DenyAll
    } else {
        Assignment::Tokens {
            tokens,
            generation: b.ledger.generation,
        }
    }))
}

/// Reserves `b`'s share of what remains and returns its tokens (0: none left for it).
/// `read`: what remains as read in this assessment; `None` sizes the share from a guess (the
/// whole limit in a window that has begun since the last grant, else what remained then), so
/// a renewal costs the store one call: when the reservation is admitted, what remained before
/// it is known (its remaining plus the reservation), and tokens reserved beyond the share of
/// that are given back. Another stream or replica may take some between a read and the
/// reservation: a refused reservation reads again once, and a second refusal denies.
async fn reserve<S: Store>(
    cx: &Context<'_, S>,
    checks: &[Check<'_>],
    b: &mut BucketState,
    read: Option<u64>,
    others: u64,
) -> Result<u64, LimitError> {
    let (mut base, mut fresh) = match read {
        Some(r) => (r, true),
        None => (guess(checks, b, cx.now), false),
    };
    let mut tries = 0;
    loop {
        let want = share::share(base, b.demand, others);
        if want > 0 {
            tries += 1;
            let v = decide(cx, checks, want, Charge::IfAdmitted).await?;
            if v.iter().all(|v| v.allowed) {
                let after = remaining_of(&v);
                b.seen = after;
                let fair = share::share(after.saturating_add(want), b.demand, others);
                if fresh || fair >= want {
                    return Ok(want);
                }
                // The guess was above what remained. Given back so the grant is the share of
                // what remained; if the refund fails, its tokens stay charged and are not
                // granted (never more granted than charged), freed when the window ends.
                let surplus = want - fair;
                if refund(cx, checks, surplus).await.is_ok() {
                    b.seen = after.saturating_add(surplus);
                }
                return Ok(fair);
            }
            if tries == 2 {
                return Ok(0);
            }
        } else if fresh {
            return Ok(0);
        }
        base = remaining_of(&decide(cx, checks, 0, Charge::IfAdmitted).await?);
        b.seen = base;
        fresh = true;
    }
}

/// What probably remains for `b` at `now` without asking the store: the whole of the
/// smallest limit once the window of its last grant has ended (a new window), else what
/// remained after the store's last answer.
fn guess(checks: &[Check<'_>], b: &BucketState, now: Micros) -> u64 {
    if b.ledger.ends.is_some_and(|end| now >= end) {
        checks.iter().map(|c| c.limit.requests()).min().unwrap_or(0)
    } else {
        b.seen
    }
}

/// The plan's one descriptor, as far as assignments go.
pub(super) fn matched(plan: &Plan<'_>, global_shadow: bool) -> Matched {
    match &plan.resolved[0] {
        Resolved::NoLimit | Resolved::Replaced(_) => Matched::Nothing,
        Resolved::Unlimited(_) => Matched::Unlimited,
        Resolved::Limited { rule, limits, .. } => {
            // Fixed keys: the same limits hash alike in every stream and after every reload
            // (foldhash's fixed state: a bucket is fingerprinted on every assessment, and
            // SipHash was a few percent of its cost; a collision only delays a new grant).
            let mut h = foldhash::fast::FixedState::default().build_hasher();
            for l in limits.iter() {
                l.limit.hash(&mut h);
            }
            for p in &plan.planned {
                plan.key(p).hash(&mut h);
            }
            Matched::Limited {
                fingerprint: h.finish(),
                shadow: global_shadow || rule.is_some_and(|r| r.shadow_mode),
            }
        }
    }
}

/// The store decides `checks` with `hits` each under `charge` (0 hits: a look).
async fn decide<S: Store>(
    cx: &Context<'_, S>,
    checks: &[Check<'_>],
    hits: u64,
    charge: Charge,
) -> Result<Vec<Verdict>, LimitError> {
    ask(cx, checks, hits, false, charge).await
}

/// Gives `hits` back to every limit of `checks` (a surplus reservation).
async fn refund<S: Store>(
    cx: &Context<'_, S>,
    checks: &[Check<'_>],
    hits: u64,
) -> Result<Vec<Verdict>, LimitError> {
    ask(cx, checks, hits, true, Charge::Always).await
}

/// `checks` asking `hits` each (given back if `refund`) under `charge`.
async fn ask<S: Store>(
    cx: &Context<'_, S>,
    checks: &[Check<'_>],
    hits: u64,
    refund: bool,
    charge: Charge,
) -> Result<Vec<Verdict>, LimitError> {
    let checks: Vec<Check<'_>> = checks
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.ask.hits = hits;
            c.ask.refund = refund;
            c.charge = charge;
            c
        })
        .collect();
    Ok(cx
        .limiter
        .store()
        .decide(&checks, cx.now, Deadline::NONE)
        .await?)
}

/// What every limit still allows (0 when one is over).
fn remaining_of(verdicts: &[Verdict]) -> u64 {
    verdicts
        .iter()
        .map(|v| if v.allowed { v.remaining } else { 0 })
        .min()
        .unwrap_or(0)
}

/// The end of the earliest window among windowed limits (their grants are void after it);
/// `None` when no limit has windows.
fn window_end(checks: &[Check<'_>], now: Micros) -> Option<Micros> {
    checks
        .iter()
        .filter(|c| c.limit.algorithm().has_windows())
        .map(|c| c.limit.frame(now).window_end)
        .min()
}
