//! RLQS wire <-> model: a bucket id is the descriptor formed by its entries sorted by key
//! (validated as an RLS request is, by the same limits), and an [`Assignment`] is a bucket
//! action.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::{Descriptor, Entry, Request};
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use crate::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use crate::proto::rate_limit_descriptor::Entry as ProtoEntry;
use crate::proto::rlqs::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::proto::rlqs::rate_limit_quota_response::BucketAction;
use crate::proto::rlqs::BucketId;
use crate::proto::{RateLimitDescriptor, RateLimitRequest};
use crate::service::convert;
use crate::service::limits::RequestLimits;

/// A bucket id's entries, sorted by key (the map's order).
pub(crate) type Id = BTreeMap<String, String>;

/// A bucket id as a stream holds it: the entries in key order, each key and value prefixed by
/// its length (4 bytes, little-endian), in one allocation. A `BTreeMap` of one entry allocates
/// a whole 640-byte node plus a `String` per key and value; at 10,000 streams of 100 buckets
/// that alone was 0.7 GB. Sorted and length-prefixed, equal ids have equal keys.
pub(crate) type Key = Box<[u8]>;

/// The key of `id` (its bytes, see [`Key`]).
pub(crate) fn key_of(id: &Id) -> Key {
    let len = id.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let mut out = Vec::with_capacity(len);
    for (k, v) in id {
        for s in [k, v] {
            // A bucket id is far below 4 GiB: tonic's report size bound is.
            out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out.into_boxed_slice()
}

/// The strings packed in a [`Key`], in order: a key, its value, the next key...
fn packed(key: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = key;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len))
            .ok()?
            .min(tail.len());
        let (s, tail) = tail.split_at(len);
        rest = tail;
        Some(s)
    })
}

/// The id a [`Key`] was made of (for the answers, which name it).
pub(crate) fn id_of(key: &[u8]) -> Id {
    let mut id = Id::new();
    // The bytes were a `String`'s: the lossy path is never taken.
    let mut strings = packed(key).map(|s| {
        String::from_utf8(s.to_vec())
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    });
    while let (Some(k), Some(v)) = (strings.next(), strings.next()) {
        id.insert(k, v);
    }
    id
}

/// What sluice tells Envoy to do with one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Assignment {
    AllowAll,
    DenyAll,
    /// A token bucket of `tokens` that does not refill; `generation` makes it differ from the
    /// bucket before it (Envoy keeps a bucket whose settings repeat).
    Tokens {
        tokens: u64,
        generation: u64,
    },
}

impl Assignment {
    /// The index of its `action` label of `sluice_rlqs_assignments_total` (`allow_all`,
    /// `deny_all`, `token_bucket`; `abandon` is the fourth) among those `stream.rs` counts.
    pub(crate) fn index(self) -> usize {
        match self {
            Assignment::AllowAll => 0,
            Assignment::DenyAll => 1,
            Assignment::Tokens { .. } => 2,
        }
    }
}

