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
mod tests;
