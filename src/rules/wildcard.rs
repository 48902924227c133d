//! The wildcard values of one [`Branch`](super::Branch): kept in file order (the order that
//! decides which pattern wins) and indexed so that matching does not scan them.
//!
//! Every pattern `P*...*S` is filed under its literal prefix `P` (before the first `*`) and,
//! within that, its literal suffix `S` (after the last `*`); either may be empty. A value `v`
//! can only match patterns whose prefix is `v[..p]` and whose suffix is `v[len - s..]` with
//! `p + s <= len`, so [`Wildcards::find`] does one hash lookup per distinct prefix length and,
//! in each bucket found, one per distinct suffix length, then runs the full matcher only on the
//! patterns filed under that exact (prefix, suffix) pair (in practice one or two: patterns that
//! differ only between their stars). The cost depends on the value's length and the number of
//! distinct literal lengths, not on the number of patterns.
//!
//! **Invariant:** `find` returns exactly what the file-order scan ([`Wildcards::scan`], kept as
//! the oracle of the property test) returns: the first matching pattern in file order. Each
//! bucket lists pattern indices in ascending (file) order, so the first match in a bucket is
//! that bucket's earliest, and the smallest over all buckets is the overall first.

use std::collections::HashMap;

use super::{Node, Pattern};

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

/// The wildcard patterns of a branch, in file order, with their index.
#[derive(Debug, Default)]
pub struct Wildcards {
    list: Vec<Wildcard>,
    /// Buckets by literal prefix, one map per prefix length, lengths ascending.
    by_prefix: Vec<(usize, ByteMap<BySuffix>)>,
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
        self.candidates(pattern.prefix(), pattern.suffix())
            .is_some_and(|ids| {
                ids.iter()
                    .any(|&i| self.list[i].pattern.source() == pattern.source())
            })
    }

    /// Appends a pattern (after every present one in file order). The caller refuses
    /// duplicates (see [`Wildcards::contains`]); a duplicate would never win anyway.
    pub fn push(&mut self, w: Wildcard) {
        let id = self.list.len();
        let (prefix, suffix) = (w.pattern.prefix(), w.pattern.suffix());
        let by_suffix = &mut slot(&mut self.by_prefix, prefix.len())
            .entry(prefix.into())
            .or_default()
            .0;
        slot(by_suffix, suffix.len())
            .entry(suffix.into())
            .or_default()
            .push(id);
        self.list.push(w);
    }

    fn candidates(&self, prefix: &[u8], suffix: &[u8]) -> Option<&Vec<usize>> {
        let (_, m) = self.by_prefix.iter().find(|(l, _)| *l == prefix.len())?;
        let (_, m) = m.get(prefix)?.0.iter().find(|(l, _)| *l == suffix.len())?;
        m.get(suffix)
    }

    /// The first pattern in file order that matches `value`, through the index.
    pub fn find(&self, value: &[u8]) -> Option<&Wildcard> {
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
                let Some(ids) = ids.get(&value[len - slen..]) else {
                    continue;
                };
                for &id in ids.iter().take_while(|&&id| id < best) {
                    if self.list[id].pattern.matches(value) {
                        best = id;
                        break;
                    }
                }
            }
        }
        self.list.get(best)
    }

    /// The first pattern in file order that matches `value`, by scanning: the reference
    /// [`Wildcards::find`] must agree with (and the baseline of `benches/matching.rs`).
    pub fn scan(&self, value: &[u8]) -> Option<&Wildcard> {
        self.list.iter().find(|w| w.pattern.matches(value))
    }
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
    }
}
