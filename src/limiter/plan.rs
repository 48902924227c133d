//! Stage 2, plan: the resolved descriptors of a request -> the checks the store decides, each
//! with its storage key (built in [`key`]), grouped by descriptor. A caller (RLS, the JSON
//! API, later RLQS or the native API) can build a [`Plan`], hand [`Plan::checks`] to any
//! [`Store`](crate::store::Store), and assemble its own answer from the verdicts.

use std::ops::Range;

use super::resolve::{resolve, Resolved};
use super::{LimitError, LimiterOptions};
use crate::algorithm::{distinct, Ask};
use crate::model::Request;
use crate::rules::{Domain, RuleLimit, RuleSet, Step};
use crate::store::{key, Charge, Check, Deadline};

/// One check of the plan.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The descriptor's index in the request.
    pub descriptor: usize,
    /// The limit's index among its descriptor's [`Resolved::limits`].
    pub limit: usize,
    /// The descriptor is in quota mode.
    pub quota: bool,
    /// The hash of the counted value (`distinct`), else 0.
    pub value: u64,
    /// Its storage key in [`Plan::key`].
    key: Range<usize>,
}

/// A request resolved and ready for the store.
pub struct Plan<'a> {
    pub request: &'a Request,
    /// `None`: the domain has no rules.
    pub domain: Option<&'a Domain>,
    /// One per descriptor.
    pub resolved: Vec<Resolved<'a>>,
    /// Grouped by descriptor, in request order.
    pub planned: Vec<Planned>,
    /// Every key in one buffer (one allocation per request, not one per key).
    keys: Vec<u8>,
    /// Decide without charging (the native API's `dry_run`): every check's ask says so.
    pub dry_run: bool,
    quota_mode: bool,
    default_charge: Charge,
}

impl<'a> Plan<'a> {
    /// Resolves `req` against `rules` and builds its checks (matching gives up by `deadline`).
    pub fn new(
        rules: &'a RuleSet,
        req: &'a Request,
        opts: &LimiterOptions,
        deadline: Deadline,
    ) -> Result<Self, LimitError> {
        let domain = rules.domain(&req.domain);
        let resolved = resolve(domain, req, deadline)?;
        let mut plan = Plan {
            request: req,
            domain,
            resolved,
            planned: Vec::new(),
            keys: Vec::new(),
            dry_run: false,
            quota_mode: opts.quota_mode,
            default_charge: if opts.charge_rejected {
                Charge::Always
            } else {
                Charge::IfAdmitted
            },
        };
        if let Some(domain) = domain {
            // Sized once: the checks, and their keys at about what each is long.
            let mut checks = 0;
            let mut bytes = 0;
            for (r, d) in plan.resolved.iter().zip(&req.descriptors) {
                let n = r.limits().len();
                let entries: usize = d
                    .entries
                    .iter()
                    .map(|e| e.key.len() + e.value.len() + 2)
                    .sum();
                checks += n;
                bytes += n * (opts.key_prefix.len() + req.domain.len() + entries + 40);
            }
            plan.planned.reserve_exact(checks);
            plan.keys.reserve(bytes);
            for i in 0..req.descriptors.len() {
                plan.add_checks(domain, i, &opts.key_prefix);
            }
        }
        Ok(plan)
    }

    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    fn add_checks(&mut self, domain: &Domain, i: usize, prefix: &[u8]) {
        let Resolved::Limited {
            steps,
            limits,
            named,
            ..
        } = &self.resolved[i]
        else {
            return;
        };
        let d = &self.request.descriptors[i];
        let quota = self.quota(i);
        let shared = |j: usize| match steps.get(j) {
            Some(Step::Wildcard {
                pattern,
                shared: true,
            }) => Some(*pattern),
            _ => None,
        };
        // The descriptor's part of the first key that does not count values, which the next
        // such limit copies rather than escapes again.
        let mut head: Option<Range<usize>> = None;
        for (l, limit) in limits.iter().enumerate() {
            let start = self.keys.len();
            let name = if *named { limit.name.as_deref() } else { None };
            let counts = limit.limit.algorithm().counts_values();
            let tail = limit
                .key_tail
                .get_or_init(|| key::limit_tail(domain.hash_tag, &limit.limit, name));
            match head.clone() {
                Some(h) if !counts => {
                    self.keys.extend_from_within(h);
                    self.keys.extend_from_slice(tail);
                }
                _ => {
                    let end = key::append_descriptor(
                        &mut self.keys,
                        prefix,
                        &self.request.domain,
                        domain.hash_tag,
                        &d.entries,
                        shared,
                        counts,
                        tail,
                    );
                    if !counts && head.is_none() {
                        head = Some(start..end);
                    }
                }
            }
            let value = match d.entries.last() {
                Some(e) if limit.limit.algorithm().counts_values() => distinct::hash(&e.value),
                _ => 0,
            };
            self.planned.push(Planned {
                descriptor: i,
                limit: l,
                quota,
                value,
                key: start..self.keys.len(),
            });
        }
    }

