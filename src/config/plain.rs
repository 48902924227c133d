//! The fast path of a parse: the config's own shape, in the plain block YAML that generated
//! and hand-written rule files use (block maps and lists, one-line flow maps, plain or quoted
//! one-line scalars, comments), read straight into the [`raw`](super::raw) types with the
//! positions serde-saphyr would give. Anything else (anchors, tags, multi-line or escaped
//! scalars, nulls, numbers where a string goes, unknown or duplicate keys, `metadata`, tabs, non-ASCII text, an
//! error of any kind) returns `None`, and the file takes serde-saphyr's path
//! ([`super::parse`]), so every error and every unusual file is read exactly as before.
//! `plain_matches_serde_saphyr` in the tests holds the two paths to the same result.
//!
//! Why: serde-saphyr spends about 75k instructions per rule of the reload benchmark's file;
//! this reads it in a small fraction of that (bench/why.md, "reload").

use serde_saphyr::{Location, Spanned};

use super::raw::{RawDescriptor, RawFile, RawRateLimit, RawReplaces};
use scalar::{
    as_bool, as_count, as_string, boolean, comment_only, location, scalar, scalar_in_flow,
    skip_spaces, spanned, split_key, string, Scalar, Seen,
};

/// Above this, serde-saphyr's own size budgets could refuse the file: its path decides.
const MAX_LEN: usize = 32 << 20;
/// Nesting of descriptors kept well inside serde-saphyr's depth budget (64 YAML levels).
const MAX_LEVELS: usize = 20;

/// `content` as the raw types, if it is within the fast path's shape; else `None`.
pub(super) fn parse(content: &str) -> Option<RawFile> {
    // Printable ASCII and newlines only: YAML forbids most control bytes, and tabs and CR
    // have rules of their own; serde-saphyr decides all of those.
    let plain = |b: u8| (0x20..=0x7e).contains(&b) || b == b'\n';
    // In blocks without an early exit, so the check vectorises (a byte at a time was a tenth
    // of the parse).
    let all_plain = content
        .as_bytes()
        .chunks(64)
        .all(|c| c.iter().fold(true, |ok, &b| ok & plain(b)));
    if content.len() > MAX_LEN || !all_plain {
        return None;
    }
    let mut p = Lines::new(content);
    if p.lines.first()?.indent != 0 {
        return None;
    }
    let file = p.file()?;
    (p.at == p.lines.len()).then_some(file)
}

/// One line holding something: 1-based number, its indent, the text from there.
struct Line<'a> {
    no: u32,
    indent: usize,
    text: &'a str,
}

struct Lines<'a> {
    lines: Vec<Line<'a>>,
    at: usize,
}

impl<'a> Lines<'a> {
    fn new(content: &'a str) -> Self {
        let lines = content
            .split_terminator('\n')
            .zip(1..)
            .filter_map(|(line, no)| {
                let indent = line.bytes().take_while(|&b| b == b' ').count();
                let text = &line[indent..];
                (!text.is_empty() && !text.starts_with('#')).then_some(Line { no, indent, text })
            })
            .collect();
        Lines { lines, at: 0 }
    }

