//! The IETF RateLimit fields of a decided plan: one [`QuotaItem`] per limit of each limited
//! descriptor, in plan order, serialised by [`ietf_headers`]. Pure.
//!
//! The mapping (README.md, "IETF headers"): the policy's name is the limit's `name`, else the
//! rule's full key (`domain.key_value.key2`, as in statistics), or `override` for a request's
//! own limit override; `q` the limit's requests, `w` its window in seconds; `r` and `t` the
//! verdict's remaining and time to reset. The partition key covers the values that pick the
//! limit's counter: entries matched by a key-only default or a per-value wildcard (not the
//! exact values of the rule's path, which every request of the rule shares, nor values counted
//! per pattern, nor the value a `distinct` limit counts).

use super::ietf_headers::{self, QuotaItem, QuotaUnit, PARTITION_KEY_LEN};
use super::plan::Plan;
use super::resolve::Resolved;
use crate::algorithm::Algorithm;
use crate::model::Entry;
use crate::rules::{RuleLimit, Step};
use crate::store::Verdict;

/// The name of a request's own limit override (it has no rule, hence no name).
pub(crate) const OVERRIDE_POLICY: &str = "override";

/// `RateLimit-Policy` and `RateLimit` for `plan` given the store's `verdicts` (in plan order);
/// none when no descriptor is limited.
pub(crate) fn fields(plan: &Plan<'_>, verdicts: &[Verdict]) -> Vec<(String, String)> {
    let partitions: Vec<Option<[u8; PARTITION_KEY_LEN]>> = plan
        .planned
        .iter()
        .map(|p| {
            let steps = match &plan.resolved[p.descriptor] {
                Resolved::Limited { steps, .. } => &steps[..],
                _ => &[],
            };
            let entries = &plan.request.descriptors[p.descriptor].entries;
            partition(entries, steps, plan.limit(p).limit.algorithm())
        })
        .collect();
    let items: Vec<QuotaItem<'_>> = plan
        .planned
        .iter()
        .zip(verdicts)
        .zip(&partitions)
        .map(|((p, v), pk)| {
            let limit = plan.limit(p);
            let unit = quota_unit(limit.limit.algorithm());
            QuotaItem {
                name: policy_name(&plan.resolved[p.descriptor], limit),
                quota: limit.limit.requests(),
                unit,
                // Requests in flight have no window (a concurrency limit's `window` is its
                // lease time).
                window_secs: (unit == QuotaUnit::Requests)
                    .then(|| ietf_headers::window_secs(limit.limit.window())),
                remaining: if v.allowed { v.remaining } else { 0 },
                reset_secs: Some(ietf_headers::reset_secs(v.reset)),
                partition: pk.as_ref().map(|k| &k[..]),
            }
        })
        .collect();
    ietf_headers::fields(&items)
}

/// The policy's name: the limit's, else its rule's full key, else [`OVERRIDE_POLICY`].
pub(crate) fn policy_name<'p>(resolved: &Resolved<'p>, limit: &'p RuleLimit) -> &'p str {
    match (&limit.name, resolved.rule()) {
        (Some(name), _) => name,
        (None, Some(rule)) => &rule.full_key,
        (None, None) => OVERRIDE_POLICY,
    }
}

/// Leases are concurrent requests; every other algorithm counts requests (`distinct` counts
/// the distinct values of requests, which the registry has no unit for).
fn quota_unit(algorithm: Algorithm) -> QuotaUnit {
    if algorithm.leases() {
        QuotaUnit::ConcurrentRequests
    } else {
        QuotaUnit::Requests
    }
}

/// The partition key of a limit of a descriptor matched through `steps` (empty for an override
/// that matched no rule: then every value picks the counter); `None` when no value does.
pub(crate) fn partition(
    entries: &[Entry],
    steps: &[Step<'_>],
    algorithm: Algorithm,
) -> Option<[u8; PARTITION_KEY_LEN]> {
    let counted = if algorithm.counts_values() {
        entries.len().checked_sub(1)
    } else {
        None
    };
    let mut values = entries
        .iter()
        .enumerate()
        .filter(|&(i, _)| {
            Some(i) != counted
                && !matches!(
                    steps.get(i),
                    Some(Step::Exact | Step::Wildcard { shared: true, .. })
                )
        })
        .map(|(_, e)| &e.value[..])
        .peekable();
    values.peek()?;
    Some(ietf_headers::partition_key(values))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{descriptor as d, request, rules};
    use super::*;
    use crate::limiter::LimiterOptions;
    use crate::model::LimitOverride;

    const CONFIG: &str = r#"
domain: d
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100, name: gold_user}
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: route
    value: "/shared/*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: fixed
    value: one
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: tenant
    descriptors:
      - key: ua
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: distinct}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: burst}
      - {unit: hour, requests_per_unit: 100, name: hourly}
