//! The per-request policy: descriptors -> matched rules -> store checks -> response.
//!
//! Owns the parts of envoyproxy/ratelimit's semantics that do not depend on the store:
//! matching, `replaces`, unlimited rules, limit overrides, shadow mode (per rule and global),
//! quota mode, several limits per descriptor (`rate_limits`), refund permission, response
//! headers and metadata. The store decides and charges atomically.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::algorithm::{distinct, Algorithm, Ask, Calendar, Limit};
use crate::clock::Clock;
use crate::model::{Descriptor, Micros, Request, Unit, MICROS_PER_MILLI, MICROS_PER_SEC};
use crate::rules::{Match, Rule, RuleKind, RuleLimit, RuleSet, Step};
use crate::store::{key, Charge, Check, Store, StoreError, Verdict};

/// Names of the `RateLimit-*` response headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// Server-wide policy switches.
#[derive(Clone, Debug, Default)]
pub struct LimiterOptions {
    /// Turn an OVER_LIMIT overall code into OK (per-descriptor codes are left alone).
    pub shadow_mode: bool,
    /// Put every limited descriptor in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`).
    pub quota_mode: bool,
    /// Charge rejected requests unless a rule says otherwise (envoyproxy/ratelimit's way).
    pub charge_rejected: bool,
    /// Add `RateLimit-*` headers from the tightest descriptor.
    pub response_headers: Option<HeaderNames>,
    /// Prefix of every storage key (`--key-prefix`).
    pub key_prefix: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{0}")]
    InvalidArgument(String),
    /// The request asks for something its domain does not allow (refunds).
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// Empty when the rule has no name.
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    pub remaining: u32,
    pub duration_until_reset: Option<Micros>,
}

impl Status {
    fn no_limit() -> Self {
        Status {
            code: Code::Ok,
            current_limit: None,
            remaining: 0,
            duration_until_reset: None,
        }
    }
    fn unlimited() -> Self {
        Status {
            remaining: u32::MAX,
            ..Status::no_limit()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub overall: Code,
    pub statuses: Vec<Status>,
    pub headers: Vec<(String, String)>,
    /// Merged `metadata` of the rules of descriptors within their limits.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What one descriptor resolved to.
enum Resolved<'r> {
    NoLimit,
    Unlimited(&'r Arc<Rule>),
    Limited {
        rule: Option<&'r Arc<Rule>>,
        steps: Vec<Step<'r>>,
        /// Every one must allow the request (one unless `rate_limits`).
        limits: Vec<RuleLimit>,
        /// The limits come from `rate_limits`: their names are part of their storage keys.
        named: bool,
    },
}

impl Resolved<'_> {
    fn rule(&self) -> Option<&Arc<Rule>> {
        match self {
            Resolved::NoLimit => None,
            Resolved::Unlimited(r) => Some(r),
            Resolved::Limited { rule, .. } => *rule,
        }
    }
}

pub struct Limiter<S> {
    rules: ArcSwapOption<RuleSet>,
    store: S,
    clock: Arc<dyn Clock>,
    opts: LimiterOptions,
}

impl<S: Store> Limiter<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>, opts: LimiterOptions) -> Self {
        Limiter {
            rules: ArcSwapOption::empty(),
            store,
            clock,
            opts,
        }
    }

    /// Publishes a new rule set in one atomic swap; requests in flight finish on the old one.
    pub fn set_rules(&self, rules: Arc<RuleSet>) {
        self.rules.store(Some(rules));
    }