    /// The current line, if it is at `indent` exactly; `Err` if it is deeper (no shape of ours).
    fn at_indent(&self, indent: usize) -> Result<Option<&Line<'a>>, ()> {
        match self.lines.get(self.at) {
            Some(l) if l.indent == indent => Ok(Some(l)),
            Some(l) if l.indent > indent => Err(()),
            _ => Ok(None),
        }
    }

    /// The keys of the block map whose keys stand at `indent`, each handed to `field` with
    /// what follows its colon; `field` returns false for a key it does not take.
    fn block_map(
        &mut self,
        indent: usize,
        mut field: impl FnMut(&mut Self, &'a str, u32, usize, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut seen = Seen::default();
        while let Some(line) = self.at_indent(indent).ok()? {
            let (no, text) = (line.no, line.text);
            let (key, rest) = split_key(text)?;
            if !(rest.is_empty() || rest.starts_with(' ')) || !seen.first(key) {
                return None;
            }
            self.at += 1;
            // Only spaces can lead it: the file is printable ASCII, a line has no newline.
            let value = skip_spaces(rest);
            let value_column = indent + key.len() + 1 + (rest.len() - value.len());
            field(self, key, no, value_column + 1, value)?;
        }
        Some(())
    }

    /// The block value below a key at `indent` whose line ended at its colon: a list (at that
    /// indent or deeper) or a map (deeper). The indent of the first line, and whether it
    /// starts a list.
    fn nested(&self, indent: usize) -> Option<(usize, bool)> {
        let line = self.lines.get(self.at)?;
        let list = line.text == "-" || line.text.starts_with("- ");
        (line.indent > indent || (list && line.indent == indent)).then_some((line.indent, list))
    }

    /// A block list of maps below a key at `indent`, each item read by `item` at its map's
    /// indent and pushed onto the list; the list's location is its first dash. (Items are
    /// built in place: a descriptor is kilobytes, and each move of one was a copy.)
    fn list<T>(
        &mut self,
        indent: usize,
        rest: &str,
        mut item: impl FnMut(&mut Self, usize, &mut Vec<T>) -> Option<()>,
    ) -> Option<(Vec<T>, Location)> {
        if !rest.is_empty() {
            return None;
        }
        let (dash, true) = self.nested(indent)? else {
            return None;
        };
        let first = &self.lines[self.at];
        let loc = location(first.no, dash + 1)?;
        // Sized up front: the items are large, and each doubling would copy them all.
        let mut items = Vec::with_capacity(self.items_at(dash));
        while let Some(line) = self.at_indent(dash).ok()? {
            let text = line.text;
            // A line at the dash's indent that is no item: the next key of the parent map.
            let Some(body) = text.strip_prefix("- ") else {
                break;
            };
            let inner = skip_spaces(body);
            // The item's map starts on the dash's line: its keys stand where the first one does.
            let map_indent = dash + text.len() - inner.len();
            let line = &mut self.lines[self.at];
            line.indent = map_indent;
            line.text = inner;
            item(self, map_indent, &mut items)?;
        }
        Some((items, loc))
    }

    /// How many items the block list whose dashes stand at `dash` has from the current line
    /// on (an estimate for its capacity: the items are read by [`Self::list`]).
    fn items_at(&self, dash: usize) -> usize {
        self.lines[self.at..]
            .iter()
            .take_while(|l| l.indent > dash || (l.indent == dash && l.text.starts_with("- ")))
            .filter(|l| l.indent == dash)
            .count()
    }

    fn file(&mut self) -> Option<RawFile> {
        let mut f = RawFile {
            domain: None,
            descriptors: None,
            allow_refunds: false,
            allow_reservations: false,
            on_store_error: None,
            redis_hash_tag: None,
            allow_overrides: true,
        };
        self.block_map(0, |p, key, no, col, rest| {
            match key {
                "domain" => f.domain = Some(string(no, col, rest)?),
                "on_store_error" => f.on_store_error = Some(string(no, col, rest)?),
                "redis_hash_tag" => f.redis_hash_tag = Some(string(no, col, rest)?),
                "allow_refunds" => f.allow_refunds = boolean(no, col, rest)?.value,
                "allow_reservations" => f.allow_reservations = boolean(no, col, rest)?.value,
                "allow_overrides" => f.allow_overrides = boolean(no, col, rest)?.value,
                "descriptors" => f.descriptors = Some(p.descriptors(0, rest, 1)?),
                _ => return None,
            }
            Some(())
        })?;
        Some(f)
    }

    fn descriptors(
        &mut self,
        indent: usize,
        rest: &str,
        level: usize,
    ) -> Option<Vec<Spanned<RawDescriptor>>> {
        if level > MAX_LEVELS {
            return None;
        }
        let (list, _) = self.list(indent, rest, |p, at, out| p.descriptor(at, level, out))?;
        Some(list)
    }

    /// Reads the descriptor at the current line onto `out`.
    fn descriptor(
        &mut self,
        indent: usize,
        level: usize,
        out: &mut Vec<Spanned<RawDescriptor>>,
    ) -> Option<()> {
        let loc = location(self.lines[self.at].no, indent + 1)?;
        out.push(spanned(empty_descriptor(), loc));
        let d = &mut out.last_mut()?.value;
        self.block_map(indent, |p, key, no, col, rest| {
            match key {
                "key" => d.key = Some(string(no, col, rest)?),
                "value" => d.value = Some(string(no, col, rest)?),
                "rate_limit" => p.rate_limit(indent, no, col, rest, &mut d.rate_limit)?,
                "rate_limits" => {
                    let (list, loc) = p.list(indent, rest, |p, at, out| {
                        let loc = location(p.lines[p.at].no, at + 1)?;
                        out.push(spanned(empty_limit(), loc));
                        p.limit_block(at, &mut out.last_mut()?.value)
                    })?;
                    d.rate_limits = Some(spanned(list, loc));
                }
                "descriptors" => d.descriptors = Some(p.descriptors(indent, rest, level + 1)?),
                "shadow_mode" => d.shadow_mode = boolean(no, col, rest)?.value,
                "detailed_metric" => d.detailed_metric = boolean(no, col, rest)?.value,
                "value_to_metric" => d.value_to_metric = boolean(no, col, rest)?.value,
                "quota_mode" => d.quota_mode = boolean(no, col, rest)?.value,
                "share_threshold" => d.share_threshold = Some(boolean(no, col, rest)?),
                _ => return None,
            }
            Some(())
        })
    }

    /// A `rate_limit` into `slot`: a one-line flow map after the key, or a block map below it.
    fn rate_limit(
        &mut self,
        indent: usize,
        no: u32,
        col: usize,
        rest: &'a str,
        slot: &mut Option<Spanned<RawRateLimit>>,
    ) -> Option<()> {
        if !rest.is_empty() {
            let l = slot.insert(spanned(empty_limit(), location(no, col)?));
            return flow_limit(no, col, rest, &mut l.value);
        }
        let (inner, false) = self.nested(indent)? else {
            return None;
        };
        let loc = location(self.lines[self.at].no, inner + 1)?;
        let l = slot.insert(spanned(empty_limit(), loc));
        self.limit_block(inner, &mut l.value)
    }

    fn limit_block(&mut self, indent: usize, l: &mut RawRateLimit) -> Option<()> {
        self.block_map(indent, |p, key, no, col, rest| {
            if key == "replaces" {
                let (list, _) = p.list(indent, rest, |p, at, out| {
                    let loc = location(p.lines[p.at].no, at + 1)?;
                    let mut name = None;
                    p.block_map(at, |_, key, no, col, rest| {
                        (key == "name").then_some(())?;
                        name = Some(string(no, col, rest)?);
                        Some(())
                    })?;
                    out.push(spanned(RawReplaces { name }, loc));
                    Some(())
                })?;
                l.replaces = Some(list);
                return Some(());
            }
            limit_field(l, key, scalar(no, col, rest)?)
        })
    }
}

