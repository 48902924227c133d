//! The per-request policy: descriptors -> matched rules -> store checks -> response.
//!
//! Owns the parts of envoyproxy/ratelimit's semantics that do not depend on the store:
//! matching, `replaces`, unlimited rules, limit overrides, shadow mode (per rule and global),
//! quota mode, several limits per descriptor (`rate_limits`), refund permission, response
//! headers and metadata. The store decides and charges atomically.

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use opentelemetry::metrics::Histogram;
use opentelemetry::KeyValue;
use tracing::Instrument;

use crate::algorithm::{distinct, Algorithm, Ask, Calendar, Limit};
use crate::clock::{monotonic, Clock};
use crate::model::{Descriptor, Micros, Request, Unit, MICROS_PER_MILLI, MICROS_PER_SEC};
use crate::rules::{Domain, Match, Rule, RuleKind, RuleLimit, RuleSet, Step};
use crate::stats::{self, Observation, RuleCounters, StatsRegistry};
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

/// How one descriptor was decided, for `POST /json?explain=true` and `sluice check --requests`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Explanation {
    /// `rule` (a configured limit), `unlimited`, `override` (the request's own limit),
    /// `replaced` (another matched rule `replaces` it) or `no_rule`.
    pub matched: &'static str,
    /// The matched rule's key (`domain.key_value.key2`) and where it is defined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The key its statistics are counted under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats_key: Option<String>,
    /// One per limit checked (several with `rate_limits`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitExplanation>,
    /// The descriptor's status code (`OK` or `OVER_LIMIT`).
    pub code: &'static str,
}

/// One limit of a descriptor: its storage key and the state the store reported.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LimitExplanation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The storage key (bytes outside printable UTF-8 escaped).
    pub key: String,
    pub algorithm: &'static str,
    pub requests_per_unit: u32,
    pub unit: &'static str,
    pub window_ms: i64,
    pub hits: u64,
    pub allowed: bool,
    pub remaining: u64,
    pub reset_ms: i64,
    /// Whether this request's hits were counted.
    pub charged: bool,
}

/// Metrics the limiter records (see [`crate::metrics`]).
pub struct LimiterMetrics {
    pub stats: Arc<StatsRegistry>,
    pub store_duration: Histogram<f64>,
    pub store_attrs: [KeyValue; 1],
}

/// One check being built: (descriptor, limit, quota mode, distinct value hash, key range).
type Spec<'r> = (usize, &'r RuleLimit, bool, u64, (usize, usize));

/// What one descriptor resolved to.
enum Resolved<'r> {
    NoLimit,
    Unlimited(&'r Arc<Rule>),
    Limited {
        rule: Option<&'r Arc<Rule>>,
        steps: Vec<Step<'r>>,
        /// [`Match::value_to_metric`].
        value_to_metric: u64,
        /// Every one must allow the request (one unless `rate_limits`). Borrowed from the
        /// rule (no copy per request) unless an override or `replaces` changed them.
        limits: Cow<'r, [RuleLimit]>,
        /// The limits come from `rate_limits`: their names are part of their storage keys.
        named: bool,
    },
}

impl<'r> Resolved<'r> {
    fn rule(&self) -> Option<&'r Arc<Rule>> {
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
    metrics: Option<LimiterMetrics>,
}

