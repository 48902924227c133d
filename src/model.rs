//! Plain data shared by every layer: time, units, and the request as the limiter sees it
//! (decoded from protobuf, bytes kept as bytes).

use std::fmt;

/// Microseconds since the Unix epoch (or a duration in microseconds). Microseconds, not
/// nanoseconds, so that every value the Redis Lua scripts handle stays below 2^53.
pub type Micros = i64;

pub const MICROS_PER_MILLI: Micros = 1_000;
pub const MICROS_PER_SEC: Micros = 1_000_000;

/// The time units of envoyproxy/ratelimit. Week, month and year are fixed 7-, 30- and 365-day
/// windows aligned to the epoch, as there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    pub fn seconds(self) -> i64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    pub fn micros(self) -> Micros {
        self.seconds() * MICROS_PER_SEC
    }

    /// The value of `RateLimitResponse.RateLimit.Unit` (WEEK is 7 there).
    pub fn proto_value(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// From `envoy.type.v3.RateLimitUnit` / `RateLimitResponse.RateLimit.Unit`; 0 (UNKNOWN) and
    /// unknown numbers give `None`.
    pub fn from_proto(v: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.proto_value() == v)
    }

    /// The largest unit not longer than `window` (at least SECOND): what `current_limit.unit`
    /// reports for an arbitrary window (`requests_per_unit` stays per the exact window).
    pub fn nearest(window: Micros) -> Unit {
        let mut best = Unit::Second;
        for u in Unit::ALL {
            if u.micros() <= window {
                best = u;
            }
        }
        best
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `key: value` pair of a descriptor. Bytes, not strings: Envoy forwards header bytes as
/// they are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// A request-supplied limit that replaces the configured rate and unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    pub requests_per_unit: u32,
    pub unit: Unit,
}

/// One descriptor of a request, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<Entry>,
    pub limit_override: Option<LimitOverride>,
    /// Hits this descriptor adds (already resolved against the request-level `hits_addend`).
    pub hits: u64,
    /// `is_negative_hits`: give the hits back instead of taking them.
    pub refund: bool,
}

/// A validated `ShouldRateLimit` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
}

/// Renders bytes for logs and messages: UTF-8 shown as is with control characters escaped,
/// other bytes as `\xNN`.
pub fn display_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_trip_through_the_proto() {
        for u in Unit::ALL {
            assert_eq!(Unit::from_proto(u.proto_value()), Some(u));
        }
        assert_eq!(Unit::from_proto(0), None);
        assert_eq!(Unit::Month.seconds(), 2_592_000);
    }

    #[test]
    fn nearest_unit() {
        assert_eq!(Unit::nearest(30 * MICROS_PER_SEC), Unit::Second);
        assert_eq!(Unit::nearest(90 * MICROS_PER_SEC), Unit::Minute);
        assert_eq!(Unit::nearest(MICROS_PER_MILLI), Unit::Second);
    }

    #[test]
    fn display_bytes_escapes() {
        assert_eq!(display_bytes(b"a\xffb\n"), "a\\xffb\\n");
    }
}
