//! Raw YAML -> validated, compiled [`RuleSet`]. Collects every error it can find instead of
//! stopping at the first; a load either yields a whole new rule set or changes nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_saphyr::Spanned;

use super::error::{ConfigError, ConfigErrors, Position};
use super::files::ConfigFile;
use super::raw::{RawDescriptor, RawFile, RawRateLimit};
use crate::algorithm::{Algorithm, Calendar, Limit, MAX_WINDOW};
use crate::model::{Micros, Unit, MICROS_PER_MILLI, MICROS_PER_SEC};
use crate::rules::{
    content_hash, Branch, Domain, Node, Pattern, Rule, RuleKind, RuleLimit, RuleSet, Source,
    Wildcard,
};
use crate::store::key::HashTag;
use crate::store::{Charge, FailurePolicy};

/// Options of a load.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Merge files that name the same domain instead of rejecting them.
    pub merge_domains: bool,
}

/// Compiles already-read files into one rule set.
pub fn compile(files: &[ConfigFile], opts: LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let mut errors = Vec::new();
    let mut set = RuleSet::default();
    let mut first_seen: HashMap<String, Position> = HashMap::new();
    for (file, parsed) in files.iter().zip(parse_all(files)) {
        let first_error = errors.len();
        let raw = match parsed {
            Ok(Some(raw)) => raw,
            // An empty file (or one holding only comments) defines nothing.
            Ok(None) => {
                errors.push(ConfigError::new(
                    Position::start_of(&file.path),
                    "config file cannot have empty domain",
                ));
                continue;
            }
            Err(e) => {
                errors.push(yaml_error(&file.path, &e));
                continue;
            }
        };
        let mut cx = Cx {
            file: &file.path,
            errors: &mut errors,
            value_to_metric_above: false,
        };
        let Some(domain) = raw
            .domain
            .as_ref()
            .filter(|d| !d.value.is_empty())
            .map(|d| (d.value.clone(), cx.at(d)))
        else {
            let pos = raw
                .domain
                .as_ref()
                .map_or_else(|| Position::start_of(cx.file), |d| cx.at(d));
            cx.err(pos, "config file cannot have empty domain");
            continue;
        };
        let (name, pos) = domain;
        let merged = first_seen.contains_key(&name);
        let pos_of_domain = pos.clone();
        if let Some(prev) = first_seen.get(&name) {
            if !opts.merge_domains {
                cx.err(
                    pos,
                    format!(
                        "duplicate domain '{name}' (first defined at {prev}); pass --merge-domains to merge files of one domain"
                    ),
                );
                continue;
            }
        } else {
            first_seen.insert(name.clone(), pos);
        }
        let domain = set.domains.entry(name.clone()).or_insert_with(|| Domain {
            name: name.as_str().into(),
            root: Node::default(),
            allow_refunds: false,
            allow_overrides: true,
            on_store_error: None,
            hash_tag: HashTag::Descriptor,
        });
        // Merged files: overrides are refused when any file of the domain refuses them.
        domain.allow_overrides &= raw.allow_overrides;
        // Merged files: refunds are allowed when any file of the domain allows them.
        domain.allow_refunds |= raw.allow_refunds;
        if let Some(p) = &raw.on_store_error {
            if let Some(policy) = cx.policy(p) {
                match domain.on_store_error {
                    Some(other) if other != policy => {
                        let at = cx.at(p);
                        cx.err(
                            at,
                            "merged files of one domain set different on_store_error",
                        );
                    }
                    _ => domain.on_store_error = Some(policy),
                }
            }
        }
        let tag = match &raw.redis_hash_tag {
            None => Some(HashTag::Descriptor),
            Some(t) => match t.value.as_str() {
                "descriptor" => Some(HashTag::Descriptor),
                "domain" => Some(HashTag::Domain),
                other => {
                    let at = cx.at(t);
                    cx.err(
                        at,
                        format!("invalid redis_hash_tag '{other}' (expected descriptor or domain)"),
                    );
                    None
                }
            },
        };
        if let Some(tag) = tag {
            // The keys of one domain share one layout: merged files must agree.
            if merged && tag != domain.hash_tag {
                let at = raw
                    .redis_hash_tag
                    .as_ref()
                    .map_or(pos_of_domain, |t| cx.at(t));
                cx.err(
                    at,
                    "merged files of one domain set different redis_hash_tag",
                );
            } else {
                domain.hash_tag = tag;
            }
        }
        if let Some(descriptors) = &raw.descriptors {
            cx.descriptors(&mut domain.root, &name, descriptors);
        }
        // A node's own errors are found after its children's: report them in file order.
        errors[first_error..].sort_by_key(|e| (e.position.line, e.position.column));
        set.sources.push(Source {
            path: file.path.clone(),
            domain: name,
            hash: content_hash(file.content.as_bytes()),
        });
    }
    if errors.is_empty() {
        crate::rules::wildcard::prepare(&set);
        Ok(set)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Stack for parsing one file: serde-saphyr recurses once per YAML level (up to its depth
/// budget of 64), and at that depth an unoptimized build needs more than the 2 MiB of a
/// tokio worker or test thread (found by the `config` fuzz target).
const PARSE_STACK: usize = 64 << 20;

type Parsed = Result<Option<RawFile>, serde_saphyr::Error>;

/// Parses every file, in parallel (parsing is most of a load's time: about 100,000
/// instructions per rule), on threads with [`PARSE_STACK`]; inline if no thread can start.
fn parse_all(files: &[ConfigFile]) -> Vec<Parsed> {
    let parse = |content: &str| {
        serde_saphyr::from_str_with_options::<Option<RawFile>>(content, options(content))
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Parsed>>> = files.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(file) = files.get(i) else { break };
        let parsed = parse(&file.content);
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(parsed);
    };
    std::thread::scope(|scope| {
        let started = (0..workers)
            .filter(|_| {
                std::thread::Builder::new()
                    .name("sluice-config-parse".into())
                    .stack_size(PARSE_STACK)
                    .spawn_scoped(scope, work)
                    .is_ok()
            })
            .count();
        if started == 0 {
            work();
        }
    });
    slots
        .into_iter()
        .zip(files)
        .map(|(slot, file)| {
            slot.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| parse(&file.content))
        })
        .collect()
}

/// serde-saphyr's budget scaled to the file: its default (250,000 nodes, 1,000,000 events)
/// caps a file at about 25,000 rules. Nodes and events are bounded by the input's size (at
/// most one node per byte, a few events per node), so the work stays linear in the file; the
/// limits that stop alias and anchor bombs keep their defaults.
fn options(content: &str) -> serde_saphyr::Options {
    let len = content.len();
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: len.max(250_000),
            max_events: len.saturating_mul(3).max(1_000_000),
        },
    }
}