    pub fn rules(&self) -> Option<Arc<RuleSet>> {
        self.rules.load_full()
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub async fn should_rate_limit(&self, req: &Request) -> Result<Response, LimitError> {
        let rules = self
            .rules
            .load_full()
            .ok_or_else(|| LimitError::Unavailable("no rate limit configuration loaded".into()))?;
        let Some(domain) = rules.domain(&req.domain) else {
            return Ok(Response {
                overall: Code::Ok,
                statuses: req.descriptors.iter().map(|_| Status::no_limit()).collect(),
                headers: Vec::new(),
                metadata: None,
            });
        };

        if !domain.allow_refunds {
            if let Some(i) = req.descriptors.iter().position(|d| d.refund) {
                return Err(LimitError::PermissionDenied(format!(
                    "descriptor {i}: is_negative_hits refunds are not allowed for domain '{}' (set `allow_refunds: true` in its config to accept them)",
                    req.domain
                )));
            }
        }

        if !domain.allow_overrides {
            if let Some(i) = req
                .descriptors
                .iter()
                .position(|d| d.limit_override.is_some())
            {
                return Err(LimitError::PermissionDenied(format!(
                    "descriptor {i}: limit overrides are not allowed for domain '{}' (its config sets `allow_overrides: false`)",
                    req.domain
                )));
            }
        }

        let mut resolved: Vec<Resolved<'_>> = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| resolve(domain.find(&d.entries), d, i))
            .collect::<Result<_, _>>()?;
        apply_replaces(&mut resolved);

        // Build the storage keys first, then borrow them into the checks.
        let default_charge = if self.opts.charge_rejected {
            Charge::Always
        } else {
            Charge::IfAdmitted
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        // (descriptor, limit, quota mode, distinct value hash), grouped by descriptor.
        let mut specs: Vec<(usize, &RuleLimit, bool, u64)> = Vec::new();
        for (i, (r, d)) in resolved.iter().zip(&req.descriptors).enumerate() {
            let Resolved::Limited {
                rule,
                steps,
                limits,
                named,
            } = r
            else {
                continue;
            };
            let last = d.entries.len().saturating_sub(1);
            for limit in limits {
                // distinct counts the values of the last entry: its value stays out of the key.
                let distinct = limit.limit.algorithm == Algorithm::Distinct;
                let mut k = Vec::with_capacity(64);
                let parts = d
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(j, e)| match steps.get(j) {
                        _ if distinct && j == last => key::Part::Counted { key: &e.key },
                        Some(Step::Wildcard {
                            pattern,
                            shared: true,
                        }) => key::Part::Shared {
                            key: &e.key,
                            pattern,
                        },
                        _ => key::Part::Value {
                            key: &e.key,
                            value: &e.value,
                        },
                    });
                let name = if *named { limit.name.as_deref() } else { None };
                key::build(
                    &mut k,
                    &self.opts.key_prefix,
                    &req.domain,
                    parts,
                    &limit.limit,
                    name,
                );
                keys.push(k);
                let value = match d.entries.get(last) {
                    Some(e) if distinct => distinct::hash(&e.value),
                    _ => 0,
                };
                specs.push((i, limit, self.is_quota(rule.map(|r| &**r)), value));
            }
        }
        let checks: Vec<Check<'_>> = specs
            .iter()
            .zip(&keys)
            .map(|(&(i, limit, quota, value), k)| {
                let d = &req.descriptors[i];
                Check {
                    key: k,
                    limit: &limit.limit,
                    ask: Ask {
                        hits: d.hits,
                        refund: d.refund,
                        value,
                    },
                    charge: limit.charge.unwrap_or(default_charge),
                    group: i as u32,
                    quota,
                }
            })
            .collect();
        let verdicts = if checks.is_empty() {
            Vec::new()
        } else {
            self.store.decide(&checks, self.clock.now()).await?
        };

        let mut statuses: Vec<Status> = resolved
            .iter()
            .map(|r| match r {
                Resolved::NoLimit => Status::no_limit(),
                Resolved::Unlimited(_) => Status::unlimited(),
                Resolved::Limited { .. } => Status::no_limit(),
            })
            .collect();
        let mut from = 0;
        while from < specs.len() {
            let i = specs[from].0;
            let to = from + specs[from..].iter().take_while(|s| s.0 == i).count();
            let pick = from + reported(&verdicts[from..to]);
            let limit = specs[pick].1;
            statuses[i] = status_of(&verdicts[pick], limit, limit.name.clone());
            if resolved[i].rule().is_some_and(|r| r.shadow_mode) {
                statuses[i].code = Code::Ok;
            }
            from = to;
        }

        // Only limited descriptors take part in quota mode (as in the store's admission).
        let quota = |i: usize| {
            matches!(resolved[i], Resolved::Limited { .. })
                && self.is_quota(resolved[i].rule().map(|r| &**r))
        };
        let mut overall = overall_code(&statuses, &resolved, quota);
        let headers = match &self.opts.response_headers {
            Some(names) => headers(names, &statuses, quota),
            None => Vec::new(),
        };
        let metadata = merged_metadata(&resolved, &statuses);
        if self.opts.shadow_mode {
            overall = Code::Ok;
        }
        Ok(Response {
            overall,
            statuses,
            headers,
            metadata,
        })
    }
}

impl<S> Limiter<S> {
    /// Global quota mode applies to override limits too (they have no rule), as upstream.
    fn is_quota(&self, rule: Option<&Rule>) -> bool {
        self.opts.quota_mode || rule.is_some_and(|r| r.quota_mode)
    }
}

fn resolve<'r>(
    m: Option<Match<'r>>,
    d: &Descriptor,
    index: usize,
) -> Result<Resolved<'r>, LimitError> {
    if let Some(o) = d.limit_override {
        // envoyproxy/ratelimit: an override applies whether or not a rule matched, with no
        // name, no shadow mode and nothing to replace. It keeps the matched rule's algorithm
        // (with `rate_limits`, the first limit's), precision, calendar alignment and charging;
        // the burst becomes the new requests_per_unit.
        let base = m.as_ref().and_then(|m| m.rule.kind.limits().first());
        let rpu = u64::from(o.requests_per_unit);
        let window = o.unit.micros();
        let limit = match base {
            Some(b) => Limit {
                requests: rpu,
                window,
                burst: rpu,
                calendar: b
                    .limit
                    .calendar
                    .filter(|_| o.unit >= Unit::Hour)
                    .map(|c| Calendar { unit: o.unit, ..c }),
                ..b.limit.clone()
            },
            None => Limit::fixed_window(rpu, window),
        };
        if let Err(e) = limit.validate() {
            return Err(LimitError::InvalidArgument(format!(
                "descriptor {index}: the limit override of {} per {} cannot be used with algorithm {}: {e}",
                o.requests_per_unit,
                o.unit,
                limit.algorithm.as_str()
            )));
        }
        return Ok(Resolved::Limited {
            rule: None,
            limits: vec![RuleLimit {
                name: None,
                requests_per_unit: o.requests_per_unit,
                unit: o.unit,
                limit,
                charge: base.and_then(|b| b.charge),
            }],
            steps: m.map(|m| m.steps).unwrap_or_default(),
            named: false,
        });
    }
    Ok(match m {
        None => Resolved::NoLimit,
        Some(m) => match &m.rule.kind {
            RuleKind::Unlimited => Resolved::Unlimited(m.rule),
            RuleKind::Limited(limit) => Resolved::Limited {
                rule: Some(m.rule),
                steps: m.steps,
                limits: vec![limit.clone()],
                named: false,
            },
            RuleKind::Several(limits) => Resolved::Limited {
                rule: Some(m.rule),
                steps: m.steps,
                limits: limits.clone(),
                named: true,
            },
        },
    })
}

