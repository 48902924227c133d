//! The wildcard patterns with literal pieces between their stars (`*m42*`, `/a/*/b/*.json`):
//! one Aho-Corasick automaton over every distinct piece, and one pass over the value that
//! walks every pattern through its pieces at once.
//!
//! `P*m1*...*mk*S` matches `v` iff `v` starts with `P`, ends with `S`, and `m1..mk` occur in
//! this order after `P`, before `S`, without overlapping. With only `*` between them, taking
//! each piece at its leftmost possible occurrence is optimal, so the pattern matches iff that
//! greedy walk ends at or before `len - |S|`.
//!
//! The pass: the automaton reports every occurrence of every piece, by ascending end. A
//! pattern waits on one piece at a time: on its first piece, from the first occurrence that
//! starts at or after `|P|` (the patterns of a piece are sorted by `|P|`, and one cursor per
//! piece starts each once); on each later piece, from the first occurrence that starts at or
//! after the end of the previous one (a heap holds it until such an occurrence can have
//! ended). A pattern that takes its last piece checks its suffix, once.
//!
//! **Bound.** For a value of `n` bytes: `n` automaton steps; at most `n * c` occurrence
//! reports, `c` being the longest chain of pieces each ending with the next (1 when no piece
//! ends with another), each costing two hash lookups; and, only for patterns whose first piece
//! occurs in the value, one prefix comparison, one suffix comparison and one heap push and pop
//! per piece. No pattern is ever run over the value, and a pattern whose first piece does not
//! occur costs nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use aho_corasick::{AhoCorasick, MatchKind};

use super::{ByteMap, Wildcard};
use crate::rules::{Budget, Expired};

type IdMap<V> = HashMap<u32, V, foldhash::fast::RandomState>;

/// The automaton of a branch's infix patterns.
#[derive(Debug)]
pub(super) struct Infix {
    /// Over the distinct pieces; pattern `i` of the automaton is piece `i`.
    automaton: AhoCorasick,
    piece_len: Vec<usize>,
    /// The patterns, as indices into the branch's file-order list, with their piece ids.
    patterns: Vec<Walk>,
    /// Per piece: the patterns (indices into `patterns`) whose first piece it is, by ascending
    /// prefix length.
    first: Vec<Vec<u32>>,
}

#[derive(Debug)]
struct Walk {
    /// Index in the branch's file-order list (smaller wins).
    id: usize,
    pieces: Box<[u32]>,
}

impl Infix {
    /// The automaton of `ids` (indices into `list`, each a pattern with at least one piece).
    /// `Err` only if the automaton outgrows aho-corasick's state ids (billions of states).
    pub(super) fn build(
        list: &[Wildcard],
        ids: &[usize],
    ) -> Result<Infix, aho_corasick::BuildError> {
        let mut piece_ids: ByteMap<u32> = ByteMap::default();
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut patterns = Vec::with_capacity(ids.len());
        for &id in ids {
            let walk = list[id]
                .pattern
                .middles()
                .map(|m| {
                    *piece_ids.entry(m.into()).or_insert_with(|| {
                        pieces.push(m);
                        (pieces.len() - 1) as u32
                    })
                })
                .collect();
            patterns.push(Walk { id, pieces: walk });
        }
        let mut first = vec![Vec::new(); pieces.len()];
        for (i, w) in patterns.iter().enumerate() {
            first[w.pieces[0] as usize].push(i as u32);
        }
        let prefix_len = |i: &u32| list[patterns[*i as usize].id].pattern.prefix().len();
        for f in &mut first {
            f.sort_by_key(prefix_len);
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&pieces)?;
        Ok(Infix {
            automaton,
            piece_len: pieces.iter().map(|p| p.len()).collect(),
            patterns,
            first,
        })
    }

    /// The smallest file-order index below `best` of a pattern matching `value`, else `best`;
    /// each occurrence report spends a unit of `budget`.
    pub(super) fn find(
        &self,
        list: &[Wildcard],
        value: &[u8],
        best: usize,
        budget: &mut Budget<'_>,
    ) -> Result<usize, Expired> {
        let Ok(reports) = self.automaton.try_find_overlapping_iter(value) else {
            // Unreachable: the automaton is built with the kind overlapping search needs.
            return Ok(best);
        };
        let mut pass = Pass {
            infix: self,
            list,
            value,
            best,
            started: IdMap::default(),
            waiting: IdMap::default(),
            due: BinaryHeap::new(),
        };
        for m in reports {
            budget.spend(1)?;
            pass.report(m.pattern().as_u32(), m.start(), m.end());
        }
        Ok(pass.best)
    }
}

/// The state of one pass over one value.
struct Pass<'a> {
    infix: &'a Infix,
    list: &'a [Wildcard],
    value: &'a [u8],
    best: usize,
    /// Per piece: how many of its `first` patterns have started.
    started: IdMap<usize>,
    /// Per piece: the (pattern, step) walks waiting on it, each eligible for any occurrence.
    waiting: IdMap<Vec<(u32, u32)>>,
    /// Walks not yet eligible: (end from which an occurrence of their piece can count,
    /// pattern, step).
    due: BinaryHeap<Reverse<(usize, u32, u32)>>,
}

impl Pass<'_> {
    /// An occurrence of `piece` at `start..end`.
    fn report(&mut self, piece: u32, start: usize, end: usize) {
        while let Some(&Reverse((from, pattern, step))) = self.due.peek() {
            if from > end {
                break;
            }
            self.due.pop();
            let piece = self.infix.patterns[pattern as usize].pieces[step as usize];
            self.waiting.entry(piece).or_default().push((pattern, step));
        }
        if let Some(walks) = self.waiting.get_mut(&piece) {
            for (pattern, step) in std::mem::take(walks) {
                self.advance(pattern, step, end);
            }
        }
        let (infix, list) = (self.infix, self.list);
        let first = &infix.first[piece as usize];
        let started = self.started.entry(piece).or_default();
        let from = *started;
        let mut to = from;
        while let Some(&i) = first.get(to) {
            let walk = &infix.patterns[i as usize];
            if list[walk.id].pattern.prefix().len() > start {
                break;
            }
            to += 1;
        }
        *started = to;
        for &i in &first[from..to] {
            let id = infix.patterns[i as usize].id;
            if id < self.best && self.value.starts_with(list[id].pattern.prefix()) {
                self.advance(i, 0, end);
            }
        }
    }

    /// Walk `pattern` took its piece `step` at an occurrence ending at `end`.
    fn advance(&mut self, pattern: u32, step: u32, end: usize) {
        let walk = &self.infix.patterns[pattern as usize];
        if walk.id >= self.best {
            return;
        }
        let next = step + 1;
        if let Some(&piece) = walk.pieces.get(next as usize) {
            let from = end + self.infix.piece_len[piece as usize];
            self.due.push(Reverse((from, pattern, next)));
            return;
        }
        let suffix = self.list[walk.id].pattern.suffix();
        if end + suffix.len() <= self.value.len() && self.value.ends_with(suffix) {
            self.best = walk.id;
        }
    }
}