/// serde-saphyr's message, without its own location (we print ours in front).
fn yaml_error(file: &Arc<str>, e: &serde_saphyr::Error) -> ConfigError {
    let pos = e
        .location()
        .map_or_else(|| Position::start_of(file), |l| Position::at(file, l));
    let text = e.to_string();
    let mut msg = text.lines().next().unwrap_or("invalid YAML").trim();
    msg = msg.strip_prefix("error:").unwrap_or(msg).trim();
    if let Some(rest) = msg.strip_prefix("line ") {
        // "line N column M: message"
        if let Some((_, m)) = rest.split_once(": ") {
            msg = m.trim();
        }
    }
    ConfigError::new(pos, friendlier(msg))
}

/// Maps serde's wording onto the config's vocabulary.
fn friendlier(msg: &str) -> String {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some((name, expected)) = rest.split_once('`') {
            let expected = expected
                .trim_start_matches(", ")
                .replace("expected one of", "expected one of:");
            return format!("unknown key '{name}' ({expected})");
        }
    }
    match msg {
        "expected mapping start" => {
            "expected a map here (descriptors and rate_limit are maps of key: value)".into()
        }
        "expected string scalar" => {
            "expected a string here (keys and values must be strings)".into()
        }
        "expected sequence start" => "expected a list here".into(),
        m if m.starts_with("duplicate mapping key: ") => {
            let k = m.trim_start_matches("duplicate mapping key: ");
            let k = k.split(", set DuplicateKeyPolicy").next().unwrap_or(k);
            format!("duplicate key '{k}' in one map")
        }
        m if m.starts_with("invalid u32") => {
            format!("{m}: expected a whole number from 0 to 4294967295")
        }
        m => m
            .replace("struct RawFile", "a map with `domain` and `descriptors`")
            .replace("struct RawRateLimit", "a rate_limit map")
            .replace("struct RawReplaces", "a map with `name`")
            .replace("struct RawDescriptor", "a descriptor map"),
    }
}