/// The request whose one descriptor is `id`'s entries in key order, checked against `limits`
/// and converted as an RLS request is (`Err`: the INVALID_ARGUMENT message).
pub(crate) fn request(domain: &str, id: &Id, limits: &RequestLimits) -> Result<Request, String> {
    if id.is_empty() {
        return Err("the bucket id has no entries".into());
    }
    let proto = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: id
                .iter()
                .map(|(k, v)| ProtoEntry {
                    key: k.clone().into_bytes(),
                    value: v.clone().into_bytes(),
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    limits.check(&proto)?;
    convert::request(proto)
}

/// The request of a bucket already checked by [`request`]: its one descriptor is the entries
/// packed in `key`, one hit. Built for each assessment rather than kept: at 100 buckets per
/// stream and 10,000 streams, a kept request was about 200 bytes a bucket.
pub(crate) fn request_of(domain: &str, key: &[u8]) -> Request {
    let mut entries = Vec::new();
    let mut strings = packed(key).map(<[u8]>::to_vec);
    while let (Some(key), Some(value)) = (strings.next(), strings.next()) {
        entries.push(Entry { key, value });
    }
    Request {
        domain: domain.to_string(),
        descriptors: vec![Descriptor {
            entries,
            limit_override: None,
            hits: 1,
            refund: false,
        }],
    }
}

/// Envoy's token bucket never refills within this interval (about 31 years): a grant is a
/// fixed number of tokens. Envoy divides by the whole seconds, so this must be at least 1 s.
const NO_REFILL_SECONDS: i64 = 1_000_000_000;

/// A bucket action as a stream queues it until the answer is encoded: the packed id and what
/// to send, where the wire's [`BucketAction`] holds the id as a map (a B-tree node and two
/// `String`s, about 700 bytes). A stream whose Envoy reads late holds up to two answers of
/// every bucket (one queued, one waiting for room): at 100 buckets, about 280 KB as wire
/// messages, about 10 KB as these. [`Pending::to_wire`] builds the messages when tonic encodes
/// the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub key: Key,
    /// `None`: abandon the bucket.
    pub assignment: Option<Assignment>,
    /// Passed to [`assignment`].
    pub fresh: bool,
}

impl Pending {
    /// The bucket actions it stands for ([`assignment`] or [`abandon`]).
    pub(crate) fn to_wire(&self, ttl: Duration, out: &mut Vec<BucketAction>) {
        match self.assignment {
            Some(a) => out.extend(assignment(&self.key, a, self.fresh, ttl)),
            None => out.push(abandon(&self.key)),
        }
    }

    /// The bytes its bucket actions take in an answer (as `bucket_action` entries), computed
    /// without building them.
    pub(crate) fn encoded_len(&self, ttl: Duration) -> usize {
        use prost::encoding::{encoded_len_varint, key_len};
        use prost::Message;
        let id = id_field_len(&self.key);
        let entry = |a: &BucketAction| {
            let len = id + a.encoded_len();
            key_len(1) + encoded_len_varint(len as u64) + len
        };
        match self.assignment {
            Some(a) => {
                let mut n = entry(&action_of(a, ttl));
                if self.fresh && matches!(a, Assignment::Tokens { .. }) {
                    n += entry(&action_of(Assignment::DenyAll, ttl));
                }
                n
            }
            None => entry(&abandon_of()),
        }
    }
}

/// The bytes of a bucket action's `bucket_id` field for the id packed in `key`: the map's
/// entries as prost encodes them (an empty key or value is left out).
fn id_field_len(key: &[u8]) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    let string = |s: &[u8]| {
        if s.is_empty() {
            0
        } else {
            key_len(1) + encoded_len_varint(s.len() as u64) + s.len()
        }
    };
    let mut map = 0;
    let mut strings = packed(key);
    while let (Some(k), Some(v)) = (strings.next(), strings.next()) {
        let entry = string(k) + string(v);
        map += key_len(1) + encoded_len_varint(entry as u64) + entry;
    }
    key_len(1) + encoded_len_varint(map as u64) + map
}

/// The bucket actions assigning `a` to `id` for `ttl`. A `fresh` grant of tokens comes after a
/// `DENY_ALL` for the same bucket in the same response: Envoy 1.40 starts a token bucket that
/// replaces another at the old one's fill ratio (so an emptied bucket's replacement would be
/// empty too), and full only when the bucket had no token bucket. Envoy applies a response's
/// actions in order and publishes the result once, so the denial is never in force.
pub(crate) fn assignment(
    id: &[u8],
    a: Assignment,
    fresh: bool,
    ttl: Duration,
) -> Vec<BucketAction> {
    let mut actions = Vec::with_capacity(2);
    if fresh && matches!(a, Assignment::Tokens { .. }) {
        actions.push(action(id, Assignment::DenyAll, ttl));
    }
    actions.push(action(id, a, ttl));
    actions
}

/// One bucket action assigning `a` to `id` for `ttl` (whole seconds: Envoy ignores the rest).
fn action(id: &[u8], a: Assignment, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(BucketId { bucket: id_of(id) }),
        ..action_of(a, ttl)
    }
}

