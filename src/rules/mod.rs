//! The compiled rule tree: immutable once built, shared by every request through one
//! `Arc<RuleSet>`, and replaced whole on reload.
//!
//! Per domain, each level maps a descriptor key to a [`Branch`] holding exact values (hashed),
//! wildcard patterns (in file order, indexed by literal prefix and suffix: see [`wildcard`])
//! and the key-only default. Matching a descriptor costs a few hash lookups per entry, however
//! many rules and patterns there are.

pub(crate) mod budget;
pub(crate) mod dump;
pub mod duration;
pub(crate) mod pattern;
pub(crate) mod policy;
pub(crate) mod position;
pub mod vocab;
pub(crate) mod wildcard;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::algorithm::Limit;
use crate::model::{Entry, Unit};
pub use policy::{Charge, ClockSource, FailurePolicy, HashTag};

pub use budget::{Budget, Expired};
pub use pattern::Pattern;
pub use position::Position;
pub use wildcard::{ByteMap, Wildcard, Wildcards};

/// Every domain of a loaded configuration.
#[derive(Debug, Default)]
pub struct RuleSet {
    pub domains: HashMap<String, Domain>,
    /// The files the rules came from, in load order.
    pub sources: Vec<Source>,
    /// Set by the reload that swaps the rules in, before the swap: `/rlconfig` prints it with
    /// the rules it came with, so a reader never sees new rules beside an old generation.
    pub stamp: Option<LoadStamp>,
}

/// Which load a rule set is: its generation, content hash and load time.
#[derive(Clone, Debug)]
pub struct LoadStamp {
    pub generation: u64,
    pub hash: u64,
    pub at: crate::model::Micros,
}

/// A loaded file.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: Arc<str>,
    pub domain: String,
    /// Content hash (FNV-1a 64) of the file, for `/rlconfig`.
    pub hash: u64,
}

#[derive(Debug)]
pub struct Domain {
    pub name: Arc<str>,
    pub root: Node,
    /// Whether `is_negative_hits` refunds are accepted (YAML `allow_refunds`, off by default:
    /// any client that can reach the port could otherwise erase its own usage).
    pub allow_refunds: bool,
    /// Whether `sluice.v1` reservations are accepted (YAML `allow_reservations`, off by
    /// default: a reservation holds quota, and its settlement gives hits back).
    pub allow_reservations: bool,
    /// Whether a descriptor's `limit` override is accepted (YAML `allow_overrides`, on by
    /// default as Envoy uses them; off for domains whose callers must not choose their limit).
    pub allow_overrides: bool,
    /// YAML `on_store_error`: the failure policy of the domain's limits without their own.
    pub on_store_error: Option<FailurePolicy>,
    /// YAML `redis_hash_tag`: what the Redis Cluster hash tag of the domain's keys covers.
    pub hash_tag: HashTag,
}

#[derive(Debug, Default)]
pub struct Node {
    pub rule: Option<Arc<Rule>>,
    pub children: ByteMap<Branch>,
    /// `value_to_metric` of the descriptor at this node: a wildcard or default match here puts
    /// the request's value in the stats key (envoyproxy/ratelimit's per-level rule).
    pub value_to_metric: bool,
}

/// The nodes under one descriptor key at one level.
#[derive(Debug, Default)]
pub struct Branch {
    pub exact: ByteMap<Node>,
    pub wildcards: Wildcards,
    pub default: Option<Box<Node>>,
}

/// A configured limit at one node of the tree.
#[derive(Debug)]
pub struct Rule {
    /// envoyproxy/ratelimit's key of the rule: `domain.key_value.key2` (stats use it).
    pub full_key: String,
    pub name: Option<String>,
    pub kind: RuleKind,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    /// The stats key depends on request values (`detailed_metric` here, or `value_to_metric`
    /// on the path); otherwise it is `full_key`.
    pub stats_dynamic: bool,
    /// The rule's number in its rule set: the stats registry keeps the rule's counters under
    /// it, so the request path does not look them up by name (see [`crate::stats`]).
    pub id: RuleId,
    pub metadata: Option<serde_json::Value>,
    pub position: Position,
}

#[derive(Debug)]
pub enum RuleKind {
    /// Never limited, never counted.
    Unlimited,
    /// One `rate_limit`.
    Limited(RuleLimit),
    /// `rate_limits`: every limit must allow the request. Each has a distinct name, which is
    /// also part of its storage key.
    Several(Vec<RuleLimit>),
}

impl RuleKind {
    /// The limits of the rule (none when unlimited).
    pub fn limits(&self) -> &[RuleLimit] {
        match self {
            RuleKind::Unlimited => &[],
            RuleKind::Limited(l) => std::slice::from_ref(l),
            RuleKind::Several(ls) => ls,
        }
    }
}

