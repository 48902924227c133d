//! The wildcard values of one [`Branch`](super::Branch): kept in file order (the order that
//! decides which pattern wins) and indexed so that matching never runs every pattern.
//!
//! Two shapes, two indexes:
//! - **Affix** patterns have no literal between their stars (`P*S`, `/api/*`, `*.json`, `*`).
//!   Each is filed under its literal prefix `P` and, within that, its literal suffix `S`; a
//!   value `v` can only match those whose prefix is `v[..p]` and suffix `v[len - s..]` with
//!   `p + s <= len`, and every pattern so found does match. [`Wildcards::find`] does one hash
//!   lookup per distinct prefix length and, in each bucket found, one per distinct suffix
//!   length: the cost depends on the value's length and the number of distinct literal
//!   lengths, not on the number of patterns.
//! - **Infix** patterns (`*m42*`, `a*b*c`) go through one automaton over their literal
//!   pieces, scanned once over the value ([`infix`], which states the bound). It is built
//!   when the config is compiled ([`prepare`]), or else on first use.
//!
//! **Invariant:** `find` returns exactly what the file-order scan ([`Wildcards::scan`], kept as
//! the oracle of the property test) returns: the first matching pattern in file order. Each
//! side yields its smallest matching index, and the smaller of the two wins.

mod infix;

use std::collections::HashMap;
use std::sync::OnceLock;

use super::{Budget, Expired, Node, Pattern, RuleSet};
use infix::Infix;

/// Hash maps keyed by bytes of the config. Lookups use request bytes, but only the config
/// inserts, so a fast hash is safe here; it is still seeded per process.
pub type ByteMap<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

#[derive(Debug)]
pub struct Wildcard {
    pub pattern: Pattern,
    /// All values matching the pattern share one counter.
    pub share_threshold: bool,
    pub node: Node,
}

/// The wildcard patterns of a branch, in file order, with their indexes.
#[derive(Debug, Default)]
pub struct Wildcards {
    list: Vec<Wildcard>,
    /// Every pattern's source, for [`Wildcards::contains`].
    sources: ByteMap<()>,
    /// Affix patterns: buckets by literal prefix, one map per prefix length, ascending.
    by_prefix: Vec<(usize, ByteMap<BySuffix>)>,
    /// Infix patterns: their indices in `list`, ascending.
    infix_ids: Vec<usize>,
    /// Their automaton, built once the list is complete (`None`: it could not be built).
    infix: OnceLock<Option<Infix>>,
}

/// The patterns of one prefix, by literal suffix, one map per suffix length, ascending.
#[derive(Debug, Default)]
struct BySuffix(Vec<(usize, ByteMap<Vec<usize>>)>);

impl Wildcards {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The patterns in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, Wildcard> {
        self.list.iter()
    }

    /// Whether a pattern with this exact source is present.
    pub fn contains(&self, pattern: &Pattern) -> bool {
        self.sources.contains_key(pattern.source())
    }

    /// Appends a pattern (after every present one in file order). The caller refuses
    /// duplicates (see [`Wildcards::contains`]); a duplicate would never win anyway.
    pub fn push(&mut self, w: Wildcard) {
        let id = self.list.len();
        self.sources.insert(w.pattern.source().into(), ());
        if w.pattern.middles().next().is_some() {
            self.infix_ids.push(id);
            // A pattern added after a build invalidates it.
            self.infix = OnceLock::new();
        } else {
            let (prefix, suffix) = (w.pattern.prefix(), w.pattern.suffix());
            let by_suffix = &mut slot(&mut self.by_prefix, prefix.len())
                .entry(prefix.into())
                .or_default()
                .0;
            slot(by_suffix, suffix.len())
                .entry(suffix.into())
                .or_default()
                .push(id);
        }
        self.list.push(w);
    }

    /// Builds the infix automaton now rather than on the first request.
    fn prepare(&self) {
        self.infix();
    }

    fn infix(&self) -> Option<&Infix> {
        self.infix
            .get_or_init(|| {
                if self.infix_ids.is_empty() {
                    return None;
                }
                Infix::build(&self.list, &self.infix_ids)
                    .inspect_err(|e| {
                        tracing::error!(error = %e, patterns = self.infix_ids.len(),
                            "wildcard automaton too large: these patterns are matched one by one");
                    })
                    .ok()
            })
            .as_ref()
    }

