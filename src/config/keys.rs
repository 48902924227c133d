//! Unknown keys. serde's `deny_unknown_fields` stops the parse at the first unknown key; the
//! [`raw`](super::raw) types therefore ignore unknown keys, and this module reports each of
//! them with its position, without stopping the parse.
//!
//! They are collected during the typed parse itself ([`typed_with_unknown_keys`]: each raw
//! type reads its map through [`Checked`](super::checked::Checked)), so a file is walked once. A file whose typed parse
//! fails is walked again by [`unknown_keys`], which knows the shapes and goes on past type
//! errors, so that one error does not hide the file's unknown keys.
//!
//! The accepted keys of each map are the serde types' own field lists (read off their derived
//! `Deserialize`), so adding a field to a raw type is all it takes to accept its key.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use super::checked::{unknown_key, FOUND};
use super::error::{ConfigError, Position};
use super::raw::{fields_of, RawDescriptor, RawFile, RawRateLimit, RawReplaces};

/// The typed parse of `content`, with its unknown keys in file order; if the parse fails, its
/// error and nothing else (the keys met before it are no complete list).
pub(super) fn typed_with_unknown_keys(
    file: &Arc<str>,
    content: &str,
    opts: serde_saphyr::Options,
) -> Result<(Option<RawFile>, Vec<ConfigError>), serde_saphyr::Error> {
    /// Stops collecting even if the parse panics.
    struct Collecting;
    impl Drop for Collecting {
        fn drop(&mut self) {
            FOUND.with(|f| f.borrow_mut().take());
        }
    }
    let _collecting = Collecting;
    FOUND.with(|f| *f.borrow_mut() = Some(Vec::new()));
    let parsed = serde_saphyr::from_str_with_options::<Option<RawFile>>(content, opts)?;
    let found = FOUND.with(|f| f.borrow_mut().take()).unwrap_or_default();
    let found = found
        .into_iter()
        .map(|(at, message)| ConfigError::new(Position::at(file, at), message))
        .collect();
    Ok((parsed, found))
}

/// How many times a file that is no valid YAML is cut shorter to find the keys before its
/// error (each cut ends above the error of the previous try).
const CUTS: usize = 8;

/// Every unknown key of the file `content`, in file order, by a walk of its own (for a file
/// whose typed parse fails). In a file that is no valid YAML
/// (the typed parse reports its error), the keys above the error are still checked: the walk
/// runs again on the lines before it, as long as that is valid YAML (a flow map cut in its
/// middle is not, so the cut moves up to the line the error names in that prefix, a few times
/// at most).
pub(super) fn unknown_keys(
    file: &Arc<str>,
    content: &str,
    opts: serde_saphyr::Options,
) -> Vec<ConfigError> {
    let mut text = content;
    for _ in 0..=CUTS {
        match serde_saphyr::from_str_with_options::<Unknown>(text, opts.clone()) {
            Ok(Unknown(found)) => {
                return found
                    .into_iter()
                    .map(|(at, message)| ConfigError::new(Position::at(file, at), message))
                    .collect();
            }
            // A budget stop (an alias bomb) is no syntax error: a cut would spend it again.
            Err(e) if over_budget(&e) => break,
            Err(e) => match e.location().and_then(|l| line_start(text, l.line())) {
                Some(cut) if cut > 0 && cut < text.len() => text = &text[..cut],
                _ => break,
            },
        }
    }
    Vec::new()
}

/// Whether serde-saphyr stopped at one of its budgets rather than at an error in the text.
fn over_budget(mut e: &serde_saphyr::Error) -> bool {
    while let serde_saphyr::Error::WithSnippet { error, .. }
    | serde_saphyr::Error::AliasError { error, .. } = e
    {
        e = error;
    }
    matches!(
        e,
        serde_saphyr::Error::Budget { .. }
            | serde_saphyr::Error::AliasReplayLimitExceeded { .. }
            | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
            | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }
    )
}

/// The byte offset where 1-based `line` of `text` starts.
fn line_start(text: &str, line: u64) -> Option<usize> {
    if line <= 1 {
        return Some(0);
    }
    text.match_indices('\n')
        .nth(usize::try_from(line - 2).ok()?)
        .map(|(i, _)| i + 1)
}

/// The unknown keys of one file: where, and the message.
struct Unknown(Vec<(Location, String)>);

impl<'de> Deserialize<'de> for Unknown {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut found = Vec::new();
        Walk {
            shape: Shape::File,
            found: &mut found,
        }
        .deserialize(d)?;
        Ok(Unknown(found))
    }
}

