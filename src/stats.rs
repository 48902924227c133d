//! Per-rule statistics as envoyproxy/ratelimit keeps them: the stats key of a matched rule
//! (`domain.key_value.key2`, with `detailed_metric` and `value_to_metric`) and its six
//! counters, computed from the store's verdicts (envoyproxy/ratelimit's `base_limiter.go`).
//!
//! Counters are plain atomics, exported by [`crate::metrics`] at scrape time: the request path
//! pays an atomic add, not a metrics-library lookup. A rule whose stats key does not depend on
//! the request has its counters cached here under its [`RuleId`] (one lookup by name per rule
//! per rule set; then an index into a table).
//! Keys built from request values are capped: past `max_dynamic` of them, a request's stats go
//! to its rule's own key and the overflow is counted, so hostile values cannot grow memory or
//! the scrape (envoyproxy/ratelimit #275, #1132).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use arc_swap::ArcSwap;
use opentelemetry::KeyValue;

use crate::model::{display_bytes, Entry};
use crate::rules::{Rule, RuleId, Step};

/// The counters of one stats key, in [`COUNTER_NAMES`] order.
pub struct RuleCounters {
    pub domain: Arc<str>,
    pub key: Arc<str>,
    /// `domain` and `key` labels, built once.
    pub attrs: [KeyValue; 2],
    values: [AtomicU64; 6],
}

impl std::fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RuleCounters({})", self.key)
    }
}

pub(crate) const TOTAL_HITS: usize = 0;
pub(crate) const OVER_LIMIT: usize = 1;
pub(crate) const NEAR_LIMIT: usize = 2;
pub(crate) const WITHIN_LIMIT: usize = 3;
pub(crate) const SHADOW_MODE: usize = 4;
pub(crate) const OVER_LIMIT_WITH_LOCAL_CACHE: usize = 5;

/// envoyproxy/ratelimit's names of the per-rule counters, in index order.
pub(crate) const COUNTER_NAMES: [&str; 6] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
    "over_limit_with_local_cache",
];

impl RuleCounters {
    fn new(domain: Arc<str>, key: Arc<str>) -> Self {
        RuleCounters {
            attrs: [
                KeyValue::new("domain", domain.clone()),
                KeyValue::new("key", key.clone()),
            ],
            domain,
            key,
            values: Default::default(),
        }
    }

    pub fn get(&self, i: usize) -> u64 {
        self.values[i].load(Ordering::Relaxed)
    }