    /// The first pattern in file order that matches `value`, through the indexes.
    pub fn find(&self, value: &[u8]) -> Option<&Wildcard> {
        // An unlimited budget never runs out.
        self.find_within(value, &mut Budget::unlimited())
            .unwrap_or(None)
    }

    /// [`Self::find`], giving up once `budget` runs out.
    pub fn find_within(
        &self,
        value: &[u8],
        budget: &mut Budget<'_>,
    ) -> Result<Option<&Wildcard>, Expired> {
        let best = self.find_affix(value);
        let best = match self.infix() {
            Some(infix) => infix.find(&self.list, value, best, budget)?,
            // No infix pattern, or (unreachable in practice) no automaton: match them in turn.
            None => {
                let mut found = best;
                for &id in self.infix_ids.iter().take_while(|&&id| id < best) {
                    budget.spend(Budget::bytes(value.len()))?;
                    if self.list[id].pattern.matches(value) {
                        found = id;
                        break;
                    }
                }
                found
            }
        };
        Ok(self.list.get(best))
    }

    /// The smallest index of a matching affix pattern, else `usize::MAX`.
    fn find_affix(&self, value: &[u8]) -> usize {
        let len = value.len();
        let mut best = usize::MAX;
        for (plen, by_prefix) in &self.by_prefix {
            if *plen > len {
                break;
            }
            let Some(BySuffix(by_suffix)) = by_prefix.get(&value[..*plen]) else {
                continue;
            };
            for (slen, ids) in by_suffix {
                if plen + slen > len {
                    break;
                }
                // Every pattern of the bucket matches: its first is the bucket's earliest.
                if let Some(&id) = ids.get(&value[len - slen..]).and_then(|ids| ids.first()) {
                    best = best.min(id);
                }
            }
        }
        best
    }

    /// The first pattern in file order that matches `value`, by scanning: the reference
    /// [`Wildcards::find`] must agree with (and the baseline of `benches/matching.rs`).
    pub fn scan(&self, value: &[u8]) -> Option<&Wildcard> {
        self.list.iter().find(|w| w.pattern.matches(value))
    }
}

/// Builds every wildcard automaton of `set`, so that a config's cost is paid when it is
/// compiled, not by its first requests.
pub(crate) fn prepare(set: &RuleSet) {
    fn walk(node: &Node) {
        for branch in node.children.values() {
            branch.wildcards.prepare();
            branch.exact.values().for_each(walk);
            branch.wildcards.iter().for_each(|w| walk(&w.node));
            if let Some(d) = &branch.default {
                walk(d);
            }
        }
    }
    set.domains.values().for_each(|d| walk(&d.root));
}