"#;

    fn v(allowed: bool, remaining: u64, reset: i64) -> Verdict {
        Verdict {
            allowed,
            remaining,
            reset,
            charged: allowed,
            cached: false,
        }
    }

    fn pk(values: &[&str]) -> String {
        let key = ietf_headers::partition_key(values.iter().map(|v| v.as_bytes()));
        let mut out = String::from(":");
        base64::Engine::encode_string(&base64::engine::general_purpose::STANDARD, key, &mut out);
        out + ":"
    }

    /// The two fields for one descriptor of `entries` (and the given verdicts).
    fn check(entries: &[(&str, &str)], verdicts: &[Verdict], policy: &str, limit: &str) {
        let rules = rules(CONFIG);
        let req = request(vec![d(entries)]);
        let plan = Plan::new(
            &rules,
            &req,
            &LimiterOptions::default(),
            crate::store::Deadline::NONE,
        )
        .unwrap();
        let got = fields(&plan, verdicts);
        let want = [
            ("RateLimit-Policy".to_string(), policy.to_string()),
            ("RateLimit".to_string(), limit.to_string()),
        ];
        assert_eq!(got, want, "{entries:?}");
    }

    #[test]
    fn one_item_per_limit_named_and_partitioned_by_the_rule() {
        let ok = v(true, 4, 29_750_000);
        // A key-only rule: per value, so partitioned by the value; named by its full key.
        let ip = pk(&["10.0.0.1"]);
        check(
            &[("ip", "10.0.0.1")],
            &[ok],
            &format!(r#""d.ip";q=5;w=60;pk={ip}"#),
            &format!(r#""d.ip";r=4;t=30;pk={ip}"#),
        );
        // The exact `plan: gold` is shared by every request of the rule: only the user counts.
        let user = pk(&["alice"]);
        check(
            &[("plan", "gold"), ("user", "alice")],
            &[v(false, 7, 1)],
            &format!(r#""gold_user";q=100;w=3600;pk={user}"#),
            &format!(r#""gold_user";r=0;t=1;pk={user}"#),
        );
        // A per-value wildcard partitions; a shared one (and an exact value) does not.
        let path = pk(&["/api/x"]);
        check(
            &[("path", "/api/x")],
            &[ok],
            &format!(r#""d.path_/api/*";q=2;w=1;pk={path}"#),
            &format!(r#""d.path_/api/*";r=4;t=30;pk={path}"#),
        );
        check(
            &[("route", "/shared/x")],
            &[ok],
            r#""d.route_/shared/*";q=2;w=1"#,
            r#""d.route_/shared/*";r=4;t=30"#,
        );
        check(
            &[("fixed", "one")],
            &[ok],
            r#""d.fixed_one";q=7;w=86400"#,
            r#""d.fixed_one";r=4;t=30"#,
        );
        // `distinct` counts the last value: the tenant alone picks the counter.
        let tenant = pk(&["t1"]);
        check(
            &[("tenant", "t1"), ("ua", "curl")],
            &[ok],
            &format!(r#""d.tenant.ua";q=3;w=60;pk={tenant}"#),
            &format!(r#""d.tenant.ua";r=4;t=30;pk={tenant}"#),
        );
        // rate_limits: one item per limit, each by its name.
        let two = pk(&["x"]);
        check(
            &[("two", "x")],
            &[v(true, 1, 400_000), v(true, 90, 3_000_000_000)],
            &format!(r#""burst";q=2;w=1;pk={two}, "hourly";q=100;w=3600;pk={two}"#),
            &format!(r#""burst";r=1;t=1;pk={two}, "hourly";r=90;t=3000;pk={two}"#),
        );
    }

    #[test]
    fn overrides_unlimited_and_unmatched_descriptors() {
        let rules = rules(CONFIG);
        let mut over = d(&[("nothing", "here")]);
        over.limit_override = Some(LimitOverride {
            requests_per_unit: 9,
            unit: crate::model::Unit::Minute,
        });
        let req = request(vec![d(&[("no", "rule")]), over]);
        let plan = Plan::new(
            &rules,
            &req,
            &LimiterOptions::default(),
            crate::store::Deadline::NONE,
        )
        .unwrap();
        let got = fields(&plan, &[v(true, 8, 60_000_000)]);
        let here = pk(&["here"]);
        assert_eq!(got[0].1, format!(r#""override";q=9;w=60;pk={here}"#));
        assert_eq!(got[1].1, format!(r#""override";r=8;t=60;pk={here}"#));
        // Nothing limited: no fields at all (an empty List is not a valid field).
        let req = request(vec![d(&[("no", "rule")])]);
        let plan = Plan::new(
            &rules,
            &req,
            &LimiterOptions::default(),
            crate::store::Deadline::NONE,
        )
        .unwrap();
        assert!(fields(&plan, &[]).is_empty());
    }
}