/// One limit of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleLimit {
    /// The limit's name (for `rate_limit`, the rule's name): reported in `current_limit` and
    /// matched by `replaces`.
    pub name: Option<String>,
    pub requests_per_unit: u32,
    /// The unit reported in `current_limit`.
    pub unit: Unit,
    pub limit: Limit,
    /// `None`: the server's default (`--charge-rejected`).
    pub charge: Option<Charge>,
    /// YAML `on_store_error` of the limit; `None`: the domain's, else `--on-store-error`.
    pub on_error: Option<FailurePolicy>,
    /// The limit's part of its storage keys, built by `store::key` on first use.
    pub key_tail: Derived,
}

/// Bytes derived from the rest of a value once, on first use, and kept with it: a cache, so
/// it takes no part in comparing values. A limit's is the same wherever the limit is used (its
/// domain's hash tag and its rule's form are fixed with it).
#[derive(Clone, Debug, Default)]
pub struct Derived(std::sync::OnceLock<Box<[u8]>>);

impl Derived {
    pub fn get_or_init(&self, build: impl FnOnce() -> Box<[u8]>) -> &[u8] {
        self.0.get_or_init(build)
    }
}

impl PartialEq for Derived {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Derived {}

/// A rule's identity: its rule set (numbered per process, from 1) and its index in it (dense,
/// from 0). The default, set 0, is a rule of no rule set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleId {
    pub set: u64,
    pub index: u32,
}

/// Hands out the [`RuleId`]s of one rule set being compiled.
#[derive(Debug)]
pub struct RuleIds {
    set: u64,
    next: u32,
}

impl RuleIds {
    /// The ids of a new rule set, numbered after every earlier one of this process.
    pub fn new() -> Self {
        static SETS: AtomicU64 = AtomicU64::new(1);
        RuleIds {
            set: SETS.fetch_add(1, Ordering::Relaxed),
            next: 0,
        }
    }

    pub fn next_id(&mut self) -> RuleId {
        let index = self.next;
        self.next = self.next.saturating_add(1);
        RuleId {
            set: self.set,
            index,
        }
    }
}

impl Default for RuleIds {
    fn default() -> Self {
        Self::new()
    }
}

/// How one request entry was matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'r> {
    Exact,
    Wildcard { pattern: &'r [u8], shared: bool },
    Default,
}

/// The rule a descriptor matched, and how each entry got there.
#[derive(Debug)]
pub struct Match<'r> {
    pub rule: &'r Arc<Rule>,
    pub steps: Vec<Step<'r>>,
    /// `value_to_metric[i]`: the node matched by entry `i` has `value_to_metric`. Shorter than
    /// `steps` (empty, with no allocation, when none has it): missing entries are `false`.
    pub value_to_metric: Vec<bool>,
}

impl RuleSet {
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }
}

impl Domain {
    /// envoyproxy/ratelimit's matching: at each level an exact key+value first, then wildcard
    /// values in file order, then the key-only default. The limit applies only if the node
    /// matched at the last entry has one.
    pub fn find<'r>(&'r self, entries: &[Entry]) -> Option<Match<'r>> {
        // An unlimited budget never runs out.
        self.find_within(entries, &mut Budget::unlimited())
            .unwrap_or(None)
    }

    /// [`Self::find`], giving up once `budget` runs out.
    pub fn find_within<'r>(
        &'r self,
        entries: &[Entry],
        budget: &mut Budget<'_>,
    ) -> Result<Option<Match<'r>>, Expired> {
        let mut children = &self.root.children;
        let mut steps = Vec::with_capacity(entries.len());
        let mut value_to_metric = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            budget.spend(Budget::bytes(e.key.len() + e.value.len()))?;
            let Some(branch) = children.get(&e.key[..]) else {
                return Ok(None);
            };
            let (node, step) = if let Some(n) = branch.exact.get(&e.value[..]) {
                (n, Step::Exact)
            } else if let Some(w) = branch.wildcards.find_within(&e.value, budget)? {
                (
                    &w.node,
                    Step::Wildcard {
                        pattern: w.pattern.source(),
                        shared: w.share_threshold,
                    },
                )
            } else if let Some(n) = &branch.default {
                (&**n, Step::Default)
            } else {
                return Ok(None);
            };
            steps.push(step);
            if node.value_to_metric {
                value_to_metric.resize(i, false);
                value_to_metric.push(true);
            }
            if i + 1 == entries.len() {
                return Ok(node.rule.as_ref().map(|rule| Match {
                    rule,
                    steps,
                    value_to_metric,
                }));
            }
            if node.children.is_empty() {
                return Ok(None);
            }
            children = &node.children;
        }
        Ok(None)
    }
}

/// FNV-1a, 64 bit: a stable content hash for `/rlconfig` (not for security).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
