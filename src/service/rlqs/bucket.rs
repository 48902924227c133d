//! RLQS wire <-> model: a bucket id is the descriptor formed by its entries sorted by key
//! (validated as an RLS request is, by the same limits), and an [`Assignment`] is a bucket
//! action.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::Request;
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
    /// The `action` label of `sluice_rlqs_assignments_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Assignment::AllowAll => "allow_all",
            Assignment::DenyAll => "deny_all",
            Assignment::Tokens { .. } => "token_bucket",
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

/// Envoy's token bucket never refills within this interval (about 31 years): a grant is a
/// fixed number of tokens. Envoy divides by the whole seconds, so this must be at least 1 s.
const NO_REFILL_SECONDS: i64 = 1_000_000_000;

/// The bucket actions assigning `a` to `id` for `ttl`. A `fresh` grant of tokens comes after a
/// `DENY_ALL` for the same bucket in the same response: Envoy 1.40 starts a token bucket that
/// replaces another at the old one's fill ratio (so an emptied bucket's replacement would be
/// empty too), and full only when the bucket had no token bucket. Envoy applies a response's
/// actions in order and publishes the result once, so the denial is never in force.
pub(crate) fn assignment(id: &Id, a: Assignment, fresh: bool, ttl: Duration) -> Vec<BucketAction> {
    let mut actions = Vec::with_capacity(2);
    if fresh && matches!(a, Assignment::Tokens { .. }) {
        actions.push(action(id, Assignment::DenyAll, ttl));
    }
    actions.push(action(id, a, ttl));
    actions
}

/// One bucket action assigning `a` to `id` for `ttl` (whole seconds: Envoy ignores the rest).
fn action(id: &Id, a: Assignment, ttl: Duration) -> BucketAction {
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
        bucket_id: Some(BucketId { bucket: id.clone() }),
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
pub(crate) fn abandon(id: &Id) -> BucketAction {
    BucketAction {
        bucket_id: Some(BucketId { bucket: id.clone() }),
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
            &id(&[("k", "v")]),
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
    fn a_fresh_grant_comes_after_a_denial_of_the_same_bucket() {
        let grant = Assignment::Tokens {
            tokens: 3,
            generation: 1,
        };
        let ttl = Duration::from_secs(5);
        let k = id(&[("k", "v")]);
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
