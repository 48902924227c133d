//! Building a domain's rule tree from its validated descriptors: one node per descriptor,
//! exact values, wildcard patterns and key-only defaults per key, duplicates refused, and the
//! one constructor of a [`Rule`].

use std::collections::hash_map::Entry;
use std::sync::Arc;

use serde_saphyr::Spanned;

use super::raw::RawDescriptor;
use super::validate::{Cx, Limits};
use crate::excerpt::excerpt;
use crate::rules::{Branch, Node, Pattern, Rule, RuleId, Wildcard};

/// Builds one file's descriptors into a domain's tree.
pub(super) struct Tree<'c, 'a> {
    pub cx: &'c mut Cx<'a>,
    /// A descriptor on the current path has `value_to_metric`.
    value_to_metric_above: bool,
}

impl<'c, 'a> Tree<'c, 'a> {
    pub(super) fn new(cx: &'c mut Cx<'a>) -> Self {
        Tree {
            cx,
            value_to_metric_above: false,
        }
    }

    pub(super) fn descriptors(
        &mut self,
        parent: &mut Node,
        path: &str,
        list: &[Spanned<RawDescriptor>],
    ) {
        for item in list {
            self.descriptor(parent, path, item);
        }
    }

    fn descriptor(&mut self, parent: &mut Node, path: &str, item: &Spanned<RawDescriptor>) {
        let d = &item.value;
        let pos = self.cx.at(item);
        let key = match &d.key {
            Some(k) if !k.value.is_empty() => k.value.as_str(),
            Some(k) => {
                let p = self.cx.at(k);
                self.cx.err(p, "descriptor has empty key");
                return;
            }
            None => {
                self.cx.err(pos, "descriptor has empty key");
                return;
            }
        };
        let value = d
            .value
            .as_ref()
            .map(|v| v.value.as_str())
            .filter(|v| !v.is_empty());
        let full_key = full_key(path, key, value);
        let pattern = value.and_then(|v| Pattern::compile(v.as_bytes()));
        let share = d.share_threshold.as_ref().is_some_and(|s| s.value);
        if share && pattern.is_none() {
            let p = d
                .share_threshold
                .as_ref()
                .map_or(pos.clone(), |s| self.cx.at(s));
            self.cx.err(
                p,
                format!("share_threshold can only be used with a wildcard value (containing '*'), but '{}' has none", excerpt(&full_key)),
            );
        }
        if let Some(m) = d.metadata.as_ref().filter(|m| !m.value.is_object()) {
            let p = self.cx.at(m);
            self.cx.err(p, "metadata must be a map of key: value");
        }

        let above = self.value_to_metric_above;
        self.value_to_metric_above |= d.value_to_metric;
        let rule = self.cx.limits(d).map(|limits| {
            let id = self.cx.ids.next_id();
            Arc::new(rule(d, &full_key, limits, self.value_to_metric_above, id))
        });
        let mut node = Node {
            rule,
            children: Default::default(),
            value_to_metric: d.value_to_metric,
        };
        if let Some(children) = &d.descriptors {
            self.descriptors(&mut node, &full_key, children);
        }
        self.value_to_metric_above = above;

        // Looked up before inserting: the boxed key is made once per key, not per descriptor.
        if !parent.children.contains_key(key.as_bytes()) {
            parent
                .children
                .insert(key.as_bytes().into(), Branch::default());
        }
        let Some(branch) = parent.children.get_mut(key.as_bytes()) else {
            unreachable!("inserted above")
        };
        let duplicate = match (value, pattern) {
            (None, _) => {
                let taken = branch.default.is_some();
                if !taken {
                    branch.default = Some(Box::new(node));
                }
                taken
            }
            (Some(_), Some(pattern)) => {
                let taken = branch.wildcards.contains(&pattern);
                if !taken {
                    branch.wildcards.push(Wildcard {
                        pattern,
                        share_threshold: share,
                        node,
                    });
                }
                taken
            }
            (Some(v), None) => match branch.exact.entry(v.as_bytes().into()) {
                Entry::Occupied(_) => true,
                Entry::Vacant(slot) => {
                    slot.insert(node);
                    false
                }
            },
        };
        if duplicate {
            self.cx.err(
                pos,
                format!(
                    "duplicate descriptor composite key '{}'",
                    excerpt(&full_key)
                ),
            );
        }
    }
}

/// envoyproxy/ratelimit's `path.key_value` (or `path.key`), sized once: `format!` grows it
/// piece by piece, and this runs once per rule.
fn full_key(path: &str, key: &str, value: Option<&str>) -> String {
    let len = path.len() + 1 + key.len() + value.map_or(0, |v| 1 + v.len());
    let mut s = String::with_capacity(len);
    s.push_str(path);
    s.push('.');
    s.push_str(key);
    if let Some(v) = value {
        s.push('_');
        s.push_str(v);
    }
    s
}

/// The one constructor of a rule: the descriptor's flags and its validated limits.
/// `value_to_metric_on_path`: this descriptor or one above it has `value_to_metric`.
fn rule(
    d: &RawDescriptor,
    full_key: &str,
    limits: Limits,
    value_to_metric_on_path: bool,
    id: RuleId,
) -> Rule {
    Rule {
        full_key: full_key.to_string(),
        name: limits.name,
        kind: limits.kind,
        replaces: limits.replaces,
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        value_to_metric: d.value_to_metric,
        stats_dynamic: d.detailed_metric || value_to_metric_on_path,
        id,
        metadata: d.metadata.as_ref().map(|m| m.value.clone()),
        position: limits.position,
    }
}