fn empty_descriptor() -> RawDescriptor {
    RawDescriptor {
        key: None,
        value: None,
        rate_limit: None,
        rate_limits: None,
        descriptors: None,
        shadow_mode: false,
        detailed_metric: false,
        value_to_metric: false,
        share_threshold: None,
        quota_mode: false,
        metadata: None,
    }
}

fn empty_limit() -> RawRateLimit {
    RawRateLimit {
        requests_per_unit: None,
        unit: None,
        unlimited: false,
        name: None,
        replaces: None,
        charge: None,
        on_store_error: None,
        window: None,
        algorithm: None,
        max_in_flight: None,
        lease_time: None,
        burst: None,
        precision: None,
        align: None,
        timezone: None,
    }
}

/// One scalar field of a limit.
fn limit_field(l: &mut RawRateLimit, key: &str, s: Scalar<'_>) -> Option<()> {
    let text = || as_string(&s).map(|t| spanned(t, s.loc));
    let count = || as_count(&s).map(|c| spanned(c, s.loc));
    match key {
        "requests_per_unit" => l.requests_per_unit = Some(count()?),
        "max_in_flight" => l.max_in_flight = Some(count()?),
        "burst" => l.burst = Some(count()?),
        "precision" => l.precision = Some(count()?),
        "unlimited" => l.unlimited = as_bool(&s)?,
        "unit" => l.unit = Some(text()?),
        "name" => l.name = Some(text()?),
        "charge" => l.charge = Some(text()?),
        "on_store_error" => l.on_store_error = Some(text()?),
        "window" => l.window = Some(text()?),
        "algorithm" => l.algorithm = Some(text()?),
        "lease_time" => l.lease_time = Some(text()?),
        "align" => l.align = Some(text()?),
        "timezone" => l.timezone = Some(text()?),
        _ => return None,
    }
    Some(())
}

/// `{key: value, ...}` on one line (`text` starts at column `col` of line `no`), with nothing
/// after it but a comment.
fn flow_limit(no: u32, col: usize, text: &str, l: &mut RawRateLimit) -> Option<()> {
    let mut rest = text.strip_prefix('{')?;
    let mut seen = Seen::default();
    loop {
        rest = skip_spaces(rest);
        let (key, after) = split_key(rest)?;
        if !after.starts_with(' ') || key == "replaces" || !seen.first(key) {
            return None;
        }
        let value = skip_spaces(after);
        let value_col = col + (text.len() - value.len());
        let (s, tail) = scalar_in_flow(no, value_col, value)?;
        limit_field(l, key, s)?;
        rest = skip_spaces(tail);
        if let Some(tail) = rest.strip_prefix('}') {
            return comment_only(tail).then_some(());
        }
        rest = rest.strip_prefix(',')?;
    }
}

mod scalar;
#[cfg(test)]
mod tests;