    fn add(&self, i: usize, n: u64) {
        if n > 0 {
            self.values[i].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// What one descriptor's decision was, for its counters.
#[derive(Clone, Copy, Debug)]
pub struct Observation {
    pub hits: u64,
    /// The limit's requests per window.
    pub limit: u64,
    pub allowed: bool,
    pub charged: bool,
    /// The verdict's remaining: after this request when charged, without it otherwise.
    pub remaining: u64,
    /// The rule is in shadow mode.
    pub shadow: bool,
    /// Answered by the local over-limit cache.
    pub cached: bool,
}

/// Every stats key seen since start, across reloads (so counters of unchanged rules go on).
pub struct StatsRegistry {
    near_limit_ratio: f32,
    max_dynamic: usize,
    keys: RwLock<HashMap<Arc<str>, Arc<RuleCounters>>>,
    dynamic: AtomicUsize,
    overflow: AtomicU64,
    /// The counters of the newest rule set's rules, by [`RuleId::index`].
    rules: ArcSwap<RuleSlots>,
}

/// One rule set's counters by rule index, filled on first use.
#[derive(Default)]
struct RuleSlots {
    set: u64,
    slots: Box<[OnceLock<Arc<RuleCounters>>]>,
}

impl RuleSlots {
    /// The slot of `id` when this table is of its rule set and long enough.
    fn get(&self, id: RuleId) -> Option<&OnceLock<Arc<RuleCounters>>> {
        if self.set != id.set {
            return None;
        }
        self.slots.get(id.index as usize)
    }
}

impl StatsRegistry {
    pub fn new(near_limit_ratio: f32, max_dynamic: usize) -> Self {
        StatsRegistry {
            near_limit_ratio,
            max_dynamic,
            keys: RwLock::new(HashMap::new()),
            dynamic: AtomicUsize::new(0),
            overflow: AtomicU64::new(0),
            rules: ArcSwap::default(),
        }
    }

    /// Requests whose stats key was dropped by the cap (counted on their rule's key instead).
    pub fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }

    /// Every stats key with its counters (for export).
    pub fn snapshot(&self) -> Vec<Arc<RuleCounters>> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.values().cloned().collect()
    }

    /// The counters of `key`, created if needed; `None` when `capped` and the cap is reached.
    fn entry(&self, domain: &Arc<str>, key: &str, capped: bool) -> Option<Arc<RuleCounters>> {
        {
            let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = keys.get(key) {
                return Some(c.clone());
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = keys.get(key) {
            return Some(c.clone());
        }
        if capped {
            if self.dynamic.load(Ordering::Relaxed) >= self.max_dynamic {
                return None;
            }
            self.dynamic.fetch_add(1, Ordering::Relaxed);
        }
        let key: Arc<str> = key.into();
        let c = Arc::new(RuleCounters::new(domain.clone(), key.clone()));
        keys.insert(key, c.clone());
        Some(c)
    }

    /// The counters of a key that comes from the config (not capped).
    pub fn fixed(&self, domain: &Arc<str>, key: &str) -> Arc<RuleCounters> {
        self.entry(domain, key, false)
            .unwrap_or_else(|| Arc::new(RuleCounters::new(domain.clone(), key.into())))
    }

    /// The counters of a rule's own key (`full_key`), cached under the rule's id.
    pub fn of_rule(&self, domain: &Arc<str>, rule: &Rule) -> Arc<RuleCounters> {
        if let Some(slot) = self.rules.load().get(rule.id) {
            return slot
                .get_or_init(|| self.fixed(domain, &rule.full_key))
                .clone();
        }
        self.of_rule_uncached(domain, rule)
    }

    /// Sizes the counter table for a rule set about to be published, on the reload's thread.
    /// Otherwise the first request to meet a rule beyond the table rebuilds it (a slot per
    /// rule: 16,384 for 10,000 rules), on a serving thread, once per power of two. The slots
    /// stay empty: a rule's counters are still made on its first use, so unused rules export
    /// nothing.
    pub fn prepare(&self, rules: &crate::rules::RuleSet) {
        let all = rules.all_rules();
        let Some(set) = all.first().map(|r| r.id.set) else {
            return;
        };
        let last = all.iter().map(|r| r.id.index).max().unwrap_or(0);
        let current = self.rules.load_full();
        if set == 0 || set <= current.set {
            return;
        }
        let len = (last as usize + 1).next_power_of_two().max(64);
        let slots = (0..len).map(|_| OnceLock::new()).collect();
        let _ = self
            .rules
            .compare_and_swap(&current, Arc::new(RuleSlots { set, slots }));
    }

    /// [`Self::of_rule`] for a rule beyond the table: by name, then the table is replaced by
    /// one that holds it when its rule set is the newest seen (a reload, or a higher index).
    /// Rules of an older set (requests still on it) stay uncached.
    #[cold]
    fn of_rule_uncached(&self, domain: &Arc<str>, rule: &Rule) -> Arc<RuleCounters> {
        let counters = self.fixed(domain, &rule.full_key);
        let id = rule.id;
        let current = self.rules.load_full();
        if id.set == 0 || id.set < current.set {
            return counters;
        }
        let len = (id.index as usize + 1).next_power_of_two().max(64);
        let slots: Box<[OnceLock<Arc<RuleCounters>>]> = (0..len)
            .map(|i| {
                let kept = (current.set == id.set)
                    .then(|| current.slots.get(i).and_then(OnceLock::get))
                    .flatten();
                kept.map_or_else(OnceLock::new, |c| OnceLock::from(c.clone()))
            })
            .collect();
        let _ = slots[id.index as usize].set(counters.clone());
        // Lost to a concurrent replacement: harmless, the next miss tries again.
        let _ = self
            .rules
            .compare_and_swap(&current, Arc::new(RuleSlots { set: id.set, slots }));
        counters
    }

    /// The counters of a key built from request values; past the cap, `fallback`'s.
    pub fn dynamic(
        &self,
        domain: &Arc<str>,
        key: &str,
        fallback: impl FnOnce() -> Arc<RuleCounters>,
    ) -> Arc<RuleCounters> {
        match self.entry(domain, key, true) {
            Some(c) => c,
            None => {
                self.overflow.fetch_add(1, Ordering::Relaxed);
                fallback()
            }
        }
    }

    /// Adds one descriptor's decision to `c` (envoyproxy/ratelimit's
    /// `GetResponseDescriptorStatus`). A rejected verdict does not say how far below the
    /// limit the count was, so all its hits count as over the limit (exact for single hits).
    pub fn record(&self, c: &RuleCounters, o: Observation) {
        let rpu = o.limit;
        // uint32(float32(rpu) * ratio), as there.
        let near = ((rpu as f32) * self.near_limit_ratio).floor() as u64;
        c.add(TOTAL_HITS, o.hits);
        if !o.allowed {
            c.add(OVER_LIMIT, o.hits);
            // As envoyproxy/ratelimit: counted in over_limit too.
            if o.cached {
                c.add(OVER_LIMIT_WITH_LOCAL_CACHE, o.hits);
            }
            if o.shadow {
                c.add(SHADOW_MODE, o.hits);
            }
            return;
        }
        let used = rpu.saturating_sub(o.remaining);
        let (before, after) = if o.charged {
            (used.saturating_sub(o.hits), used)
        } else {
            (used, used.saturating_add(o.hits))
        };
        if after > near {
            c.add(
                NEAR_LIMIT,
                if before >= near { o.hits } else { after - near },
            );
        }
        c.add(WITHIN_LIMIT, o.hits);
    }
}

/// The stats key of a descriptor that matched `rule` through `steps`, when it depends on the
/// request (`rule.stats_dynamic`), as envoyproxy/ratelimit builds it: with `detailed_metric`,
/// every entry's actual value (`key_value`); otherwise per level, the actual value where
/// `value_to_metric` applies to a wildcard or default match, the pattern for other wildcard
/// matches, nothing for other default matches. A `share_threshold` wildcard always shows its
/// pattern.
pub(crate) fn dynamic_key(
    domain: &str,
    entries: &[Entry],
    steps: &[Step<'_>],
    value_to_metric: &[bool],
    detailed: bool,
) -> String {
    let mut s = String::with_capacity(domain.len() + 32 * entries.len());
    s.push_str(domain);
    for (i, e) in entries.iter().enumerate() {
        s.push('.');
        s.push_str(&display_bytes(&e.key));
        let vtm = value_to_metric.get(i).copied().unwrap_or(false);
        let shown: Option<&[u8]> = match steps.get(i).copied().unwrap_or(Step::Exact) {
            Step::Wildcard {
                pattern,
                shared: true,
            } => Some(pattern),
            _ if detailed => Some(&e.value),
            Step::Exact => Some(&e.value),
            Step::Wildcard { .. } if vtm => Some(&e.value),
            Step::Wildcard { pattern, .. } => Some(pattern),
            Step::Default if vtm => Some(&e.value),
            Step::Default => None,
        };
        if let Some(v) = shown {
            s.push('_');
            s.push_str(&display_bytes(v));
        }
    }
    s
}

/// The stats key of a limit override on a descriptor that matched no rule: the entry keys
/// only (`domain.key1.key2`); envoyproxy/ratelimit adds the values, which would put
/// request values in labels unasked.
pub(crate) fn override_key(domain: &str, entries: &[Entry]) -> String {
    let steps = vec![Step::Default; entries.len()];
    dynamic_key(domain, entries, &steps, &[], false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{compile, ConfigFile, LoadOptions};
    use crate::rules::RuleSet;

    /// A rule's counters are cached under its id; a later rule set's rule of the same key
    /// shares them, and a rule of an older set still in use finds its own by name.
    #[test]
    fn rule_counters_are_cached_by_rule_id() {
        let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let load = || {
            let file = ConfigFile {
                path: "f.yaml".into(),
                content: yaml.into(),
            };
            compile(&[file], LoadOptions::default()).unwrap()
        };
        let sorted = |s: &RuleSet| {
            let mut v: Vec<(String, RuleId)> = s
                .all_rules()
                .iter()
                .map(|r| (r.full_key.clone(), r.id))
                .collect();
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        let (old, new) = (load(), load());
        let (o, n) = (sorted(&old), sorted(&new));
        assert_eq!(
            o.iter().map(|r| &r.0[..]).collect::<Vec<_>>(),
            ["d.a", "d.b"]
        );
        assert!(n[0].1.set > o[0].1.set);
        let r = StatsRegistry::new(0.8, 10);
        let d: Arc<str> = "d".into();
        let rule = |s: &RuleSet, key: &str| {
            let all = s.all_rules();
            let found = all.iter().find(|r| r.full_key == key).unwrap();
            r.of_rule(&d, found)
        };
        let a = rule(&old, "d.a");
        assert_eq!(&*a.key, "d.a");
        assert!(Arc::ptr_eq(&a, &rule(&old, "d.a")));
        assert!(r.rules.load().get(o[0].1).and_then(OnceLock::get).is_some());
        // The reload's rules take over the table and share the counters of unchanged keys.
        assert!(Arc::ptr_eq(&a, &rule(&new, "d.a")));
        assert!(r.rules.load().get(n[0].1).and_then(OnceLock::get).is_some());
        // A request still on the old set counts on the right key, without taking the table back.
        assert_eq!(&*rule(&old, "d.b").key, "d.b");
        assert_eq!(r.rules.load().set, n[0].1.set);
        assert_eq!(&*rule(&new, "d.b").key, "d.b");
        assert!(r.rules.load().get(n[1].1).and_then(OnceLock::get).is_some());
    }

    /// A rule set prepared before it serves finds its table sized: its requests fill slots
    /// and never replace the table; unused rules get no counters.
    #[test]
    fn a_prepared_rule_set_never_rebuilds_the_table() {
        let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let file = ConfigFile {
            path: "f.yaml".into(),
            content: yaml.into(),
        };
        let set = compile(&[file], LoadOptions::default()).unwrap();
        let r = StatsRegistry::new(0.8, 10);
        r.prepare(&set);
        let table = r.rules.load_full();
        let all = set.all_rules();
        assert_eq!(table.set, all[0].id.set);
        assert!(all.iter().all(|rule| table.get(rule.id).is_some()));
        assert!(r.snapshot().is_empty());
        let d: Arc<str> = "d".into();
        for rule in &all {
            r.of_rule(&d, rule);
        }
        assert!(Arc::ptr_eq(&table, &r.rules.load_full()));
        assert_eq!(r.snapshot().len(), 2);
        // Preparing the same set again changes nothing.
        r.prepare(&set);
        assert!(Arc::ptr_eq(&table, &r.rules.load_full()));
    }

    fn e(k: &str, v: &str) -> Entry {
        Entry {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn keys_follow_envoyproxy_ratelimit() {
        let entries = [e("path", "/api/v1"), e("user", "alice")];
        let wild = Step::Wildcard {
            pattern: b"/api/*",
            shared: false,
        };
        let shared = Step::Wildcard {
            pattern: b"/api/*",
            shared: true,
        };
        let k = |steps: &[Step<'_>], vtm: &[bool], detailed| {
            dynamic_key("d", &entries, steps, vtm, detailed)
        };
        assert_eq!(k(&[wild, Step::Default], &[], false), "d.path_/api/*.user");
        assert_eq!(
            k(&[wild, Step::Default], &[false, true], false),
            "d.path_/api/*.user_alice"
        );
        assert_eq!(
            k(&[wild, Step::Default], &[true], false),
            "d.path_/api/v1.user"
        );
        assert_eq!(
            k(&[wild, Step::Default], &[], true),
            "d.path_/api/v1.user_alice"
        );
        assert_eq!(
            k(&[shared, Step::Default], &[], true),
            "d.path_/api/*.user_alice"
        );
        assert_eq!(
            k(&[Step::Exact, Step::Exact], &[], false),
            "d.path_/api/v1.user_alice"
        );
        assert_eq!(override_key("d", &entries), "d.path.user");
    }

    #[test]
    fn counters_follow_the_base_limiter() {
        let r = StatsRegistry::new(0.8, 10);
        let d: Arc<str> = "d".into();
        let c = r.dynamic(&d, "d.k", || unreachable!());
        let obs = |remaining, allowed, hits| Observation {
            hits,
            limit: 10,
            allowed,
            charged: allowed,
            remaining,
            shadow: false,
            cached: false,
        };
        // 10 per window, near at 8: hits 1..=10 allowed (the 9th and 10th are near), then over.
        for i in 1..=10u64 {
            r.record(&c, obs(10 - i, true, 1));
        }
        r.record(&c, obs(0, false, 1));
        assert_eq!(c.get(TOTAL_HITS), 11);
        assert_eq!(c.get(WITHIN_LIMIT), 10);
        assert_eq!(c.get(NEAR_LIMIT), 2);
        assert_eq!(c.get(OVER_LIMIT), 1);
        // Crossing the threshold with several hits counts only the part beyond it.
        let c2 = r.dynamic(&d, "d.k2", || unreachable!());
        r.record(&c2, obs(1, true, 9));
        assert_eq!(c2.get(NEAR_LIMIT), 1);
    }

    #[test]
    fn dynamic_keys_are_capped() {
        let r = StatsRegistry::new(0.8, 2);
        let d: Arc<str> = "d".into();
        let fallback = Arc::new(RuleCounters::new(d.clone(), "d.rule".into()));
        for v in ["a", "b", "c", "d"] {
            r.dynamic(&d, &format!("d.k_{v}"), || fallback.clone());
        }
        assert_eq!(r.snapshot().len(), 2);
        assert_eq!(r.overflow(), 2);
        // Known keys are still found past the cap.
        assert_eq!(&*r.dynamic(&d, "d.k_a", || fallback.clone()).key, "d.k_a");
    }
}