struct Cx<'a> {
    file: &'a Arc<str>,
    errors: &'a mut Vec<ConfigError>,
    /// A descriptor on the current path has `value_to_metric`.
    value_to_metric_above: bool,
}

impl Cx<'_> {
    fn at<T>(&self, s: &Spanned<T>) -> Position {
        Position::at(self.file, s.referenced)
    }

    fn err(&mut self, pos: Position, msg: impl Into<String>) {
        self.errors.push(ConfigError::new(pos, msg));
    }

    fn descriptors(&mut self, parent: &mut Node, path: &str, list: &[Spanned<RawDescriptor>]) {
        for item in list {
            self.descriptor(parent, path, item);
        }
    }

    fn descriptor(&mut self, parent: &mut Node, path: &str, item: &Spanned<RawDescriptor>) {
        let d = &item.value;
        let pos = self.at(item);
        let key = match &d.key {
            Some(k) if !k.value.is_empty() => k.value.clone(),
            Some(k) => {
                let p = self.at(k);
                self.err(p, "descriptor has empty key");
                return;
            }
            None => {
                self.err(pos, "descriptor has empty key");
                return;
            }
        };
        let value = d
            .value
            .as_ref()
            .map(|v| v.value.clone())
            .filter(|v| !v.is_empty());
        let final_key = match &value {
            Some(v) => format!("{key}_{v}"),
            None => key.clone(),
        };
        let full_key = format!("{path}.{final_key}");
        let pattern = value
            .as_deref()
            .and_then(|v| Pattern::compile(v.as_bytes()));
        let share = d.share_threshold.as_ref().is_some_and(|s| s.value);
        if share && pattern.is_none() {
            let p = d
                .share_threshold
                .as_ref()
                .map_or(pos.clone(), |s| self.at(s));
            self.err(
                p,
                format!("share_threshold can only be used with a wildcard value (containing '*'), but '{full_key}' has none"),
            );
        }

        if let Some(m) = d.metadata.as_ref().filter(|m| !m.value.is_object()) {
            let p = self.at(m);
            self.err(p, "metadata must be a map of key: value");
        }

        let above = self.value_to_metric_above;
        self.value_to_metric_above |= d.value_to_metric;
        let rule = match (&d.rate_limit, &d.rate_limits) {
            (Some(_), Some(list)) => {
                let p = self.at(list);
                self.err(
                    p,
                    "a descriptor has either rate_limit or rate_limits, not both (put every limit in rate_limits)",
                );
                None
            }
            (Some(rl), None) => self.rule(d, rl, &full_key),
            (None, Some(list)) => self.several(d, list, &full_key),
            (None, None) => None,
        }
        .map(Arc::new);

        let mut node = Node {
            rule,
            children: Default::default(),
            value_to_metric: d.value_to_metric,
        };
        if let Some(children) = &d.descriptors {
            self.descriptors(&mut node, &full_key, children);
        }
        self.value_to_metric_above = above;

        let branch: &mut Branch = parent.children.entry(key.as_bytes().into()).or_default();
        let duplicate = match (&value, pattern) {
            (None, _) => {
                if branch.default.is_some() {
                    true
                } else {
                    branch.default = Some(Box::new(node));
                    false
                }
            }
            (Some(_), Some(pattern)) => {
                if branch.wildcards.contains(&pattern) {
                    true
                } else {
                    branch.wildcards.push(Wildcard {
                        pattern,
                        share_threshold: share,
                        node,
                    });
                    false
                }
            }
            (Some(v), None) => match branch.exact.entry(v.as_bytes().into()) {
                std::collections::hash_map::Entry::Occupied(_) => true,
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(node);
                    false
                }
            },
        };
        if duplicate {
            self.err(
                pos,
                format!("duplicate descriptor composite key '{full_key}'"),
            );
        }
    }

    fn rule(
        &mut self,
        d: &RawDescriptor,
        spanned: &Spanned<RawRateLimit>,
        full_key: &str,
    ) -> Option<Rule> {
        let rl = &spanned.value;
        let pos = self.at(spanned);
        let before = self.errors.len();
        let name = rl
            .name
            .as_ref()
            .map(|n| n.value.clone())
            .filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        for r in rl.replaces.iter().flatten() {
            let rpos = self.at(r);
            match r.value.name.as_ref().filter(|n| !n.value.is_empty()) {
                None => self.err(rpos, "replaces entry must have a non-empty name"),
                Some(n) if Some(&n.value) == name.as_ref() => {
                    let p = self.at(n);
                    self.err(p, format!("rate limit '{}' cannot replace itself", n.value))
                }
                Some(n) => replaces.push(n.value.clone()),
            }
        }
        let kind = if rl.unlimited {
            if let Some(u) = &rl.unit {
                let p = self.at(u);
                self.err(p, "should not specify rate limit unit when unlimited");
            }
            if let Some(w) = &rl.window {
                let p = self.at(w);
                self.err(p, "should not specify a window when unlimited");
            }
            RuleKind::Unlimited
        } else {
            match self.limit(rl, pos.clone(), name.clone()) {
                Some(limit) => RuleKind::Limited(limit),
                None => RuleKind::Unlimited,
            }
        };
        if self.errors.len() > before {
            return None;
        }
        Some(Rule {
            full_key: full_key.to_string(),
            name,
            kind,
            replaces,
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            value_to_metric: d.value_to_metric,
            stats_dynamic: d.detailed_metric || self.value_to_metric_above,
            stats: Default::default(),
            metadata: d.metadata.as_ref().map(|m| m.value.clone()),
            position: pos,
        })
    }
    /// `rate_limits`: several named limits, all of which must pass.
    fn several(
        &mut self,
        d: &RawDescriptor,
        list: &Spanned<Vec<Spanned<RawRateLimit>>>,
        full_key: &str,
    ) -> Option<Rule> {
        let before = self.errors.len();
        let pos = self.at(list);
        if list.value.is_empty() {
            self.err(pos.clone(), "rate_limits needs at least one limit");
        }
        let mut names: Vec<(String, Position)> = Vec::new();
        for item in &list.value {
            match item.value.name.as_ref().filter(|n| !n.value.is_empty()) {
                None => {
                    let p = self.at(item);
                    self.err(
                        p,
                        "each limit in rate_limits needs a name (it tells the limits apart in statuses, replaces and storage keys)",
                    );
                }
                Some(n) => {
                    let p = self.at(n);
                    if let Some((_, first)) = names.iter().find(|(m, _)| *m == n.value) {
                        let msg = format!(
                            "duplicate limit name '{}' in rate_limits (first at {first})",
                            n.value
                        );
                        self.err(p, msg);
                    } else {
                        names.push((n.value.clone(), p));
                    }
                }
            }
        }
        let mut limits = Vec::new();
        let mut replaces = Vec::new();
        for item in &list.value {
            let rl = &item.value;
            let ipos = self.at(item);
            for r in rl.replaces.iter().flatten() {
                let rpos = self.at(r);
                match r.value.name.as_ref().filter(|n| !n.value.is_empty()) {
                    None => self.err(rpos, "replaces entry must have a non-empty name"),
                    Some(n) if names.iter().any(|(m, _)| *m == n.value) => {
                        let p = self.at(n);
                        self.err(
                            p,
                            format!("rate limit '{}' is on this same descriptor and cannot be replaced by it", n.value),
                        )
                    }
                    Some(n) => replaces.push(n.value.clone()),
                }
            }
            if rl.unlimited {
                self.err(
                    ipos,
                    "unlimited cannot be used inside rate_limits; write `rate_limit: {unlimited: true}` to make the descriptor unlimited",
                );
                continue;
            }
            let name = rl
                .name
                .as_ref()
                .map(|n| n.value.clone())
                .filter(|n| !n.is_empty());
            if let Some(limit) = self.limit(rl, ipos, name) {
                limits.push(limit);
            }
        }
        if self.errors.len() > before {
            return None;
        }
        Some(Rule {
            full_key: full_key.to_string(),
            name: None,
            kind: RuleKind::Several(limits),
            replaces,
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            value_to_metric: d.value_to_metric,
            stats_dynamic: d.detailed_metric || self.value_to_metric_above,
            stats: Default::default(),
            metadata: d.metadata.as_ref().map(|m| m.value.clone()),
            position: pos,
        })
    }

    /// One limit: rate, unit or window, algorithm and its parameters, validated.
    fn limit(
        &mut self,
        rl: &RawRateLimit,
        pos: Position,
        name: Option<String>,
    ) -> Option<RuleLimit> {
        let before = self.errors.len();
        let charge = match &rl.charge {
            None => None,
            Some(c) => match c.value.as_str() {
                "always" => Some(Charge::Always),
                "if_admitted" => Some(Charge::IfAdmitted),
                other => {
                    let p = self.at(c);
                    self.err(
                        p,
                        format!("invalid charge '{other}' (expected always or if_admitted)"),
                    );
                    None
                }
            },
        };
        let on_error = rl.on_store_error.as_ref().and_then(|p| self.policy(p));
        let algorithm = match &rl.algorithm {
            None => Algorithm::FixedWindow,
            Some(a) => Algorithm::parse(&a.value).unwrap_or_else(|| {
                let p = self.at(a);
                self.err(
                    p,
                    format!(
                        "unknown algorithm '{}' (expected fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra or distinct)",
                        a.value
                    ),
                );
                Algorithm::FixedWindow
            }),
        };
        // (unit reported in current_limit, window in µs, whether a calendar unit was named)
        let shape = match (&rl.unit, &rl.window) {
            (Some(_), Some(w)) => {
                let p = self.at(w);
                self.err(p, "use either unit or window, not both");
                None
            }
            (None, Some(w)) => match parse_window(&w.value) {
                Ok(window) => Some((Unit::nearest(window), window, None)),
                Err(m) => {
                    let p = self.at(w);
                    self.err(p, m);
                    None
                }
            },
            (Some(u), None) => {
                let parsed = Unit::parse(&u.value);
                if parsed.is_none() {
                    let p = self.at(u);
                    self.err(
                        p,
                        format!(
                            "invalid rate limit unit '{}' (expected second, minute, hour, day, week, month or year)",
                            u.value
                        ),
                    );
                }
                parsed.map(|unit| (unit, unit.micros(), Some(unit)))
            }
            (None, None) => {
                self.err(
                    pos.clone(),
                    "rate_limit needs a unit (second, minute, hour, day, week, month or year)",
                );
                None
            }
        };
        // envoyproxy/ratelimit reads a missing requests_per_unit as 0 (block everything).
        let rpu = rl.requests_per_unit.as_ref().map_or(0, |r| r.value);
        let (unit, window, named_unit) = shape?;
        let mut limit = Limit::new(algorithm, u64::from(rpu), window);
        if let Some(b) = &rl.burst {
            if algorithm.has_burst() {
                limit.burst = u64::from(b.value);
            } else {
                let p = self.at(b);
                self.err(
                    p,
                    format!(
                        "burst applies to token_bucket, leaky_bucket and gcra, not to {}",
                        algorithm.as_str()
                    ),
                );
            }
        }
        if let Some(pr) = &rl.precision {
            if algorithm == Algorithm::SlidingWindow {
                limit.precision = pr.value;
            } else {
                let p = self.at(pr);
                self.err(
                    p,
                    format!(
                        "precision applies to sliding_window only, not to {}",
                        algorithm.as_str()
                    ),
                );
            }
        }
        let calendar = match rl.align.as_ref().map(|a| a.value.as_str()) {
            None | Some("epoch") => false,
            Some("calendar") => true,
            Some(other) => {
                let p = rl.align.as_ref().map_or(pos.clone(), |a| self.at(a));
                self.err(
                    p,
                    format!("invalid align '{other}' (expected epoch or calendar)"),
                );
                false
            }
        };
        if calendar {
            let p = rl.align.as_ref().map_or(pos.clone(), |a| self.at(a));
            let tz = match &rl.timezone {
                None => Some(chrono_tz::UTC),
                Some(t) => t.value.parse::<chrono_tz::Tz>().ok().or_else(|| {
                    let tp = self.at(t);
                    self.err(
                        tp,
                        format!("unknown time zone '{}' (expected an IANA name such as Asia/Shanghai or UTC)", t.value),
                    );
                    None
                }),
            };
            match named_unit {
                _ if !algorithm.has_windows() => self.err(
                    p,
                    format!("align: calendar applies to fixed_window and distinct, not to {}", algorithm.as_str()),
                ),
                Some(u @ (Unit::Hour | Unit::Day | Unit::Week | Unit::Month | Unit::Year)) => {
                    limit.calendar = tz.map(|tz| Calendar { unit: u, tz });
                }
                _ => self.err(
                    p,
                    "align: calendar needs a unit of hour, day, week, month or year (not a window or a shorter unit)",
                ),
            }
        } else if let Some(t) = &rl.timezone {
            let p = self.at(t);
            self.err(p, "timezone applies only with align: calendar");
        }
        if self.errors.len() > before {
            return None;
        }
        if let Err(m) = limit.validate() {
            let p = rl
                .requests_per_unit
                .as_ref()
                .map_or(pos.clone(), |r| self.at(r));
            self.err(p, m);
            return None;
        }
        Some(RuleLimit {
            name,
            requests_per_unit: rpu,
            unit,
            limit,
            charge,
            on_error,
        })
    }

    /// An `on_store_error` value.
    fn policy(&mut self, p: &Spanned<String>) -> Option<FailurePolicy> {
        match p.value.as_str() {
            "unavailable" => Some(FailurePolicy::Unavailable),
            "allow" => Some(FailurePolicy::Allow),
            "deny" => Some(FailurePolicy::Deny),
            "local" => Some(FailurePolicy::Local),
            other => {
                let at = self.at(p);
                self.err(
                    at,
                    format!(
                        "invalid on_store_error '{other}' (expected unavailable, allow, deny or local)"
                    ),
                );
                None
            }
        }
    }
}

