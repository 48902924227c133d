//! Stage 4, assemble: (plan, verdicts) -> the RLS response: each descriptor's status (the
//! verdict it reports, shadow mode), the overall code (the admission rule of
//! [`batch::admitted`]), the rate-limit headers (draft 03 here, draft 10 in [`ietf_items`])
//! and the merged metadata. Pure.

use super::ietf_items;
use super::plan::Plan;
use super::resolve::Resolved;
use super::response::{ceil_div, ceil_millis, Code, CurrentLimit, Response, Status};
use super::{HeaderNames, LimiterOptions};
use crate::model::MICROS_PER_SEC;
use crate::rules::RuleLimit;
use crate::store::batch::{self, Group};
use crate::store::Verdict;

/// The response to `plan` given the store's `verdicts` (in plan order).
pub(crate) fn assemble(plan: &Plan<'_>, verdicts: &[Verdict], opts: &LimiterOptions) -> Response {
    let statuses = statuses(plan, verdicts);
    let quota = |i: usize| plan.quota(i);
    let admitted = batch::admitted(
        plan.resolved
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, Resolved::Limited { .. }))
            .map(|(i, _)| Group {
                quota: quota(i),
                allowed: statuses[i].code == Code::Ok,
            }),
    );
    let mut headers = match &opts.response_headers {
        Some(names) => headers(names, &statuses, quota),
        None => Vec::new(),
    };
    if opts.ietf_headers {
        headers.extend(ietf_items::fields(plan, verdicts));
    }
    let metadata = merged_metadata(&plan.resolved, &statuses, &no_lease_taken(plan, verdicts));
    Response {
        overall: if admitted || opts.shadow_mode {
            Code::Ok
        } else {
            Code::OverLimit
        },
        statuses,
        headers,
        metadata,
    }
}

/// One status per descriptor; a rule in shadow mode always reports OK.
fn statuses(plan: &Plan<'_>, verdicts: &[Verdict]) -> Vec<Status> {
    let mut statuses: Vec<Status> = plan
        .resolved
        .iter()
        .map(|r| match r {
            Resolved::Unlimited(_) => Status::unlimited(),
            _ => Status::no_limit(),
        })
        .collect();
    for (i, range) in plan.groups() {
        let pick = range.start + reported(&verdicts[range]);
        let limit = plan.limit(&plan.planned[pick]);
        statuses[i] = status_of(&verdicts[pick], limit);
        if plan.resolved[i].rule().is_some_and(|r| r.shadow_mode) {
            statuses[i].code = Code::Ok;
        }
    }
    statuses
}