/// What a YAML node is expected to be.
#[derive(Clone, Copy)]
enum Shape {
    File,
    Descriptor,
    RateLimit,
    Replaces,
    ListOf(Item),
    /// Anything: its keys are not checked (values, `metadata`).
    Free,
}

/// What a list holds.
#[derive(Clone, Copy)]
enum Item {
    Descriptor,
    RateLimit,
    Replaces,
}

impl Shape {
    /// The keys of a map of this shape, or `None` for no map to check.
    fn keys(self) -> Option<&'static [&'static str]> {
        match self {
            Shape::File => Some(fields_of::<RawFile>()),
            Shape::Descriptor => Some(fields_of::<RawDescriptor>()),
            Shape::RateLimit => Some(fields_of::<RawRateLimit>()),
            Shape::Replaces => Some(fields_of::<RawReplaces>()),
            Shape::ListOf(_) | Shape::Free => None,
        }
    }

    /// The shape of the value under `key` in a map of this shape.
    fn child(self, key: &str) -> Shape {
        match (self, key) {
            (Shape::File | Shape::Descriptor, "descriptors") => Shape::ListOf(Item::Descriptor),
            (Shape::Descriptor, "rate_limit") => Shape::RateLimit,
            (Shape::Descriptor, "rate_limits") => Shape::ListOf(Item::RateLimit),
            (Shape::RateLimit, "replaces") => Shape::ListOf(Item::Replaces),
            _ => Shape::Free,
        }
    }
}

struct Walk<'a> {
    shape: Shape,
    found: &'a mut Vec<(Location, String)>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if matches!(self.shape, Shape::Free) {
            return d.deserialize_ignored_any(IgnoredAny).map(|_| ());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(keys) = self.shape.keys() else {
            // A map where a list belongs: the typed parse says so.
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            if !keys.contains(&key.value.as_str()) {
                self.found
                    .push((key.referenced, unknown_key(&key.value, keys)));
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            map.next_value_seed(Walk {
                shape: self.shape.child(&key.value),
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let shape = match self.shape {
            Shape::ListOf(Item::Descriptor) => Shape::Descriptor,
            Shape::ListOf(Item::RateLimit) => Shape::RateLimit,
            Shape::ListOf(Item::Replaces) => Shape::Replaces,
            _ => Shape::Free,
        };
        while seq
            .next_element_seed(Walk {
                shape,
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }

    // Scalars where a map or a list belongs: the typed parse reports them.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lists_come_from_the_raw_types() {
        assert_eq!(fields_of::<RawReplaces>(), ["name"]);
        assert!(fields_of::<RawFile>().contains(&"on_store_error"));
        assert!(fields_of::<RawRateLimit>().contains(&"algorithm"));
    }

    #[test]
    fn an_alias_bomb_stops_at_the_budget() {
        // Nine levels of ten aliases each: 10^9 nodes if expanded.
        let mut yaml = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            yaml.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        let file: Arc<str> = "bomb.yaml".into();
        assert!(unknown_keys(&file, &yaml, serde_saphyr::Options::default()).is_empty());
    }

    #[test]
    fn the_typed_parse_finds_what_the_walk_finds() {
        let file: Arc<str> = "f.yaml".into();
        let yaml = "domain: d\nextra: 1\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n    rate_limits:\n      - {name: a, unit: second, replaces: [{nme: b}], speed: 3}\n    metadata: {anything: 1}\n    descriptors: [{key: n, 1: x, rate_limit: {unit: hour, x: y}}]\n";
        let opts = serde_saphyr::Options::default();
        let (raw, found) = typed_with_unknown_keys(&file, yaml, opts.clone()).unwrap();
        assert!(raw.is_some());
        assert_eq!(found.len(), 6);
        assert_eq!(found, unknown_keys(&file, yaml, opts));
        // Not collecting outside of it.
        assert!(FOUND.with(|f| f.borrow().is_none()));
    }

    #[test]
    fn every_unknown_key_at_every_level() {
        let file: Arc<str> = "f.yaml".into();
        let yaml = "domain: d\nextra: 1\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n    rate_limits:\n      - {name: a, unit: second, replaces: [{nme: b}], speed: 3}\n    metadata: {anything: 1}\n";
        let found: Vec<String> = unknown_keys(&file, yaml, serde_saphyr::Options::default())
            .iter()
            .map(|e| {
                let (k, _) = e.message.split_once(" (").unwrap();
                format!("{}:{} {k}", e.position.line, e.position.column)
            })
            .collect();
        assert_eq!(
            found,
            [
                "2:1 unknown key 'extra'",
                "5:5 unknown key 'ratelimit'",
                "7:45 unknown key 'nme'",
                "7:55 unknown key 'speed'",
            ]
        );
    }
}
