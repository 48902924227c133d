//! The IETF RateLimit header fields of draft-ietf-httpapi-ratelimit-headers-10: one quota
//! policy item per limit in `RateLimit-Policy` (`"name";q=..;qu=..;w=..;pk=:..:`) and one
//! service limit item per limit in `RateLimit` (`"name";r=..;t=..;pk=:..:`), serialised as
//! Structured Field Lists (RFC 9651). Pure: the caller maps its limits and verdicts onto
//! [`QuotaItem`]s (RLS in [`super::assemble`], the native API in `service/`).
//!
//! Grammar kept here (RFC 9651, section 4.1): the item value is a String (draft-10, section
//! 3: "The Item value MUST be a String"), so only printable ASCII; other bytes of a name are
//! written `%XX` (a rule name may be any UTF-8). Integers are at most 15 digits, so values are
//! capped at 999,999,999,999,999. `w` is a non-zero number of seconds (sub-second windows round
//! up to 1). `pk` is a Byte Sequence (base64 with padding between colons).

use base64::Engine as _;

use crate::model::{Micros, MICROS_PER_SEC};

/// The field names, as the draft spells them.
pub(crate) const POLICY_FIELD: &str = "RateLimit-Policy";
pub(crate) const RATELIMIT_FIELD: &str = "RateLimit";

/// The largest Integer a Structured Field can carry (RFC 9651, section 3.3.1).
pub(crate) const MAX_INTEGER: u64 = 999_999_999_999_999;

/// Bytes of SHA-256 kept in a partition key: enough that two partitions of one policy do not
/// collide by chance, short enough for a header.
pub(crate) const PARTITION_KEY_LEN: usize = 16;

/// The quota units of the draft's registry (section 3.1.2) that sluice counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuotaUnit {
    /// The default: `qu` is left out.
    Requests,
    /// Requests in flight (the concurrency algorithm): no window.
    ConcurrentRequests,
}

impl QuotaUnit {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
        }
    }
}

/// One limit as both fields describe it: the policy (`name`, `quota`, `unit`, `window_secs`)
/// and its current state for this request (`remaining`, `reset_secs`), in one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuotaItem<'a> {
    /// The policy's name: the limit's `name`, else the rule's full key (see README.md).
    pub name: &'a str,
    /// `q`: the quota per window (or the requests allowed in flight).
    pub quota: u64,
    /// `qu`; [`QuotaUnit::Requests`] is the draft's default and is not written.
    pub unit: QuotaUnit,
    /// `w`, in whole seconds (see [`window_secs`]); `None` leaves it out (concurrency).
    pub window_secs: Option<u64>,
    /// `r`: what is left for this partition.
    pub remaining: u64,
    /// `t`: seconds until more quota is available (see [`reset_secs`]); `None` leaves it out.
    pub reset_secs: Option<u64>,
    /// `pk`: the partition's key (see [`partition_key`]); `None` when the limit has one
    /// counter for every request.
    pub partition: Option<&'a [u8]>,
}

