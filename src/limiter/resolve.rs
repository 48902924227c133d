//! Stage 1, resolve: each descriptor of a request -> the limits that apply to it (its matched
//! rule, or the request's own limit override, or none), after the domain's permissions and
//! `replaces`. Pure: no keys, no store, no clock.

use std::borrow::Cow;
use std::sync::Arc;

use super::LimitError;
use crate::algorithm::{Algorithm, Limit};
use crate::excerpt::excerpt;
use crate::model::{Descriptor, Request};
use crate::rules::{Budget, Domain, Expired, Match, Rule, RuleKind, RuleLimit, Step};
use crate::store::Deadline;

/// What one descriptor resolved to.
#[derive(Debug)]
pub enum Resolved<'r> {
    /// No rule matched.
    NoLimit,
    /// A rule matched, but another matched rule `replaces` every limit of it.
    Replaced(&'r Arc<Rule>),
    /// The matched rule is `unlimited`.
    Unlimited(&'r Arc<Rule>),
    Limited {
        /// `None`: the request's own limit override.
        rule: Option<&'r Arc<Rule>>,
        steps: Vec<Step<'r>>,
        /// [`Match::value_to_metric`].
        value_to_metric: Vec<bool>,
        /// Every one must allow the request (one unless `rate_limits`). Borrowed from the
        /// rule (no copy per request) unless an override or `replaces` changed them.
        limits: Cow<'r, [RuleLimit]>,
        /// The limits come from `rate_limits`: their names are part of their storage keys.
        named: bool,
    },
}

impl<'r> Resolved<'r> {
    /// The rule whose policy (shadow mode, quota mode, metadata) applies.
    pub fn rule(&self) -> Option<&'r Arc<Rule>> {
        match self {
            Resolved::NoLimit | Resolved::Replaced(_) => None,
            Resolved::Unlimited(r) => Some(r),
            Resolved::Limited { rule, .. } => *rule,
        }
    }

    /// The rule the descriptor matched, replaced or not.
    pub fn matched(&self) -> Option<&'r Arc<Rule>> {
        match self {
            Resolved::Replaced(r) => Some(r),
            _ => self.rule(),
        }
    }

    /// The limits to check (none unless `Limited`).
    pub fn limits(&self) -> &[RuleLimit] {
        match self {
            Resolved::Limited { limits, .. } => limits,
            _ => &[],
        }
    }
}

/// Resolves every descriptor of `req` in `domain` (`None`: a domain with no rules), giving up
/// with DEADLINE_EXCEEDED once `deadline` passes while matching (asked at a coarse
/// granularity: see [`Budget`]).
#[inline(never)] // a stage the profile counts (bench/profile_memory.py)
pub(crate) fn resolve<'r>(
    domain: Option<&'r Domain>,
    req: &Request,
    deadline: Deadline,
) -> Result<Vec<Resolved<'r>>, LimitError> {
    let Some(domain) = domain else {
        return Ok(req.descriptors.iter().map(|_| Resolved::NoLimit).collect());
    };
    permitted(domain, req)?;
    let expired = || deadline.expired();
    // One budget for the whole request: a stride of work spans descriptors.
    let mut budget = Budget::new(&expired);
    // A loop rather than `collect::<Result<..>>`, which cannot size the vector and grows it.
    let mut resolved: Vec<Resolved<'r>> = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.iter().enumerate() {
        let found = domain
            .find_within(&d.entries, &mut budget)
            .map_err(|Expired| {
                LimitError::DeadlineExceeded(format!(
                    "the request deadline passed while matching descriptor {i}"
                ))
            })?;
        resolved.push(descriptor(found, d, i)?);
    }
    apply_replaces(&mut resolved);
    Ok(resolved)
}

/// Refunds and limit overrides only where the domain allows them.
fn permitted(domain: &Domain, req: &Request) -> Result<(), LimitError> {
    if !domain.allow_refunds {
        if let Some(i) = req.descriptors.iter().position(|d| d.refund) {
            return Err(LimitError::PermissionDenied(format!(
                "descriptor {i}: is_negative_hits refunds are not allowed for domain '{}' (set `allow_refunds: true` in its config to accept them)",
                excerpt(&req.domain)
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
                excerpt(&req.domain)
            )));
        }
    }
    Ok(())
}

