//! A readable listing of a rule set, for `/rlconfig` and `sluice check`.

use std::fmt::Write;

use super::{Node, Rule, RuleKind, RuleLimit, RuleSet};

impl RuleSet {
    /// One line per rule, grouped by source file, in a stable order.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for src in &self.sources {
            let _ = writeln!(
                out,
                "# {} (domain {}, content hash {:016x})",
                src.path, src.domain, src.hash
            );
        }
        let mut names: Vec<&String> = self.domains.keys().collect();
        names.sort();
        for name in names {
            let mut lines = Vec::new();
            collect(&self.domains[name].root, &mut lines);
            lines.sort();
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    }

    /// Every rule of every domain.
    pub fn all_rules(&self) -> Vec<&Rule> {
        fn walk<'a>(node: &'a Node, out: &mut Vec<&'a Rule>) {
            if let Some(rule) = &node.rule {
                out.push(rule);
            }
            for branch in node.children.values() {
                branch.exact.values().for_each(|n| walk(n, out));
                branch.wildcards.iter().for_each(|w| walk(&w.node, out));
                if let Some(n) = &branch.default {
                    walk(n, out);
                }
            }
        }
        let mut out = Vec::new();
        for d in self.domains.values() {
            walk(&d.root, &mut out);
        }
        out
    }

    /// Rules per domain, for the summary of `sluice check`: counted, not listed (the listing
    /// formats every rule, a quarter of a check's instructions for 10,000 rules).
    pub fn rule_counts(&self) -> Vec<(String, usize)> {
        fn count(node: &Node) -> usize {
            let below: usize = node
                .children
                .values()
                .map(|branch| {
                    branch.exact.values().map(count).sum::<usize>()
                        + branch
                            .wildcards
                            .iter()
                            .map(|w| count(&w.node))
                            .sum::<usize>()
                        + branch.default.as_deref().map_or(0, count)
                })
                .sum();
            usize::from(node.rule.is_some()) + below
        }
        let mut v: Vec<(String, usize)> = self
            .domains
            .iter()
            .map(|(name, d)| (name.clone(), count(&d.root)))
            .collect();
        v.sort();
        v
    }
}

fn collect(node: &Node, out: &mut Vec<String>) {
    if let Some(rule) = &node.rule {
        let mut line = format!("{}:", rule.full_key);
        match &rule.kind {
            RuleKind::Unlimited => line.push_str(" unlimited"),
            RuleKind::Limited(l) => describe(&mut line, l),
            RuleKind::Several(ls) => {
                for (i, l) in ls.iter().enumerate() {
                    line.push_str(if i == 0 { " [" } else { " |" });
                    let _ = write!(line, " {}:", l.name.as_deref().unwrap_or(""));
                    describe(&mut line, l);
                }
                line.push_str(" ]");
            }
        }
        if let Some(name) = &rule.name {
            let _ = write!(line, " name={name}");
        }
        if !rule.replaces.is_empty() {
            let _ = write!(line, " replaces={}", rule.replaces.join(","));
        }
        let _ = write!(
            line,
            " shadow_mode={} quota_mode={} ({})",
            rule.shadow_mode, rule.quota_mode, rule.position
        );
        out.push(line);
    }
    for branch in node.children.values() {
        for n in branch.exact.values() {
            collect(n, out);
        }
        for w in branch.wildcards.iter() {
            collect(&w.node, out);
        }
        if let Some(n) = &branch.default {
            collect(n, out);
        }
    }
}

/// ` unit=.. requests_per_unit=.. algorithm=..` and the parameters that differ from defaults
/// (concurrency: its own two).
fn describe(line: &mut String, l: &RuleLimit) {
    let limit = &l.limit;
    if limit.algorithm().leases() {
        // No rate: the unit and requests_per_unit it reports to Envoy are derived.
        let _ = write!(
            line,
            " algorithm=concurrency max_in_flight={} lease_time={}ms",
            limit.requests(),
            limit.window() / 1_000
        );
        return;
    }
    let _ = write!(
        line,
        " unit={} requests_per_unit={} algorithm={}",
        l.unit,
        l.requests_per_unit,
        limit.algorithm().as_str()
    );
    if limit.window() != l.unit.micros() {
        let _ = write!(line, " window={}ms", limit.window() / 1_000);
    }
    if let Some(b) = limit.burst() {
        let _ = write!(line, " burst={b}");
    }
    if let Some(p) = limit.precision() {
        let _ = write!(line, " precision={p}");
    }
    if let Some(c) = limit.calendar() {
        let _ = write!(line, " align=calendar timezone={}", c.tz.name());
    }
}
