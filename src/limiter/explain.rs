//! How each descriptor was decided, for `POST /json?explain=true` and
//! `sluice check --requests`: derived after the decision from (plan, verdicts, response),
//! never built along the way.

use super::observe::stats_key_of;
use super::plan::Plan;
use super::resolve::Resolved;
use super::response::{ceil_millis, Response};
use crate::model::{display_bytes, MICROS_PER_MILLI};
use crate::store::Verdict;

/// How one descriptor was decided.
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

/// One explanation per descriptor of the plan's request.
pub(crate) fn explain(
    plan: &Plan<'_>,
    verdicts: &[Verdict],
    response: &Response,
) -> Vec<Explanation> {
    plan.resolved
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let d = &plan.request.descriptors[i];
            let limits = plan
                .planned
                .iter()
                .zip(verdicts)
                .filter(|(p, _)| p.descriptor == i)
                .map(|(p, v)| {
                    let l = plan.limit(p);
                    LimitExplanation {
                        name: l.name.clone(),
                        key: display_bytes(plan.key(p)),
                        algorithm: l.limit.algorithm().as_str(),
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit.as_str(),
                        window_ms: l.limit.window() / MICROS_PER_MILLI,
                        hits: d.hits,
                        allowed: v.allowed,
                        remaining: v.remaining,
                        reset_ms: ceil_millis(v.reset) / MICROS_PER_MILLI,
                        charged: v.charged,
                    }
                })
                .collect();
            let rule = r.matched();
            Explanation {
                matched: match r {
                    Resolved::Limited { rule: None, .. } => "override",
                    Resolved::Limited { .. } => "rule",
                    Resolved::Unlimited(_) => "unlimited",
                    Resolved::Replaced(_) => "replaced",
                    Resolved::NoLimit => "no_rule",
                },
                rule: rule.map(|r| r.full_key.clone()),
                source: rule.map(|r| r.position.to_string()),
                stats_key: plan.domain.and_then(|domain| stats_key_of(domain, r, d)),
                limits,
                code: response.statuses[i].code.as_str(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::assemble::assemble;
    use super::super::testing::{descriptor as d, request, rules};
    use super::super::LimiterOptions;
    use super::*;

    #[test]
    fn every_descriptor_is_explained() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, name: A}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 9, replaces: [{name: A}]}\n  - key: u\n    rate_limit: {unlimited: true}\n",
        );
        let req = request(vec![
            d(&[("a", "1")]),
            d(&[("b", "2")]),
            d(&[("u", "")]),
            d(&[("x", "")]),
        ]);
        let opts = LimiterOptions::default();
        let plan = Plan::new(&rules, &req, &opts, crate::store::Deadline::NONE).unwrap();
        let verdicts = [Verdict {
            allowed: false,
            remaining: 0,
            reset: 1_500,
            charged: false,
            cached: false,
        }];
        let response = assemble(&plan, &verdicts, &opts);
        let e = explain(&plan, &verdicts, &response);
        assert_eq!(
            e.iter().map(|e| e.matched).collect::<Vec<_>>(),
            ["replaced", "rule", "unlimited", "no_rule"]
        );
        assert_eq!(e[0].rule.as_deref(), Some("d.a"));
        assert!(e[0].limits.is_empty() && e[0].stats_key.is_none());
        let b = &e[1];
        assert_eq!(
            (b.code, b.stats_key.as_deref()),
            ("OVER_LIMIT", Some("d.b"))
        );
        assert_eq!(b.limits.len(), 1);
        let l = &b.limits[0];
        assert_eq!((l.reset_ms, l.window_ms, l.allowed), (2, 60_000, false));
        assert!(l.key.starts_with("sluice:v2:{d|b=2}:fixed_window:"));
    }
}