/// [`action`] without its bucket id.
fn action_of(a: Assignment, ttl: Duration) -> BucketAction {
    let strategy = match a {
        Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assignment::Tokens { tokens, generation } => Strategy::TokenBucket(TokenBucket {
            max_tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
            tokens_per_fill: Some(1),
            // Envoy compares buckets by max_tokens, tokens_per_fill and the nanoseconds of
            // fill_interval: the generation goes there so that each grant is a new bucket.
            fill_interval: Some(prost_types::Duration {
                seconds: NO_REFILL_SECONDS,
                nanos: (generation % 1_000_000_000) as i32,
            }),
        }),
    };
    BucketAction {
        bucket_id: None,
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(prost_types::Duration {
                seconds: ttl.as_secs().max(1) as i64,
                nanos: 0,
            }),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// The bucket action telling Envoy to forget `id` (its rule is gone).
pub(crate) fn abandon(id: &[u8]) -> BucketAction {
    BucketAction {
        bucket_id: Some(BucketId { bucket: id_of(id) }),
        ..abandon_of()
    }
}

/// [`abandon`] without its bucket id.
fn abandon_of() -> BucketAction {
    BucketAction {
        bucket_id: None,
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pairs: &[(&str, &str)]) -> Id {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_key_gives_back_its_id_and_tells_ids_apart() {
        let ids = [
            id(&[("a", "bc")]),
            id(&[("ab", "c")]),
            id(&[("a", ""), ("b", "c")]),
            id(&[("", "")]),
            id(&[("user", "älice"), ("name", "api"), ("z", "1")]),
            Id::new(),
        ];
        for (i, x) in ids.iter().enumerate() {
            assert_eq!(id_of(&key_of(x)), *x);
            for y in &ids[i + 1..] {
                assert_ne!(key_of(x), key_of(y), "{x:?} {y:?}");
            }
        }
        // Bytes that no id made (a key is only ever made by `key_of`) give an id, not a panic.
        assert_eq!(id_of(&[9, 0, 0, 0, b'k']), Id::new());
        assert_eq!(id_of(&[1, 0, 0, 0, b'k', 0, 0]), Id::new());
    }

    #[test]
    fn a_bucket_is_its_entries_sorted_by_key() {
        let r = request(
            "edge",
            &id(&[("user", "alice"), ("name", "api")]),
            &RequestLimits::default(),
        )
        .unwrap();
        assert_eq!(r.domain, "edge");
        let keys: Vec<&[u8]> = r.descriptors[0]
            .entries
            .iter()
            .map(|e| &e.key[..])
            .collect();
        assert_eq!(keys, [&b"name"[..], b"user"]);
    }

    #[test]
    fn a_bucket_key_gives_the_request_it_was_checked_as() {
        let i = id(&[("user", "älice"), ("name", "api")]);
        let checked = request("edge", &i, &RequestLimits::default()).unwrap();
        assert_eq!(request_of("edge", &key_of(&i)), checked);
    }

    #[test]
    fn bad_buckets_are_refused_with_the_limit_named() {
        let limits = RequestLimits {
            max_value_bytes: 4,
            ..RequestLimits::default()
        };
        assert!(request("d", &Id::new(), &limits)
            .unwrap_err()
            .contains("no entries"));
        let e = request("d", &id(&[("k", "value")]), &limits).unwrap_err();
        assert!(e.contains("--max-value-bytes"), "{e}");
        let e = request("", &id(&[("k", "v")]), &limits).unwrap_err();
        assert!(e.contains("domain"), "{e}");
    }

    #[test]
    fn each_grant_is_a_different_token_bucket() {
        let bucket = |generation| match action(
            &key_of(&id(&[("k", "v")])),
            Assignment::Tokens {
                tokens: 3,
                generation,
            },
            Duration::from_secs(5),
        )
        .bucket_action
        {
            Some(Action::QuotaAssignmentAction(a)) => a,
            other => panic!("{other:?}"),
        };
        let (a, b) = (bucket(1), bucket(2));
        assert_eq!(a.assignment_time_to_live.unwrap().seconds, 5);
        assert_ne!(a.rate_limit_strategy, b.rate_limit_strategy);
    }

    #[test]
    fn a_pending_action_counts_the_bytes_of_its_wire_actions() {
        use prost::Message;
        let ttl = Duration::from_secs(5);
        let ids = [
            id(&[("k", "s1-b2")]),
            id(&[("", "v"), ("k", "")]),
            id(&[("user", "älice"), ("name", &"x".repeat(300))]),
        ];
        let grant = Assignment::Tokens {
            tokens: 1 << 40,
            generation: 123_456_789_012,
        };
        for i in &ids {
            for (assignment, fresh) in [
                (Some(grant), true),
                (Some(grant), false),
                (Some(Assignment::AllowAll), true),
                (Some(Assignment::DenyAll), false),
                (None, false),
            ] {
                let p = Pending {
                    key: key_of(i),
                    assignment,
                    fresh,
                };
                let mut wire = Vec::new();
                p.to_wire(ttl, &mut wire);
                let response = crate::proto::rlqs::RateLimitQuotaResponse {
                    bucket_action: wire,
                };
                assert_eq!(p.encoded_len(ttl), response.encoded_len(), "{p:?}");
            }
        }
    }

    #[test]
    fn a_fresh_grant_comes_after_a_denial_of_the_same_bucket() {
        let grant = Assignment::Tokens {
            tokens: 3,
            generation: 1,
        };
        let ttl = Duration::from_secs(5);
        let k = key_of(&id(&[("k", "v")]));
        let fresh = assignment(&k, grant, true, ttl);
        assert_eq!(
            fresh,
            [action(&k, Assignment::DenyAll, ttl), action(&k, grant, ttl)]
        );
        assert_eq!(assignment(&k, grant, false, ttl), [action(&k, grant, ttl)]);
        let deny = assignment(&k, Assignment::DenyAll, true, ttl);
        assert_eq!(deny, [action(&k, Assignment::DenyAll, ttl)]);
    }
}