fn descriptor<'r>(
    m: Option<Match<'r>>,
    d: &Descriptor,
    index: usize,
) -> Result<Resolved<'r>, LimitError> {
    if let Some(o) = d.limit_override {
        // envoyproxy/ratelimit: an override applies whether or not a rule matched, with no
        // name, no shadow mode and nothing to replace. It keeps the matched rule's algorithm
        // (with `rate_limits`, the first limit's), precision, calendar alignment and charging;
        // the burst becomes the new requests_per_unit. A concurrency limit keeps its lease
        // time: the override's rate becomes max_in_flight, and its unit means nothing there.
        let base = m.as_ref().and_then(|m| m.rule.kind.limits().first());
        let rpu = u64::from(o.requests_per_unit);
        let (unit, window) = match base {
            Some(b) if b.limit.algorithm().leases() => (b.unit, b.limit.window()),
            _ => (o.unit, o.unit.micros()),
        };
        let algorithm = base.map_or(Algorithm::DEFAULT, |b| b.limit.algorithm());
        let built = match base {
            Some(b) => b.limit.clone().with_rate(rpu, window, o.unit),
            None => Limit::fixed_window(rpu, window),
        };
        let limit = built.map_err(|e| {
            LimitError::InvalidArgument(format!(
                "descriptor {index}: the limit override of {} per {} cannot be used with algorithm {}: {e}",
                o.requests_per_unit,
                o.unit,
                algorithm.as_str()
            ))
        })?;
        return Ok(Resolved::Limited {
            rule: None,
            limits: Cow::Owned(vec![RuleLimit {
                name: None,
                requests_per_unit: o.requests_per_unit,
                unit,
                limit,
                charge: base.and_then(|b| b.charge),
                on_error: base.and_then(|b| b.on_error),
                key_tail: Default::default(),
            }]),
            steps: m.map(|m| m.steps).unwrap_or_default(),
            value_to_metric: Vec::new(),
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
            Resolved::NoLimit | Resolved::Replaced(_) => None,
            Resolved::Unlimited(rule) => Some(*rule).filter(|r| is_replaced(r.name.as_ref())),
            Resolved::Limited { rule: None, .. } => None,
            Resolved::Limited {
                rule: Some(rule),
                limits,
                ..
            } => {
                if limits.iter().any(|l| is_replaced(l.name.as_ref())) {
                    limits.to_mut().retain(|l| !is_replaced(l.name.as_ref()));
                }
                Some(*rule).filter(|_| limits.is_empty())
            }
        };
        if let Some(rule) = gone {
            *r = Resolved::Replaced(rule);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{descriptor as d, request, rules};
    use super::*;
    use crate::model::Unit;

    const CONFIG: &str = r#"
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: A}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 9, replaces: [{name: A}]}
  - key: u
    rate_limit: {unlimited: true}
  - key: many
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: A}
      - {unit: hour, requests_per_unit: 100, name: hourly}