impl<S: Store> Limiter<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>, opts: LimiterOptions) -> Self {
        Limiter {
            rules: ArcSwapOption::empty(),
            store,
            clock,
            opts,
            metrics: None,
        }
    }

    /// Records per-rule statistics and store latency.
    pub fn with_metrics(mut self, metrics: LimiterMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Publishes a new rule set in one atomic swap; requests in flight finish on the old one,
    /// which is then freed off the request path (see [`retire`]).
    pub fn set_rules(&self, rules: Arc<RuleSet>) {
        if let Some(old) = self.rules.swap(Some(rules)) {
            retire(old);
        }
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
        self.decide(req, None).await
    }

    /// Decides `req` (charging it, as [`Self::should_rate_limit`]) and tells how each
    /// descriptor was decided.
    pub async fn explain(&self, req: &Request) -> Result<(Response, Vec<Explanation>), LimitError> {
        let mut out = Vec::new();
        let r = self.decide(req, Some(&mut out)).await?;
        Ok((r, out))
    }

    async fn decide(
        &self,
        req: &Request,
        mut explain: Option<&mut Vec<Explanation>>,
    ) -> Result<Response, LimitError> {
        let rules = self
            .rules
            .load_full()
            .ok_or_else(|| LimitError::Unavailable("no rate limit configuration loaded".into()))?;
        let Some(domain) = rules.domain(&req.domain) else {
            if let Some(out) = explain.as_deref_mut() {
                out.extend(req.descriptors.iter().map(|_| Explanation {
                    matched: "no_rule",
                    rule: None,
                    source: None,
                    stats_key: None,
                    limits: Vec::new(),
                    code: "OK",
                }));
            }
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
        // What matched before `replaces`, for an explanation.
        let matched: Vec<Option<&Arc<Rule>>> = if explain.is_some() {
            resolved.iter().map(|r| r.rule()).collect()
        } else {
            Vec::new()
        };
        apply_replaces(&mut resolved);

        // Build the storage keys first, then borrow them into the checks.
        let default_charge = if self.opts.charge_rejected {
            Charge::Always
        } else {
            Charge::IfAdmitted
        };
        // Every key in one buffer (one allocation per request, not one per key).
        let mut key_buf: Vec<u8> = Vec::with_capacity(96 * req.descriptors.len());
        // (descriptor, limit, quota mode, distinct value hash, key range in `key_buf`),
        // grouped by descriptor.
        let mut specs: Vec<Spec<'_>> = Vec::new();
        for (i, (r, d)) in resolved.iter().zip(&req.descriptors).enumerate() {
            let Resolved::Limited {
                rule,
                steps,
                limits,
                named,
                ..
            } = r
            else {
                continue;
            };
            let last = d.entries.len().saturating_sub(1);
            for limit in limits.iter() {
                // distinct counts the values of the last entry: its value stays out of the key.
                let distinct = limit.limit.algorithm == Algorithm::Distinct;
                let start = key_buf.len();
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
                key::append_tagged(
                    &mut key_buf,
                    &self.opts.key_prefix,
                    &req.domain,
                    domain.hash_tag,
                    parts,
                    &limit.limit,
                    name,
                );
                let value = match d.entries.get(last) {
                    Some(e) if distinct => distinct::hash(&e.value),
                    _ => 0,
                };
                let quota = self.is_quota(rule.map(|r| &**r));
                specs.push((i, limit, quota, value, (start, key_buf.len())));
            }
        }
        let checks: Vec<Check<'_>> = specs
            .iter()
            .map(|&(i, limit, quota, value, (from, to))| {
                let d = &req.descriptors[i];
                Check {
                    key: &key_buf[from..to],
                    limit: &limit.limit,
                    ask: Ask {
                        hits: d.hits,
                        refund: d.refund,
                        value,
                    },
                    charge: limit.charge.unwrap_or(default_charge),
                    group: i as u32,
                    quota,
                    on_error: limit.on_error.or(domain.on_store_error),
                }
            })
            .collect();
        let verdicts = if checks.is_empty() {
            Vec::new()
        } else {
            let started = monotonic();
            let span =
                tracing::trace_span!(target: "sluice::otel", "store.decide", checks = checks.len());
            let result = self
                .store
                .decide(&checks, self.clock.now())
                .instrument(span)
                .await;
            if let Some(m) = &self.metrics {
                m.store_duration
                    .record(started.elapsed().as_secs_f64(), &m.store_attrs);
            }
            result?
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
            let shadow = resolved[i].rule().is_some_and(|r| r.shadow_mode);
            if shadow {
                statuses[i].code = Code::Ok;
            }
            let d = &req.descriptors[i];
            if let (Some(m), false) = (&self.metrics, d.refund) {
                let v = &verdicts[pick];
                let counters = counters_of(&m.stats, domain, &resolved[i], d);
                m.stats.record(
                    &counters,
                    Observation {
                        hits: d.hits,
                        limit: limit.limit.requests,
                        allowed: v.allowed,
                        charged: v.charged,
                        remaining: v.remaining,
                        shadow,
                        cached: v.cached,
                    },
                );
            }
            from = to;
        }
        if let Some(out) = explain {
            for (i, r) in resolved.iter().enumerate() {
                let d = &req.descriptors[i];
                let limits = specs
                    .iter()
                    .zip(&verdicts)
                    .filter(|(s, _)| s.0 == i)
                    .map(|(s, v)| LimitExplanation {
                        name: s.1.name.clone(),
                        key: crate::model::display_bytes(&key_buf[s.4 .0..s.4 .1]),
                        algorithm: s.1.limit.algorithm.as_str(),
                        requests_per_unit: s.1.requests_per_unit,
                        unit: s.1.unit.as_str(),
                        window_ms: s.1.limit.window / MICROS_PER_MILLI,
                        hits: d.hits,
                        allowed: v.allowed,
                        remaining: v.remaining,
                        reset_ms: ceil_millis(v.reset) / MICROS_PER_MILLI,
                        charged: v.charged,
                    })
                    .collect();
                let rule = matched.get(i).copied().flatten();
                let kind = match r {
                    Resolved::Limited { rule: None, .. } => "override",
                    Resolved::Limited { .. } => "rule",
                    Resolved::Unlimited(_) => "unlimited",
                    Resolved::NoLimit if rule.is_some() => "replaced",
                    Resolved::NoLimit => "no_rule",
                };
                out.push(Explanation {
                    matched: kind,
                    rule: rule.map(|r| r.full_key.clone()),
                    source: rule.map(|r| r.position.to_string()),
                    stats_key: stats_key_of(domain, r, d),
                    limits,
                    code: match statuses[i].code {
                        Code::Ok => "OK",
                        Code::OverLimit => "OVER_LIMIT",
                    },
                });
            }
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

/// Frees a replaced rule set on a thread of its own once no request holds it any more:
/// freeing 100,000 rules takes milliseconds, which the last request to finish on the old set
/// would otherwise spend before answering. Without a thread, it is freed here (on the reload).
fn retire(old: Arc<RuleSet>) {
    let _ = std::thread::Builder::new()
        .name("sluice-rules-drop".into())
        .spawn(move || {
            let mut old = old;
            let mut wait = std::time::Duration::from_millis(1);
            // Requests hold the set for their lifetime (bounded by their deadline); other
            // holders (`/rlconfig`, explain) as briefly.
            while let Err(still) = Arc::try_unwrap(old) {
                old = still;
                std::thread::sleep(wait);
                wait = (wait * 2).min(std::time::Duration::from_millis(100));
            }
        });
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
            limits: Cow::Owned(vec![RuleLimit {
                name: None,
                requests_per_unit: o.requests_per_unit,
                unit: o.unit,
                limit,
                charge: base.and_then(|b| b.charge),
                on_error: base.and_then(|b| b.on_error),
            }]),
            steps: m.map(|m| m.steps).unwrap_or_default(),
            value_to_metric: 0,
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
                value_to_metric: m.value_to_metric,
                limits: Cow::Borrowed(std::slice::from_ref(limit)),
                named: false,
            },
            RuleKind::Several(limits) => Resolved::Limited {
                rule: Some(m.rule),
                steps: m.steps,
                value_to_metric: m.value_to_metric,
                limits: Cow::Borrowed(limits),
                named: true,
            },
        },
    })
}