    /// Whether descriptor `i` is in quota mode: only limited descriptors take part; global
    /// quota mode applies to override limits too (they have no rule), as upstream.
    pub fn quota(&self, i: usize) -> bool {
        matches!(self.resolved[i], Resolved::Limited { .. })
            && (self.quota_mode || self.resolved[i].rule().is_some_and(|r| r.quota_mode))
    }

    pub fn key(&self, p: &Planned) -> &[u8] {
        &self.keys[p.key.clone()]
    }

    pub fn limit(&self, p: &Planned) -> &RuleLimit {
        &self.resolved[p.descriptor].limits()[p.limit]
    }

    /// The checks for [`Store::decide`](crate::store::Store::decide), in plan order.
    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    pub fn checks(&self) -> Vec<Check<'_>> {
        let on_store_error = self.domain.and_then(|d| d.on_store_error);
        self.planned
            .iter()
            .map(|p| {
                let d = &self.request.descriptors[p.descriptor];
                let limit = self.limit(p);
                Check {
                    key: self.key(p),
                    limit: &limit.limit,
                    ask: Ask {
                        hits: d.hits,
                        refund: d.refund,
                        value: p.value,
                        dry_run: self.dry_run,
                    },
                    charge: limit.charge.unwrap_or(self.default_charge),
                    group: p.descriptor as u32,
                    quota: p.quota,
                    on_error: limit.on_error.or(on_store_error),
                }
            })
            .collect()
    }

    /// Each limited descriptor with the range of its checks in [`Self::planned`].
    pub fn groups(&self) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
        let mut from = 0;
        std::iter::from_fn(move || {
            let first = self.planned.get(from)?;
            let i = first.descriptor;
            let to = from
                + self.planned[from..]
                    .iter()
                    .take_while(|p| p.descriptor == i)
                    .count();
            let range = from..to;
            from = to;
            Some((i, range))
        })
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
    rate_limit: {unit: minute, requests_per_unit: 5, charge: always}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: u
    rate_limit: {unlimited: true}
  - key: many
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: burst}
      - {unit: hour, requests_per_unit: 100, name: hourly}
  - key: seen
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: distinct}
"#;

    #[test]
    fn checks_follow_the_descriptors() {
        let rules = rules(CONFIG);
        let req = request(vec![
            d(&[("many", "x")]),
            d(&[("u", "")]),
            d(&[("a", "1")]),
            d(&[("q", "1")]),
        ]);
        let plan = Plan::new(
            &rules,
            &req,
            &LimiterOptions::default(),
            crate::store::Deadline::NONE,
        )
        .unwrap();
        let checks = plan.checks();
        assert_eq!(
            checks.iter().map(|c| c.group).collect::<Vec<_>>(),
            [0, 0, 2, 3]
        );
        assert_eq!(
            checks
                .iter()
                .map(|c| (c.charge, c.quota))
                .collect::<Vec<_>>(),
            [
                (Charge::IfAdmitted, false),
                (Charge::IfAdmitted, false),
                (Charge::Always, false),
                (Charge::IfAdmitted, true)
            ]
        );
        let key = |i: usize| String::from_utf8(checks[i].key.to_vec()).unwrap();
        assert!(
            key(0).contains("burst") && key(1).contains("hourly"),
            "named limits"
        );
        // The second limit's key copies the descriptor's part of the first's.
        assert!(
            key(0).starts_with("sluice:v2:{d|many=x}:")
                && key(1).starts_with("sluice:v2:{d|many=x}:")
        );
        assert!(key(2).starts_with("sluice:v2:{d|a=1}:"));
        assert_eq!(
            plan.groups().collect::<Vec<_>>(),
            [(0, 0..2), (2, 2..3), (3, 3..4)]
        );
        assert!(
            !plan.quota(1),
            "unlimited descriptors are never in quota mode"
        );
    }

    #[test]
    fn distinct_counts_the_last_value_outside_the_key() {
        let rules = rules(CONFIG);
        let req = request(vec![
            d(&[("seen", "p"), ("user", "alice")]),
            d(&[("seen", "p"), ("user", "bob")]),
        ]);
        let opts = LimiterOptions {
            key_prefix: b"pre:".to_vec(),
            charge_rejected: true,
            quota_mode: true,
            ..LimiterOptions::default()
        };
        let plan = Plan::new(&rules, &req, &opts, crate::store::Deadline::NONE).unwrap();
        let checks = plan.checks();
        assert_eq!(checks[0].key, checks[1].key);
        assert!(checks[0].key.starts_with(b"pre:sluice:v2:{d|seen=p|user#}"));
        assert_ne!(checks[0].ask.value, checks[1].ask.value);
        assert!(checks.iter().all(|c| c.charge == Charge::Always && c.quota));
    }

    #[test]
    fn an_unknown_domain_has_nothing_to_check() {
        let rules = rules(CONFIG);
        let mut req = request(vec![d(&[("a", "1")])]);
        req.domain = "elsewhere".into();
        let plan = Plan::new(
            &rules,
            &req,
            &LimiterOptions::default(),
            crate::store::Deadline::NONE,
        )
        .unwrap();
        assert!(plan.checks().is_empty());
        assert_eq!(plan.resolved.len(), 1);
    }
}