"#;

    fn kinds(r: &[Resolved<'_>]) -> Vec<String> {
        r.iter()
            .map(|r| match r {
                Resolved::NoLimit => "none".to_string(),
                Resolved::Replaced(_) => "replaced".to_string(),
                Resolved::Unlimited(_) => "unlimited".to_string(),
                Resolved::Limited { rule: None, .. } => "override".to_string(),
                Resolved::Limited { limits, .. } => format!("{} limits", limits.len()),
            })
            .collect()
    }

    #[test]
    fn each_kind_of_descriptor() {
        let rules = rules(CONFIG);
        let domain = rules.domain("d");
        let req = request(vec![d(&[("a", "1")]), d(&[("u", "")]), d(&[("zzz", "")])]);
        let r = resolve(domain, &req, Deadline::NONE).unwrap();
        assert_eq!(kinds(&r), ["1 limits", "unlimited", "none"]);
        // An unknown domain: nothing applies.
        assert_eq!(
            kinds(&resolve(None, &req, Deadline::NONE).unwrap()),
            ["none"; 3]
        );
    }

    #[test]
    fn replaces_removes_named_limits_one_by_one() {
        let rules = rules(CONFIG);
        let domain = rules.domain("d");
        let req = request(vec![d(&[("a", "1")]), d(&[("b", "")]), d(&[("many", "")])]);
        let r = resolve(domain, &req, Deadline::NONE).unwrap();
        assert_eq!(kinds(&r), ["replaced", "1 limits", "1 limits"]);
        assert_eq!(r[0].matched().map(|r| r.full_key.as_str()), Some("d.a"));
        assert!(r[0].rule().is_none());
        assert_eq!(r[2].limits()[0].name.as_deref(), Some("hourly"));
    }

    #[test]
    fn an_override_applies_with_or_without_a_rule() {
        let rules = rules(CONFIG);
        let domain = rules.domain("d");
        let mut with_rule = d(&[("a", "1")]);
        with_rule.limit_override = Some(crate::model::LimitOverride {
            requests_per_unit: 7,
            unit: Unit::Hour,
        });
        let mut without = with_rule.clone();
        without.entries[0].key = b"nothing".to_vec();
        let r = resolve(domain, &request(vec![with_rule, without]), Deadline::NONE).unwrap();
        assert_eq!(kinds(&r), ["override", "override"]);
        assert_eq!(r[0].limits()[0].limit.requests(), 7);
        assert!(r[0].rule().is_none(), "no shadow mode, no metadata");
    }

    #[test]
    fn an_override_of_a_concurrency_limit_keeps_its_lease_time() {
        let rules = rules("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: concurrency, max_in_flight: 5, lease_time: 90s}\n");
        let mut o = d(&[("a", "1")]);
        o.limit_override = Some(crate::model::LimitOverride {
            requests_per_unit: 2,
            unit: Unit::Second,
        });
        let r = resolve(rules.domain("d"), &request(vec![o]), Deadline::NONE).unwrap();
        let l = &r[0].limits()[0];
        assert_eq!(l.limit.algorithm(), Algorithm::Concurrency);
        assert_eq!((l.limit.requests(), l.limit.window()), (2, 90_000_000));
        assert_eq!(l.unit, Unit::Minute, "the unit reported for the lease time");
    }

    #[test]
    fn matching_past_the_deadline_is_deadline_exceeded() {
        let rules = rules(CONFIG);
        let domain = rules.domain("d");
        // The deadline is asked once per stride of work: a value long enough to spend one.
        let long = "x".repeat(64 * Budget::STRIDE as usize);
        let req = request(vec![d(&[("a", &long)])]);
        let passed = Deadline::after(Some(std::time::Duration::ZERO));
        assert!(resolve(domain, &req, Deadline::NONE).is_ok());
        match resolve(domain, &req, passed) {
            Err(LimitError::DeadlineExceeded(m)) => assert!(m.contains("while matching"), "{m}"),
            other => panic!("{:?}", other.map(|r| r.len())),
        }
    }

    #[test]
    fn refunds_and_overrides_need_the_domains_permission() {
        let rules = rules("domain: d\nallow_refunds: false\nallow_overrides: false\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n");
        let domain = rules.domain("d");
        let mut refund = d(&[("a", "1")]);
        refund.refund = true;
        let e = resolve(domain, &request(vec![refund]), Deadline::NONE).unwrap_err();
        assert!(matches!(e, LimitError::PermissionDenied(_)), "{e}");
        let mut o = d(&[("a", "1")]);
        o.limit_override = Some(crate::model::LimitOverride {
            requests_per_unit: 1,
            unit: Unit::Second,
        });
        let e = resolve(domain, &request(vec![o]), Deadline::NONE).unwrap_err();
        assert!(matches!(e, LimitError::PermissionDenied(_)), "{e}");
    }
}
