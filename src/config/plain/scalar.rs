//! The scalars of the fast path (see [`super`]): plain or quoted one-line scalars, typed as
//! serde-saphyr would type them, with their positions; and the keys of a map.

use serde::de::value::{BorrowedStrDeserializer, Error, U32Deserializer};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use crate::config::raw::Count;

/// A scalar: where it starts (1-based column), its text, whether it was quoted.
pub(super) struct Scalar<'a> {
    pub loc: Location,
    pub text: &'a str,
    pub quoted: bool,
}

/// A 1-based line and column as a serde-saphyr [`Location`] (its constructor is the crate's
/// own; its `Deserialize` takes the two numbers). Read from a two-entry map of our own: serde's
/// `MapDeserializer` cost a tenth of the parse (six locations per rule).
pub(super) fn location(line: u32, column: usize) -> Option<Location> {
    let column = u32::try_from(column).ok()?;
    Location::deserialize(LineColumn {
        values: [line, column],
        next: 0,
    })
    .ok()
}

/// `{line: .., column: ..}` as a serde map.
struct LineColumn {
    values: [u32; 2],
    next: usize,
}

impl<'de> Deserializer<'de> for LineColumn {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for LineColumn {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let key = match self.next {
            0 => "line",
            1 => "column",
            _ => return Ok(None),
        };
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self.values[self.next];
        self.next += 1;
        seed.deserialize(U32Deserializer::new(value))
    }
}

pub(super) fn spanned<T>(value: T, loc: Location) -> Spanned<T> {
    Spanned::new(value, loc, loc)
}

/// `key: rest` with a key of ours (lowercase letters and `_`), split at the first colon.
pub(super) fn split_key(text: &str) -> Option<(&str, &str)> {
    // One pass: any other byte before the colon refuses the line as scanning on would.
    let len = text
        .bytes()
        .take_while(|&b| b.is_ascii_lowercase() || b == b'_')
        .count();
    let rest = text[len..].strip_prefix(':')?;
    (len > 0).then(|| (&text[..len], rest))
}

/// The keys of one map so far, without an allocation per map. No map of ours has more than
/// 15 keys: one with more holds a key we do not take, so it is refused either way.
#[derive(Default)]
pub(super) struct Seen<'a> {
    keys: [&'a str; 16],
    len: usize,
}

impl<'a> Seen<'a> {
    /// Records `key`; false if it was seen before, or there are too many keys.
    pub(super) fn first(&mut self, key: &'a str) -> bool {
        if self.len == self.keys.len() || self.keys[..self.len].contains(&key) {
            return false;
        }
        self.keys[self.len] = key;
        self.len += 1;
        true
    }
}

/// `text` without its leading spaces (a byte loop: `trim_start_matches` sets up a searcher for
/// the usual zero or one space).
pub(super) fn skip_spaces(text: &str) -> &str {
    &text[text.bytes().take_while(|&b| b == b' ').count()..]
}

/// Whether `tail` (after a value) holds nothing or a comment.
pub(super) fn comment_only(tail: &str) -> bool {
    let t = skip_spaces(tail);
    t.is_empty() || (t.starts_with('#') && t.len() < tail.len())
}

/// A plain scalar's characters: none of YAML's indicators, no space.
pub(super) fn plain_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-' | b'*')
}

/// A scalar in a flow map: the scalar and what follows it.
pub(super) fn scalar_in_flow<'a>(
    no: u32,
    col: usize,
    text: &'a str,
) -> Option<(Scalar<'a>, &'a str)> {
    let (s, len) = scalar_prefix(no, col, text)?;
    Some((s, &text[len..]))
}

/// A block scalar: the whole rest of the line but a comment.
pub(super) fn scalar(no: u32, col: usize, text: &str) -> Option<Scalar<'_>> {
    let (s, len) = scalar_prefix(no, col, text)?;
    comment_only(&text[len..]).then_some(s)
}

/// The scalar at the start of `text`, and its length there.
pub(super) fn scalar_prefix(no: u32, col: usize, text: &str) -> Option<(Scalar<'_>, usize)> {
    let loc = location(no, col)?;
    let quote = text.as_bytes().first().copied()?;
    if quote == b'"' || quote == b'\'' {
        let body = &text[1..];
        let end = body.find(char::from(quote))?;
        let inner = &body[..end];
        // Escapes (`\` in double quotes, a doubled quote in single ones) take serde-saphyr's path.
        if (quote == b'"' && inner.contains('\\')) || body[end + 1..].starts_with('\'') {
            return None;
        }
        let s = Scalar {
            loc,
            text: inner,
            quoted: true,
        };
        return Some((s, end + 2));
    }
    let len = text.bytes().take_while(|&b| plain_char(b)).count();
    (len > 0).then_some(())?;
    let s = Scalar {
        loc,
        text: &text[..len],
        quoted: false,
    };
    Some((s, len))
}

/// A scalar where a string goes: quoted, or plain and no other YAML type's spelling (no
/// null, bool or number; those take serde-saphyr's path).
pub(super) fn as_string(s: &Scalar<'_>) -> Option<String> {
    if s.quoted {
        return Some(s.text.to_owned());
    }
    let first = s.text.as_bytes()[0];
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'/') {
        return None;
    }
    const OTHER_TYPES: [&str; 11] = [
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf",
    ];
    if OTHER_TYPES.iter().any(|w| s.text.eq_ignore_ascii_case(w)) {
        return None;
    }
    Some(s.text.to_owned())
}

pub(super) fn as_bool(s: &Scalar<'_>) -> Option<bool> {
    match (s.quoted, s.text) {
        (false, "true") => Some(true),
        (false, "false") => Some(false),
        _ => None,
    }
}

/// A plain decimal number, as serde-saphyr hands it to [`Count`] (`visit_u64`).
pub(super) fn as_count(s: &Scalar<'_>) -> Option<Count> {
    let t = s.text;
    if s.quoted || t.len() > 19 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if t.len() > 1 && t.starts_with('0') {
        return None;
    }
    let n: u64 = t.parse().ok()?;
    Some(Count(
        u32::try_from(n).map_err(|_| crate::config::raw::NOT_A_COUNT),
    ))
}

pub(super) fn string(no: u32, col: usize, rest: &str) -> Option<Spanned<String>> {
    let s = scalar(no, col, rest)?;
    Some(spanned(as_string(&s)?, s.loc))
}

pub(super) fn boolean(no: u32, col: usize, rest: &str) -> Option<Spanned<bool>> {
    let s = scalar(no, col, rest)?;
    Some(spanned(as_bool(&s)?, s.loc))
}