/// `500ms`, `30s`, `5m`, `2h`, `7d`: a whole number and a unit, longer than zero.
fn parse_window(s: &str) -> Result<Micros, String> {
    let bad =
        || format!("invalid window '{s}' (expected a whole number and ms, s, m, h or d, e.g. 30s)");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let per: Micros = match unit {
        "ms" => MICROS_PER_MILLI,
        "s" => MICROS_PER_SEC,
        "m" => 60 * MICROS_PER_SEC,
        "h" => 3_600 * MICROS_PER_SEC,
        "d" => 86_400 * MICROS_PER_SEC,
        _ => return Err(bad()),
    };
    match n.checked_mul(per) {
        Some(0) => Err(format!("window '{s}' must be longer than zero")),
        Some(w) if w <= MAX_WINDOW => Ok(w),
        _ => Err(format!(
            "window '{s}' is longer than the longest supported window of 10 years"
        )),
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(parse_window("500ms"), Ok(500_000));
        assert_eq!(parse_window("30s"), Ok(30_000_000));
        assert_eq!(parse_window("2h"), Ok(7_200_000_000));
        assert!(parse_window("0s").is_err());
        assert!(parse_window("1w").is_err());
        assert!(parse_window("s").is_err());
        assert!(parse_window("99999999999999d").is_err());
    }
}