/// The `RateLimit-Policy` value: one quota policy item per entry of `items`. Empty for no
/// items (the field must then be left out: the draft wants a non-empty List).
pub(crate) fn policy_field(items: &[QuotaItem<'_>]) -> String {
    let mut out = String::new();
    for item in items {
        start_item(&mut out, item.name);
        integer_param(&mut out, "q", item.quota);
        if item.unit != QuotaUnit::Requests {
            out.push_str(";qu=");
            string(&mut out, item.unit.as_str());
        }
        if let Some(w) = item.window_secs {
            integer_param(&mut out, "w", w.max(1));
        }
        partition_param(&mut out, item.partition);
    }
    out
}

/// The `RateLimit` value: one service limit item per entry of `items`. Empty for no items.
pub(crate) fn ratelimit_field(items: &[QuotaItem<'_>]) -> String {
    let mut out = String::new();
    for item in items {
        start_item(&mut out, item.name);
        integer_param(&mut out, "r", item.remaining);
        if let Some(t) = item.reset_secs {
            integer_param(&mut out, "t", t);
        }
        partition_param(&mut out, item.partition);
    }
    out
}

/// Both fields as (name, value) header pairs, `RateLimit-Policy` first; none for no items.
pub(crate) fn fields(items: &[QuotaItem<'_>]) -> Vec<(String, String)> {
    if items.is_empty() {
        return Vec::new();
    }
    vec![
        (POLICY_FIELD.to_string(), policy_field(items)),
        (RATELIMIT_FIELD.to_string(), ratelimit_field(items)),
    ]
}

/// A window in whole seconds for `w`: rounded up (a client pacing itself by `q` per `w` is
/// then never faster than the limit), at least 1 (the draft forbids 0).
pub(crate) fn window_secs(window: Micros) -> u64 {
    ceil_secs(window).max(1)
}

/// A time to reset in whole seconds for `t`: rounded up, so a client waiting that long is
/// never early; 0 for a past or zero reset.
pub(crate) fn reset_secs(reset: Micros) -> u64 {
    ceil_secs(reset)
}

fn ceil_secs(us: Micros) -> u64 {
    let us = u64::try_from(us).unwrap_or(0);
    us.div_ceil(MICROS_PER_SEC as u64)
}

/// The partition key of a counter: the first [`PARTITION_KEY_LEN`] bytes of the SHA-256 of
/// the values that select it (in descriptor order), each preceded by its length as a 4-byte
/// big-endian integer. Hashed, not raw, because the values are often credentials or addresses
/// (API keys, user ids) that a header should not echo; a client that knows its values can
/// compute the same key (README.md, "IETF headers").
pub(crate) fn partition_key<'v>(
    values: impl IntoIterator<Item = &'v [u8]>,
) -> [u8; PARTITION_KEY_LEN] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for v in values {
        // A value longer than 4 GiB cannot reach here (requests are size-limited first).
        let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
        ctx.update(&len.to_be_bytes());
        ctx.update(v);
    }
    let digest = ctx.finish();
    let mut key = [0; PARTITION_KEY_LEN];
    key.copy_from_slice(&digest.as_ref()[..PARTITION_KEY_LEN]);
    key
}

fn start_item(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    string(out, name);
}

fn integer_param(out: &mut String, key: &str, value: u64) {
    use std::fmt::Write as _;
    let _ = write!(out, ";{key}={}", value.min(MAX_INTEGER));
}

fn partition_param(out: &mut String, partition: Option<&[u8]>) {
    if let Some(pk) = partition {
        out.push_str(";pk=:");
        base64::engine::general_purpose::STANDARD.encode_string(pk, out);
        out.push(':');
    }
}

/// An sf-string: printable ASCII between quotes, `"` and `\` escaped; any other byte (control
/// characters, non-ASCII UTF-8) as `%XX`, which a String cannot carry.
fn string(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str) -> QuotaItem<'_> {
        QuotaItem {
            name,
            quota: 100,
            unit: QuotaUnit::Requests,
            window_secs: Some(60),
            remaining: 42,
            reset_secs: Some(17),
            partition: None,
        }
    }

    #[test]
    fn one_limit_as_the_drafts_examples() {
        let i = item("default");
        assert_eq!(policy_field(&[i]), r#""default";q=100;w=60"#);
        assert_eq!(ratelimit_field(&[i]), r#""default";r=42;t=17"#);
    }

    #[test]
    fn several_limits_a_unit_and_a_partition() {
        let pk = b"App-999";
        let items = [
            item("burst"),
            QuotaItem {
                unit: QuotaUnit::ConcurrentRequests,
                window_secs: None,
                reset_secs: None,
                quota: 8,
                remaining: 3,
                partition: Some(pk),
                ..item("in flight")
            },
        ];
        assert_eq!(
            policy_field(&items),
            r#""burst";q=100;w=60, "in flight";q=8;qu="concurrent-requests";pk=:QXBwLTk5OQ==:"#
        );
        assert_eq!(
            ratelimit_field(&items),
            r#""burst";r=42;t=17, "in flight";r=3;pk=:QXBwLTk5OQ==:"#
        );
        let f = fields(&items);
        assert_eq!(
            (f[0].0.as_str(), f[1].0.as_str()),
            (POLICY_FIELD, RATELIMIT_FIELD)
        );
        assert!(fields(&[]).is_empty(), "no items, no (empty) fields");
    }

    #[test]
    fn names_are_escaped_into_printable_ascii() {
        let cases = [
            (r#"a"b"#, r#""a\"b""#),
            (r"a\b", r#""a\\b""#),
            ("tab\there", r#""tab%09here""#),
            ("é", r#""%C3%A9""#),
            ("", r#""""#),
            ("edge.login_attempt_alice", r#""edge.login_attempt_alice""#),
        ];
        for (name, want) in cases {
            let got = ratelimit_field(&[item(name)]);
            assert_eq!(got, format!("{want};r=42;t=17"), "name {name:?}");
        }
    }

    #[test]
    fn integers_stay_in_range_and_windows_are_never_zero() {
        let big = QuotaItem {
            quota: u64::MAX,
            remaining: u64::MAX,
            reset_secs: Some(u64::MAX),
            window_secs: Some(0),
            ..item("x")
        };
        assert_eq!(policy_field(&[big]), r#""x";q=999999999999999;w=1"#);
        assert_eq!(
            ratelimit_field(&[big]),
            r#""x";r=999999999999999;t=999999999999999"#
        );
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(window_secs(1), 1);
        assert_eq!(window_secs(0), 1);
        assert_eq!(window_secs(60 * MICROS_PER_SEC), 60);
        assert_eq!(window_secs(60 * MICROS_PER_SEC + 1), 61);
        assert_eq!(reset_secs(0), 0);
        assert_eq!(reset_secs(-5), 0);
        assert_eq!(reset_secs(1), 1);
        assert_eq!(reset_secs(29_750_000), 30);
        assert_eq!(reset_secs(Micros::MAX), 9_223_372_036_855);
    }

    #[test]
    fn partition_keys_are_length_prefixed_sha256() {
        // sha256(b"\0\0\0\x09127.0.0.1")[:16], computed independently with Python's hashlib.
        let pk = partition_key([&b"127.0.0.1"[..]]);
        assert_eq!(hex(&pk), "af711e9abd9fd9abb14c83e3a27cca5e");
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            partition_key([&b"ab"[..], b"c"]),
            partition_key([&b"a"[..], b"bc"])
        );
        assert_ne!(partition_key([]), partition_key([&b""[..]]));
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// A parameter value as an independent RFC 9651 parser (the `sfv` crate) reads it.
    #[derive(Debug, PartialEq)]
    enum Param {
        Int(i64),
        Str(String),
        Bytes(Vec<u8>),
    }

    /// An item's parameters, in order.
    type Params = Vec<(String, Param)>;

    /// `field` parsed by `sfv` as a List of Items with String values: (name, parameters).
    fn parse(field: &str) -> Vec<(String, Params)> {
        let list: sfv::List = sfv::Parser::new(field)
            .parse()
            .unwrap_or_else(|e| panic!("{field:?} is not an sf-list: {e}"));
        list.into_iter()
            .map(|entry| {
                let sfv::ListEntry::Item(item) = entry else {
                    panic!("{field:?}: an inner list");
                };
                let name = item.bare_item.as_string().expect("a String item").as_str();
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let v = if let Some(i) = v.as_integer() {
                            Param::Int(i64::from(i))
                        } else if let Some(s) = v.as_string() {
                            Param::Str(s.as_str().to_string())
                        } else if let Some(b) = v.as_byte_sequence() {
                            Param::Bytes(b.to_vec())
                        } else {
                            panic!("{field:?}: parameter {} of another type", k.as_str())
                        };
                        (k.as_str().to_string(), v)
                    })
                    .collect();
                (name.to_string(), params)
            })
            .collect()
    }

    fn capped(v: u64) -> Param {
        Param::Int(v.min(MAX_INTEGER) as i64)
    }

    /// What both fields of `item` must parse to, in the draft's parameter order.
    fn expected(item: &QuotaItem<'_>) -> (Params, Params) {
        let p = |k: &str, v| (k.to_string(), v);
        let mut policy = vec![p("q", capped(item.quota))];
        if item.unit == QuotaUnit::ConcurrentRequests {
            policy.push(p("qu", Param::Str("concurrent-requests".into())));
        }
        if let Some(w) = item.window_secs {
            policy.push(p("w", capped(w.max(1))));
        }
        let mut limit = vec![p("r", capped(item.remaining))];
        if let Some(t) = item.reset_secs {
            limit.push(p("t", capped(t)));
        }
        if let Some(pk) = item.partition {
            policy.push(p("pk", Param::Bytes(pk.to_vec())));
            limit.push(p("pk", Param::Bytes(pk.to_vec())));
        }
        (policy, limit)
    }

    #[test]
    fn an_independent_parser_reads_every_example() {
        let pk = partition_key([&b"alice"[..]]);
        let items = [
            item("default"),
            QuotaItem {
                partition: Some(&pk),
                ..item(r#"q"uo\te"#)
            },
            QuotaItem {
                unit: QuotaUnit::ConcurrentRequests,
                window_secs: None,
                reset_secs: None,
                ..item("é tab\t")
            },
        ];
        let policy = parse(&policy_field(&items));
        let limit = parse(&ratelimit_field(&items));
        assert_eq!(policy.len(), 3);
        for (i, it) in items.iter().enumerate() {
            let (p, l) = expected(it);
            assert_eq!(policy[i].1, p, "{it:?}");
            assert_eq!(limit[i].1, l, "{it:?}");
        }
        assert_eq!(policy[1].0, r#"q"uo\te"#, "escapes round-trip");
        assert_eq!(limit[2].0, "%C3%A9 tab%09");
    }

    proptest::proptest! {
        /// Whatever the name, numbers and partition, both fields are sf-lists that an
        /// independent parser reads back to the same parameters; printable names round-trip.
        #[test]
        fn every_field_parses_back(
            names in proptest::collection::vec(".{0,12}", 1..4),
            quota in proptest::num::u64::ANY,
            window in proptest::option::of(proptest::num::u64::ANY),
            remaining in proptest::num::u64::ANY,
            reset in proptest::option::of(proptest::num::u64::ANY),
            concurrent in proptest::bool::ANY,
            partition in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..20)),
        ) {
            let items: Vec<QuotaItem<'_>> = names
                .iter()
                .map(|name| QuotaItem {
                    name,
                    quota,
                    unit: if concurrent { QuotaUnit::ConcurrentRequests } else { QuotaUnit::Requests },
                    window_secs: window,
                    remaining,
                    reset_secs: reset,
                    partition: partition.as_deref(),
                })
                .collect();
            let policy = parse(&policy_field(&items));
            let limit = parse(&ratelimit_field(&items));
            proptest::prop_assert_eq!(policy.len(), items.len());
            proptest::prop_assert_eq!(limit.len(), items.len());
            for (i, it) in items.iter().enumerate() {
                let (p, l) = expected(it);
                proptest::prop_assert_eq!(&policy[i].1, &p);
                proptest::prop_assert_eq!(&limit[i].1, &l);
                if it.name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                    proptest::prop_assert_eq!(&policy[i].0, it.name);
                }
            }
        }
    }
}