/// The stats key of a limited descriptor (see [`crate::stats`]).
fn stats_key_of(domain: &Domain, r: &Resolved<'_>, d: &Descriptor) -> Option<String> {
    match r {
        Resolved::Limited {
            rule: Some(rule),
            steps,
            value_to_metric,
            ..
        } => Some(if rule.stats_dynamic {
            stats::dynamic_key(
                &domain.name,
                &d.entries,
                steps,
                *value_to_metric,
                rule.detailed_metric,
            )
        } else {
            rule.full_key.clone()
        }),
        Resolved::Limited { rule: None, .. } => Some(stats::override_key(&domain.name, &d.entries)),
        _ => None,
    }
}

/// The counters of a limited descriptor: cached on its rule unless its key depends on the
/// request, then looked up (capped) by key.
fn counters_of(
    stats: &StatsRegistry,
    domain: &Domain,
    r: &Resolved<'_>,
    d: &Descriptor,
) -> Arc<RuleCounters> {
    match r {
        Resolved::Limited {
            rule: Some(rule), ..
        } if !rule.stats_dynamic => stats.of_rule(&domain.name, rule),
        Resolved::Limited {
            rule: Some(rule), ..
        } => {
            let key = stats_key_of(domain, r, d).unwrap_or_default();
            stats.dynamic(&domain.name, &key, || stats.of_rule(&domain.name, rule))
        }
        _ => {
            let key = stats_key_of(domain, r, d).unwrap_or_default();
            stats.dynamic(&domain.name, &key, || {
                stats.fixed(&domain.name, &format!("{}.overflow", domain.name))
            })
        }
    }
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
                if limits.iter().any(|l| is_replaced(l.name.as_ref())) {
                    limits.to_mut().retain(|l| !is_replaced(l.name.as_ref()));
                }
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