/// The map for `len` in a list sorted by length, inserted in place if missing.
fn slot<V>(list: &mut Vec<(usize, ByteMap<V>)>, len: usize) -> &mut ByteMap<V> {
    let at = match list.binary_search_by_key(&len, |(l, _)| *l) {
        Ok(at) => at,
        Err(at) => {
            list.insert(at, (len, ByteMap::default()));
            at
        }
    };
    &mut list[at].1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wildcards(patterns: &[Vec<u8>]) -> Wildcards {
        let mut ws = Wildcards::default();
        for (i, p) in patterns.iter().enumerate() {
            let Some(pattern) = Pattern::compile(p) else {
                continue;
            };
            if ws.contains(&pattern) {
                continue;
            }
            ws.push(Wildcard {
                pattern,
                share_threshold: i % 2 == 0,
                node: Node::default(),
            });
        }
        ws
    }

    fn same(a: Option<&Wildcard>, b: Option<&Wildcard>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }

    #[test]
    fn first_in_file_order_wins_across_buckets() {
        let ws = wildcards(&[b"*".to_vec(), b"/api/*".to_vec(), b"*.json".to_vec()]);
        assert_eq!(ws.find(b"/api/x.json").unwrap().pattern.source(), b"*");
        let ws = wildcards(&[
            b"/api/v1/*".to_vec(),
            b"/api/*".to_vec(),
            b"*.json".to_vec(),
            b"/a*n".to_vec(),
        ]);
        assert_eq!(
            ws.find(b"/api/v1/x.json").unwrap().pattern.source(),
            b"/api/v1/*"
        );
        assert_eq!(ws.find(b"/api/x.json").unwrap().pattern.source(), b"/api/*");
        assert_eq!(ws.find(b"/x.json").unwrap().pattern.source(), b"*.json");
        assert_eq!(ws.find(b"/an").unwrap().pattern.source(), b"/a*n");
        assert!(ws.find(b"/b").is_none());
        // Prefix and suffix may not overlap: `a*a` needs two bytes.
        let ws = wildcards(&[b"a*a".to_vec()]);
        assert!(ws.find(b"a").is_none());
        assert!(ws.find(b"aa").is_some());
        assert!(ws.contains(&Pattern::compile(b"a*a").unwrap()));
        assert!(!ws.contains(&Pattern::compile(b"a**a").unwrap()));
    }

    /// Issue 14's hostile rule set: 10,000 infix rules `*mNNNNN*` and 64 KiB values. Checks
    /// answers only (`benches/matching.rs`, group `hostile`, measures the time).
    #[test]
    fn ten_thousand_infix_rules() {
        let patterns: Vec<Vec<u8>> = (0..10_000)
            .map(|i| format!("*m{i:05}*").into_bytes())
            .collect();
        let ws = wildcards(&patterns);
        let value = |tokens: &[&str]| {
            let mut v = Vec::with_capacity(64 * 1024);
            while v.len() < 64 * 1024 {
                v.extend_from_slice(b"m0123x-m1x-");
            }
            for t in tokens {
                v.extend_from_slice(t.as_bytes());
                v.extend_from_slice(&[b'-'; 1000]);
            }
            v
        };
        let source = |v: &[u8]| ws.find(v).map(|w| w.pattern.source().to_vec());
        assert_eq!(source(&value(&[])), None);
        assert_eq!(source(&value(&["m09999"])), Some(b"*m09999*".to_vec()));
        // The first in file order wins, wherever it sits in the value.
        assert_eq!(
            source(&value(&["m04242", "m00007", "m09999"])),
            Some(b"*m00007*".to_vec())
        );
        // Overlapping occurrences: `m00001` ends inside `m000012`'s bytes.
        assert_eq!(source(b"xm000012"), Some(b"*m00001*".to_vec()));
        assert_eq!(source(b"m0000"), None);
    }

    #[test]
    fn pieces_in_order_without_overlap() {
        let ws = wildcards(&[b"a*ab*ab*b".to_vec(), b"x*y*z".to_vec(), b"*q*q*".to_vec()]);
        let source = |v: &[u8]| ws.find(v).map(|w| w.pattern.source().to_vec());
        assert_eq!(source(b"aababb"), Some(b"a*ab*ab*b".to_vec()));
        assert_eq!(source(b"aabab"), None);
        assert_eq!(source(b"aabb"), None);
        assert_eq!(source(b"xzyz"), Some(b"x*y*z".to_vec()));
        assert_eq!(source(b"xzy"), None);
        assert_eq!(source(b"q"), None);
        assert_eq!(source(b"qq"), Some(b"*q*q*".to_vec()));
        // The prefix may not lend its bytes to a piece, nor a piece to the suffix.
        let ws = wildcards(&[b"ab*b*c".to_vec(), b"a*c*c".to_vec()]);
        assert!(ws.find(b"abc").is_none());
        assert!(ws.find(b"ac").is_none());
        assert!(ws.find(b"abbc").is_some());
        assert!(ws.find(b"acc").is_some());
    }

    proptest! {
        // A small alphabet makes prefixes, suffixes and whole patterns collide often.
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn index_agrees_with_file_order_scan(
            patterns in proptest::collection::vec("[ab*]{0,6}", 0..24),
            values in proptest::collection::vec("[ab]{0,8}", 1..16),
        ) {
            let patterns: Vec<Vec<u8>> = patterns.into_iter().map(String::into_bytes).collect();
            let ws = wildcards(&patterns);
            for v in &values {
                prop_assert!(same(ws.find(v.as_bytes()), ws.scan(v.as_bytes())), "{v:?} in {patterns:?}");
            }
        }

        /// Several stars and longer values: the automaton's walk against the scan.
        #[test]
        fn infix_walk_agrees_with_file_order_scan(
            patterns in proptest::collection::vec("[abc]{0,2}\\*[abc*]{0,7}", 0..32),
            values in proptest::collection::vec("[abc]{0,24}", 1..16),
        ) {
            let patterns: Vec<Vec<u8>> = patterns.into_iter().map(String::into_bytes).collect();
            let ws = wildcards(&patterns);
            for v in &values {
                prop_assert!(same(ws.find(v.as_bytes()), ws.scan(v.as_bytes())), "{v:?} in {patterns:?}");
            }
        }
    }
}
