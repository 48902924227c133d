//! The YAML as serde reads it: envoyproxy/ratelimit's format plus sluice's extensions.
//! These types are never used past validation; [`compile`](mod@super::compile) turns them into rules.
//! They ignore unknown keys, which [`super::keys`] reports, each one, without stopping the
//! parse (serde's `deny_unknown_fields` would hide every later error of the file): each type's
//! derived code is its inherent `deserialize` (`remote = "Self"`), which its `Deserialize`
//! calls through [`Checked`], collecting the unknown keys as the map is read.

use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use super::checked::Checked;

/// `Deserialize` for a raw type: its derived code, with its map's unknown keys collected.
macro_rules! checked {
    ($($raw:ident),*) => {$(
        impl<'de> Deserialize<'de> for $raw {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // The inherent function: the derived code.
                $raw::deserialize(Checked(d))
            }
        }
    )*};
}

checked!(RawFile, RawDescriptor, RawRateLimit, RawReplaces);

/// One config file: one domain.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub struct RawFile {
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
    /// sluice: accept `is_negative_hits` refunds for this domain (off by default).
    #[serde(default)]
    pub allow_refunds: bool,
    /// sluice: accept `sluice.v1` Reserve calls for this domain (off by default).
    #[serde(default)]
    pub allow_reservations: bool,
    /// sluice: what the domain's requests get when the store fails (overrides
    /// `--on-store-error`): unavailable, allow, deny or local.
    pub on_store_error: Option<Spanned<String>>,
    /// sluice: `descriptor` (default) or `domain`: the Redis Cluster hash tag of the domain's
    /// keys; `domain` puts them all in one slot, so a request is decided exactly in one call.
    pub redis_hash_tag: Option<Spanned<String>>,
    /// sluice: accept a descriptor's `limit` override for this domain (on by default, as
    /// Envoy sends them); `false` refuses them with PERMISSION_DENIED.
    #[serde(default = "yes")]
    pub allow_overrides: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub struct RawDescriptor {
    pub key: Option<Spanned<String>>,
    pub value: Option<Spanned<String>>,
    pub rate_limit: Option<Spanned<RawRateLimit>>,
    /// sluice: several limits on one descriptor, all of which must pass.
    pub rate_limits: Option<Spanned<Vec<Spanned<RawRateLimit>>>>,
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    pub share_threshold: Option<Spanned<bool>>,
    #[serde(default)]
    pub quota_mode: bool,
    /// Returned in the response's dynamic metadata when the descriptor is within its limit.
    pub metadata: Option<Spanned<serde_json::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub struct RawRateLimit {
    pub requests_per_unit: Option<Spanned<Count>>,
    pub unit: Option<Spanned<String>>,
    #[serde(default)]
    pub unlimited: bool,
    pub name: Option<Spanned<String>>,
    pub replaces: Option<Vec<Spanned<RawReplaces>>>,
    /// sluice: `always` charges even rejected requests; `if_admitted` (the default unless
    /// `--charge-rejected`) only admitted ones.
    pub charge: Option<Spanned<String>>,
    /// sluice: the failure policy of this limit (overrides the domain's and the flag's).
    pub on_store_error: Option<Spanned<String>>,
    /// sluice: a window of any length (`500ms`, `30s`, `5m`, `2h`, `7d`) instead of `unit`.
    pub window: Option<Spanned<String>>,
    /// sluice: fixed_window (default), sliding_window, sliding_log, token_bucket,
    /// leaky_bucket, gcra, distinct or concurrency.
    pub algorithm: Option<Spanned<String>>,
    /// sluice: concurrency: the most requests in flight (instead of requests_per_unit).
    pub max_in_flight: Option<Spanned<Count>>,
    /// sluice: concurrency: how long a lease lasts if it is never released (default 60s).
    pub lease_time: Option<Spanned<String>>,
    /// sluice: bucket capacity / gcra burst (default: requests_per_unit).
    pub burst: Option<Spanned<Count>>,
    /// sluice: sliding_window sub-windows per window (default 10).
    pub precision: Option<Spanned<Count>>,
    /// sluice: `calendar` aligns windows to local hours, days, weeks, months or years.
    pub align: Option<Spanned<String>>,
    /// sluice: the IANA time zone of `align: calendar` (default UTC).
    pub timezone: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub struct RawReplaces {
    pub name: Option<Spanned<String>>,
}

/// A whole number from 0 to `u32::MAX` (`requests_per_unit`, `burst`, `precision`). Any other
/// value is kept as its error instead of ending the parse, so the file's later errors are
/// reported too ([`super::validate`] reports this one, at the value).
#[derive(Debug)]
pub struct Count(pub Result<u32, &'static str>);

/// The message of a value that is no [`Count`].
pub(crate) const NOT_A_COUNT: &str = "invalid u32: expected a whole number from 0 to 4294967295";

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number from 0 to 4294967295")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
        Ok(Count(u32::try_from(v).map_err(|_| NOT_A_COUNT)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
        Ok(Count(u32::try_from(v).map_err(|_| NOT_A_COUNT)))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
        Ok(Count(Err(NOT_A_COUNT)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
        Ok(Count(Err(NOT_A_COUNT)))
    }

    /// A quoted number (`"5"`) counts, as serde-saphyr's own u32 reads it.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
        Ok(Count(v.parse().map_err(|_| NOT_A_COUNT)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(Err(NOT_A_COUNT)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(Err(NOT_A_COUNT)))
    }
}

/// The field names a derived `Deserialize` accepts: it hands them to `deserialize_struct`,
/// where this deserializer records them and stops.
pub(super) fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

struct FieldNames<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
