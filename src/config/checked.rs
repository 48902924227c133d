//! The raw types' deserializer ([`Checked`]): each map's keys are checked against the type's
//! fields while the typed parse reads them, and the unknown ones are collected in [`FOUND`]
//! (while `keys::typed_with_unknown_keys` runs), so a file is walked once.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

use crate::excerpt::excerpt;

thread_local! {
    /// The unknown keys met by this thread's typed parse, while [`typed_with_unknown_keys`]
    /// runs (the raw types' `Deserialize` takes no seed to carry them).
    pub(super) static FOUND: RefCell<Option<Vec<(Location, String)>>> = const { RefCell::new(None) };
}

/// The message of an unknown key in a map that accepts `keys`.
pub(super) fn unknown_key(key: &str, keys: &[&str]) -> String {
    format!(
        "unknown key '{}' (expected one of: {})",
        excerpt(key),
        keys.join(", ")
    )
}

/// A raw type's deserializer: its map's keys are checked against the type's fields as they are
/// read (the derived code asks for a struct, and names the fields).
pub(super) struct Checked<D>(pub(super) D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Checked<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        // Outside `typed_with_unknown_keys` (the parse again after an error), the derived
        // code alone, so the error is serde-saphyr's own.
        if !FOUND.with(|f| f.borrow().is_some()) {
            return self.0.deserialize_struct(name, fields, visitor);
        }
        self.0
            .deserialize_struct(name, fields, CheckedVisitor { visitor, fields })
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

struct CheckedVisitor<V> {
    visitor: V,
    fields: &'static [&'static str],
}

impl<'de, V: Visitor<'de>> Visitor<'de> for CheckedVisitor<V> {
    type Value = V::Value;

    // The derived visitor's own words, so that its errors read the same.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(CheckedMap {
            map,
            fields: self.fields,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }
}

struct CheckedMap<A> {
    map: A,
    fields: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for CheckedMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        // Read as the walk below reads keys, for the key's position.
        let Some(key) = self.map.next_key::<Spanned<String>>()? else {
            return Ok(None);
        };
        if !self.fields.contains(&key.value.as_str()) {
            FOUND.with(|f| {
                if let Some(found) = f.borrow_mut().as_mut() {
                    found.push((key.referenced, unknown_key(&key.value, self.fields)));
                }
            });
        }
        seed.deserialize(de::value::StringDeserializer::<A::Error>::new(key.value))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}