/// Which of a descriptor's verdicts its status reports: the rejecting limit with the longest
/// retry-after (the first on a tie), or when all allow, the one with the least remaining.
fn reported(verdicts: &[Verdict]) -> usize {
    let mut pick = 0;
    let rejected = verdicts.iter().any(|v| !v.allowed);
    for (j, v) in verdicts.iter().enumerate() {
        let p = &verdicts[pick];
        let better = if rejected {
            !v.allowed && (p.allowed || v.reset > p.reset)
        } else {
            v.remaining < p.remaining
        };
        if better {
            pick = j;
        }
    }
    pick
}

/// A matched limit whose name another matched rule `replaces` is neither reported nor
/// consumed; inside `rate_limits` each limit is replaced on its own, and a descriptor whose
/// limits are all replaced has no limit.
fn apply_replaces(resolved: &mut [Resolved<'_>]) {
    let replaced: Vec<String> = resolved
        .iter()
        .filter_map(|r| r.rule())
        .flat_map(|r| r.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    let is_replaced = |name: Option<&String>| name.is_some_and(|n| replaced.contains(n));
    for r in resolved.iter_mut() {
        let gone = match r {
            Resolved::NoLimit => false,
            Resolved::Unlimited(rule) => is_replaced(rule.name.as_ref()),
            Resolved::Limited { rule: None, .. } => false,
            Resolved::Limited { limits, .. } => {
                limits.retain(|l| !is_replaced(l.name.as_ref()));
                limits.is_empty()
            }
        };
        if gone {
            *r = Resolved::NoLimit;
        }
    }
}

fn status_of(v: &Verdict, limit: &RuleLimit, name: Option<String>) -> Status {
    let current_limit = Some(CurrentLimit {
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit,
        name: name.unwrap_or_default(),
    });
    if v.allowed {
        Status {
            code: Code::Ok,
            current_limit,
            remaining: u32::try_from(v.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(ceil_millis(v.reset)),
        }
    } else {
        Status {
            code: Code::OverLimit,
            current_limit,
            remaining: 0,
            duration_until_reset: Some(ceil_millis(v.reset)),
        }
    }
}

/// Durations are reported in whole milliseconds, rounded up so that a client waiting that
/// long is never early.
fn ceil_millis(us: Micros) -> Micros {
    ceil_div(us.max(0), MICROS_PER_MILLI) * MICROS_PER_MILLI
}

/// `a / b` rounded up, for `a >= 0`, `b > 0`.
fn ceil_div(a: Micros, b: Micros) -> Micros {
    a / b + Micros::from(a % b != 0)
}

/// OVER_LIMIT when a descriptor not in quota mode is over its limit, or when there are
/// quota-mode descriptors and all of them are (envoyproxy/ratelimit's rule).
fn overall_code(
    statuses: &[Status],
    resolved: &[Resolved<'_>],
    quota: impl Fn(usize) -> bool,
) -> Code {
    let mut quota_total = 0;
    let mut quota_over = 0;
    for (i, s) in statuses.iter().enumerate() {
        if matches!(resolved[i], Resolved::Unlimited(_)) {
            continue;
        }
        if quota(i) {
            quota_total += 1;
            if s.code == Code::OverLimit {
                quota_over += 1;
            }
        } else if s.code == Code::OverLimit {
            return Code::OverLimit;
        }
    }
    if quota_total > 0 && quota_over == quota_total {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// `RateLimit-*` headers from the tightest descriptor: the least remaining (first on a tie),
/// overridden by the last over-limit descriptor not in quota mode.
fn headers(
    names: &HeaderNames,
    statuses: &[Status],
    quota: impl Fn(usize) -> bool,
) -> Vec<(String, String)> {
    let mut pick: Option<&Status> = None;
    let mut min = u32::MAX;
    for s in statuses {
        if s.current_limit.is_some() && s.remaining < min {
            min = s.remaining;
            pick = Some(s);
        }
    }
    for (i, s) in statuses.iter().enumerate() {
        if s.code == Code::OverLimit && !quota(i) {
            pick = Some(s);
        }
    }
    let Some(s) = pick else {
        return Vec::new();
    };
    let Some(limit) = &s.current_limit else {
        return Vec::new();
    };
    let reset_secs = ceil_div(s.duration_until_reset.unwrap_or(0).max(0), MICROS_PER_SEC);
    vec![
        (names.limit.clone(), limit.requests_per_unit.to_string()),
        (names.remaining.clone(), s.remaining.to_string()),
        (names.reset.clone(), reset_secs.to_string()),
    ]
}

/// The `metadata` of the rules of descriptors within their limits, merged: earlier
/// descriptors win on conflicts, nested maps merge, lists do not.
fn merged_metadata(
    resolved: &[Resolved<'_>],
    statuses: &[Status],
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    for (r, s) in resolved.iter().zip(statuses) {
        if s.code == Code::OverLimit || matches!(r, Resolved::Unlimited(_)) {
            continue;
        }
        if let Some(serde_json::Value::Object(m)) = r.rule().and_then(|r| r.metadata.as_ref()) {
            merge_into(&mut out, m);
        }
    }
    (!out.is_empty()).then_some(out)
}

fn merge_into(
    dst: &mut serde_json::Map<String, serde_json::Value>,
    src: &serde_json::Map<String, serde_json::Value>,
) {
    for (k, v) in src {
        match (dst.get_mut(k), v) {
            (Some(serde_json::Value::Object(d)), serde_json::Value::Object(s)) => merge_into(d, s),
            (Some(_), _) => {}
            (None, v) => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}
