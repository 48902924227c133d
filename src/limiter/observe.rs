//! The per-rule statistics of a decision (envoyproxy/ratelimit's counters): which key each
//! limited descriptor counts under, and what its reported verdict adds.

use std::sync::Arc;

use super::assemble::reported;
use super::plan::Plan;
use super::resolve::Resolved;
use crate::model::Descriptor;
use crate::rules::Domain;
use crate::stats::{self, Observation, RuleCounters, StatsRegistry};
use crate::store::Verdict;

/// Counts each limited descriptor of `plan` (refunds excepted) by its reported verdict.
#[inline(never)] // a stage the profile counts (bench/profile_memory.py)
pub(crate) fn record(stats: &StatsRegistry, plan: &Plan<'_>, verdicts: &[Verdict]) {
    let Some(domain) = plan.domain else {
        return;
    };
    for (i, range) in plan.groups() {
        let d = &plan.request.descriptors[i];
        if d.refund {
            continue;
        }
        let pick = range.start + reported(&verdicts[range]);
        let v = &verdicts[pick];
        let r = &plan.resolved[i];
        let counters = counters_of(stats, domain, r, d);
        stats.record(
            &counters,
            Observation {
                hits: d.hits,
                limit: plan.limit(&plan.planned[pick]).limit.requests(),
                allowed: v.allowed,
                charged: v.charged,
                remaining: v.remaining,
                shadow: r.rule().is_some_and(|r| r.shadow_mode),
                cached: v.cached,
            },
        );
    }
}

/// Counts what an RLQS client reported for each limited descriptor of `plan`: `allowed`
/// requests as charged and within the limit (`remaining` left), `denied` as over it.
pub(crate) fn record_reported(
    stats: &StatsRegistry,
    plan: &Plan<'_>,
    allowed: u64,
    denied: u64,
    remaining: u64,
) {
    let Some(domain) = plan.domain else {
        return;
    };
    for (i, range) in plan.groups() {
        let r = &plan.resolved[i];
        let counters = counters_of(stats, domain, r, &plan.request.descriptors[i]);
        let limit = plan.limit(&plan.planned[range.start]).limit.requests();
        let shadow = r.rule().is_some_and(|r| r.shadow_mode);
        for (hits, allowed) in [(allowed, true), (denied, false)] {
            if hits > 0 {
                stats.record(
                    &counters,
                    Observation {
                        hits,
                        limit,
                        allowed,
                        charged: true,
                        remaining,
                        shadow,
                        cached: false,
                    },
                );
            }
        }
    }
}

/// The stats key of a limited descriptor (see [`crate::stats`]).
pub(crate) fn stats_key_of(domain: &Domain, r: &Resolved<'_>, d: &Descriptor) -> Option<String> {
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
                value_to_metric,
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

#[cfg(test)]
mod tests {
    use super::super::testing::{descriptor as d, request, rules};
    use super::*;

    /// `value_to_metric` deeper than 64 levels still shows the value (it was a `u64` bitmask
    /// that dropped entries past 64). YAML cannot nest that deep, so the tree is built here.
    #[test]
    fn value_to_metric_past_64_entries() {
        use crate::rules::{Branch, Node};
        let set = rules("domain: d\ndescriptors:\n  - key: k\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n");
        let compiled = set.domain("d").unwrap();
        let rule = compiled.root.children[&b"k"[..]]
            .default
            .as_ref()
            .and_then(|n| n.rule.clone())
            .unwrap();
        assert!(rule.stats_dynamic);
        let depth = 70;
        // Level i is key `k{i}`, default match; only the last has a rule and value_to_metric.
        let mut node = Node {
            rule: Some(rule),
            value_to_metric: true,
            ..Node::default()
        };
        for i in (0..depth).rev() {
            let mut parent = Node::default();
            parent.children.insert(
                format!("k{i}").into_bytes().into(),
                Branch {
                    default: Some(Box::new(node)),
                    ..Branch::default()
                },
            );
            node = parent;
        }
        let domain = Domain {
            name: "d".into(),
            root: node,
            allow_refunds: false,
            allow_reservations: false,
            allow_overrides: true,
            on_store_error: None,
            hash_tag: Default::default(),
        };
        let pairs: Vec<(String, String)> = (0..depth)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (&**k, &**v)).collect();
        let req = request(vec![d(&refs)]);
        let resolved =
            super::super::resolve::resolve(Some(&domain), &req, crate::store::Deadline::NONE)
                .unwrap();
        let key = stats_key_of(&domain, &resolved[0], &req.descriptors[0]).expect("limited");
        assert!(key.starts_with("d.k0.k1."), "{key}");
        assert!(key.ends_with(".k68.k69_v69"), "{key}");
    }
}