/// Which of a descriptor's verdicts its status reports: the rejecting limit with the longest
/// retry-after (the first on a tie), or when all allow, the one with the least remaining.
pub(crate) fn reported(verdicts: &[Verdict]) -> usize {
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

fn status_of(v: &Verdict, limit: &RuleLimit) -> Status {
    Status {
        code: if v.allowed { Code::Ok } else { Code::OverLimit },
        current_limit: Some(CurrentLimit {
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit,
            name: limit.name.clone().unwrap_or_default(),
        }),
        remaining: if v.allowed {
            u32::try_from(v.remaining).unwrap_or(u32::MAX)
        } else {
            0
        },
        duration_until_reset: Some(ceil_millis(v.reset)),
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

/// Per descriptor: it has a concurrency limit that took no lease for this request (rejected,
/// not charged because another descriptor rejected the request, or a look of 0 hits).
fn no_lease_taken(plan: &Plan<'_>, verdicts: &[Verdict]) -> Vec<bool> {
    let mut out = vec![false; plan.resolved.len()];
    for (i, range) in plan.groups() {
        out[i] = plan.planned[range.clone()]
            .iter()
            .zip(&verdicts[range])
            .any(|(p, v)| plan.limit(p).limit.algorithm().leases() && !v.charged);
    }
    out
}

/// The `metadata` of the rules of descriptors within their limits, merged: earlier
/// descriptors win on conflicts, nested maps merge, lists do not. A descriptor with a
/// concurrency limit adds its metadata only when the request took its leases, so that Envoy
/// can release them at stream end exactly then (README, "Concurrency limits behind Envoy").
fn merged_metadata(
    resolved: &[Resolved<'_>],
    statuses: &[Status],
    no_lease: &[bool],
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    for ((r, s), &no_lease) in resolved.iter().zip(statuses).zip(no_lease) {
        if s.code == Code::OverLimit || matches!(r, Resolved::Unlimited(_)) || no_lease {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{descriptor as d, request, rules};
    use super::*;

    const CONFIG: &str = r#"
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {team: {name: a, on_call: x}}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 9}
    metadata: {team: {name: b, room: 2}, tier: gold}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: burst}
      - {unit: hour, requests_per_unit: 100, name: hourly}
  - key: c
    rate_limit: {algorithm: concurrency, max_in_flight: 3}
    metadata: {lease: c}
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

    fn answer(descriptors: &[&str], verdicts: &[Verdict], opts: &LimiterOptions) -> Response {
        let rules = rules(CONFIG);
        let req = request(descriptors.iter().map(|k| d(&[(k, "1")])).collect());
        let plan = Plan::new(&rules, &req, opts, crate::store::Deadline::NONE).unwrap();
        assert_eq!(plan.planned.len(), verdicts.len(), "one verdict per check");
        assemble(&plan, verdicts, opts)
    }

    #[test]
    fn the_reported_verdict_of_several_limits() {
        // All allow: the least remaining; else the rejection with the longest wait.
        assert_eq!(reported(&[v(true, 5, 1), v(true, 2, 9), v(true, 2, 1)]), 1);
        assert_eq!(
            reported(&[v(true, 0, 1), v(false, 0, 5), v(false, 0, 7)]),
            2
        );
        let r = answer(
            &["two"],
            &[v(true, 1, 900_001), v(false, 0, 30_000_000)],
            &LimiterOptions::default(),
        );
        let s = &r.statuses[0];
        assert_eq!(s.code, Code::OverLimit);
        assert_eq!(s.current_limit.as_ref().unwrap().name, "hourly");
        assert_eq!(s.duration_until_reset, Some(30_000_000));
        assert_eq!(r.overall, Code::OverLimit);
    }

    #[test]
    fn shadow_mode_per_rule_and_global() {
        let opts = LimiterOptions::default();
        let r = answer(&["s", "a"], &[v(false, 0, 1), v(true, 4, 1_500)], &opts);
        assert_eq!(r.statuses[0].code, Code::Ok);
        assert_eq!(r.overall, Code::Ok);
        let r = answer(&["a"], &[v(false, 0, 1)], &opts);
        assert_eq!(r.overall, Code::OverLimit);
        let global = LimiterOptions {
            shadow_mode: true,
            ..LimiterOptions::default()
        };
        let r = answer(&["a"], &[v(false, 0, 1)], &global);
        assert_eq!(
            (r.overall, r.statuses[0].code),
            (Code::Ok, Code::OverLimit),
            "global shadow mode leaves the descriptor's code"
        );
    }

    #[test]
    fn quota_descriptors_reject_only_all_together() {
        // `q` is in quota mode by its rule, `a` only with the global switch.
        let opts = LimiterOptions::default();
        let r = answer(&["q", "a"], &[v(false, 0, 1), v(true, 4, 1)], &opts);
        assert_eq!(
            r.overall,
            Code::OverLimit,
            "the only quota descriptor is over"
        );
        let r = answer(&["q", "a"], &[v(true, 0, 1), v(false, 0, 1)], &opts);
        assert_eq!(
            r.overall,
            Code::OverLimit,
            "a descriptor not in quota mode is over"
        );
        let global = LimiterOptions {
            quota_mode: true,
            ..LimiterOptions::default()
        };
        let r = answer(&["q", "a"], &[v(false, 0, 1), v(true, 4, 1)], &global);
        assert_eq!(r.overall, Code::Ok, "one quota descriptor still passes");
        let r = answer(&["q", "a"], &[v(false, 0, 1), v(false, 0, 1)], &global);
        assert_eq!(r.overall, Code::OverLimit);
    }

    #[test]
    fn headers_and_metadata() {
        let opts = LimiterOptions {
            response_headers: Some(HeaderNames::default()),
            ..LimiterOptions::default()
        };
        let r = answer(
            &["a", "b"],
            &[v(true, 4, 1_500_000), v(true, 2, 61_000)],
            &opts,
        );
        assert_eq!(
            r.headers,
            [
                ("RateLimit-Limit".to_string(), "9".to_string()),
                ("RateLimit-Remaining".to_string(), "2".to_string()),
                ("RateLimit-Reset".to_string(), "1".to_string()),
            ]
        );
        let m = serde_json::Value::Object(r.metadata.unwrap());
        assert_eq!(
            m,
            serde_json::json!({"team": {"name": "a", "on_call": "x", "room": 2}, "tier": "gold"})
        );
        // A descriptor over its limit adds no metadata.
        let r = answer(&["a", "b"], &[v(true, 4, 1), v(false, 0, 1)], &opts);
        assert_eq!(
            serde_json::Value::Object(r.metadata.unwrap()),
            serde_json::json!({"team": {"name": "a", "on_call": "x"}})
        );
        assert_eq!(r.headers[0].1, "9", "the over-limit descriptor's headers");
    }

    #[test]
    fn a_concurrency_descriptor_returns_its_metadata_only_when_it_took_leases() {
        let opts = LimiterOptions::default();
        let lease = serde_json::json!({"lease": "c"});
        let r = answer(&["c"], &[v(true, 2, 1)], &opts);
        assert_eq!(
            r.metadata.map(serde_json::Value::Object),
            Some(lease.clone())
        );
        // Within its limit, but the request was rejected by `a`: no lease was taken, so
        // nothing must be released at stream end.
        let not_charged = Verdict {
            charged: false,
            ..v(true, 3, 0)
        };
        let r = answer(&["c", "a"], &[not_charged, v(false, 0, 1)], &opts);
        assert_eq!((r.statuses[0].code, r.metadata), (Code::Ok, None));
        // A look (0 hits) takes nothing either; a plain limit still returns its metadata.
        let r = answer(&["a", "c"], &[v(true, 4, 1), not_charged], &opts);
        assert_eq!(
            r.metadata.map(serde_json::Value::Object),
            Some(serde_json::json!({"team": {"name": "a", "on_call": "x"}}))
        );
    }

    #[test]
    fn descriptors_without_limits() {
        let r = answer(&["nothing"], &[], &LimiterOptions::default());
        assert_eq!(r.overall, Code::Ok);
        assert_eq!(r.statuses, [Status::no_limit()]);
        assert!(r.headers.is_empty() && r.metadata.is_none());
    }
}
