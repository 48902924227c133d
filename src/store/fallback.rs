//! What a request gets when its store fails: `--on-store-error`, overridden per domain and per
//! rule (`on_store_error` in the YAML, carried by each [`Check`]).
//!
//! A request fails as a whole, so one policy answers it: the strictest of its checks'
//! policies, in the order deny > unavailable > local > allow. A login limit that fails closed
//! thus rejects the requests it is part of even where the other descriptors would fail open,
//! and a request whose descriptors all fail open is let through. A request that gives hits
//! back (`is_negative_hits`) always fails as `unavailable`: answering a refund that was not
//! applied would lose it.

use std::sync::Arc;

use crate::model::Micros;

use super::{Check, Deadline, MemoryStore, Store, StoreError, Verdict};

/// The failure policy: a word of the rule vocabulary, with its order of strictness here.
pub use crate::rules::policy::FailurePolicy;

impl FailurePolicy {
    /// The order in which policies win when a request's checks name several.
    fn strictness(self) -> u8 {
        match self {
            FailurePolicy::Allow => 0,
            FailurePolicy::Local => 1,
            FailurePolicy::Unavailable => 2,
            FailurePolicy::Deny => 3,
        }
    }

    /// The policy that answers a failed request of `checks`, `default` for checks without one.
    pub fn of_request(checks: &[Check<'_>], default: FailurePolicy) -> FailurePolicy {
        checks
            .iter()
            .map(|c| c.on_error.unwrap_or(default))
            .max_by_key(|p| p.strictness())
            .unwrap_or(default)
    }
}

/// Told of every failure of the primary store, with the policy that answers instead (for
/// metrics).
pub(crate) type ErrorHook = Arc<dyn Fn(&StoreError, FailurePolicy) + Send + Sync>;

/// A store that applies a [`FailurePolicy`] when `primary` fails.
pub struct Fallback<S> {
    primary: S,
    policy: FailurePolicy,
    local: Option<Arc<MemoryStore>>,
    on_error: Option<ErrorHook>,
}

impl<S: Store> Fallback<S> {
    /// `policy` answers checks without their own. `local` is used (and required) by
    /// [`FailurePolicy::Local`]; without it that policy answers like
    /// [`FailurePolicy::Unavailable`].
    pub fn new(primary: S, policy: FailurePolicy, local: Option<Arc<MemoryStore>>) -> Self {
        Fallback {
            primary,
            policy,
            local,
            on_error: None,
        }
    }

    /// Calls `hook` on every failure of the primary store.
    pub fn with_error_hook(mut self, hook: ErrorHook) -> Self {
        self.on_error = Some(hook);
        self
    }

    pub fn primary(&self) -> &S {
        &self.primary
    }

    async fn decide_or_fall_back(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> Result<Vec<Verdict>, StoreError> {
        let err = match self.primary.decide(checks, now, deadline).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        // A refund the store did not apply must not be answered OK (the hits given back would
        // be lost, the client told otherwise): the request fails, whatever the policy.
        let policy = if checks.iter().any(|c| c.ask.refund) {
            FailurePolicy::Unavailable
        } else {
            FailurePolicy::of_request(checks, self.policy)
        };
        if let Some(hook) = &self.on_error {
            hook(&err, policy);
        }
        let until_end = |c: &Check<'_>| (c.limit.frame(now).window_end - now).max(0);
        match (policy, &self.local) {
            (FailurePolicy::Allow, _) => Ok(checks
                .iter()
                .map(|c| Verdict {
                    allowed: true,
                    remaining: c.limit.requests(),
                    reset: until_end(c),
                    charged: false,
                    cached: false,
                })
                .collect()),
            (FailurePolicy::Deny, _) => Ok(checks
                .iter()
                .map(|c| Verdict {
                    allowed: false,
                    remaining: 0,
                    reset: until_end(c),
                    charged: false,
                    cached: false,
                })
                .collect()),
            (FailurePolicy::Local, Some(local)) => Ok(local.decide_now(checks, now)),
            (FailurePolicy::Unavailable, _) | (FailurePolicy::Local, None) => Err(err),
        }
    }
}

impl<S: Store> Store for Fallback<S> {
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> impl std::future::Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        self.decide_or_fall_back(checks, now, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Ask, Limit};
    use FailurePolicy::*;

    /// A store that always fails, as a Redis that is down.
    struct Down;

    impl Store for Down {
        async fn decide(
            &self,
            _: &[Check<'_>],
            _: Micros,
            _: Deadline,
        ) -> Result<Vec<Verdict>, StoreError> {
            Err(StoreError::new(
                "down",
                crate::store::ErrorKind::Connection,
                "down",
            ))
        }
    }

    #[tokio::test]
    async fn each_policy() {
        let l = Limit::fixed_window(1, 60_000_000).unwrap();
        let c = [Check::new(b"k", &l, Ask::take(1))];
        let now = 30_000_000;
        let unavailable = Fallback::new(Down, FailurePolicy::Unavailable, None);
        assert!(unavailable.decide(&c, now, Deadline::NONE).await.is_err());
        let v = Fallback::new(Down, FailurePolicy::Allow, None)
            .decide(&c, now, Deadline::NONE)
            .await
            .unwrap();
        assert!(v[0].allowed && !v[0].charged);
        assert_eq!(v[0].reset, 30_000_000);
        let v = Fallback::new(Down, FailurePolicy::Deny, None)
            .decide(&c, now, Deadline::NONE)
            .await
            .unwrap();
        assert!(!v[0].allowed);
        let local = Arc::new(MemoryStore::new(100));
        let f = Fallback::new(Down, FailurePolicy::Local, Some(local));
        assert!(f.decide(&c, now, Deadline::NONE).await.unwrap()[0].allowed);
        assert!(
            !f.decide(&c, now, Deadline::NONE).await.unwrap()[0].allowed,
            "the local limit holds"
        );
    }

    #[tokio::test]
    async fn a_refund_the_store_did_not_apply_fails_under_every_policy() {
        let l = Limit::fixed_window(5, 60_000_000).unwrap();
        let refund = [
            Check::new(b"a", &l, Ask::take(1)),
            Check {
                group: 1,
                ..Check::new(b"k", &l, Ask::refund(2))
            },
        ];
        let local = Arc::new(MemoryStore::new(100));
        for policy in [Allow, Deny, Local, Unavailable] {
            let f = Fallback::new(Down, policy, Some(local.clone()));
            assert!(
                f.decide(&refund, 1, Deadline::NONE).await.is_err(),
                "{policy:?}"
            );
        }
    }
}

#[cfg(test)]
mod combination {
    use super::*;
    use crate::algorithm::{Ask, Limit};
    use crate::store::Charge;
    use FailurePolicy::*;

    #[test]
    fn the_strictest_policy_of_a_request_wins() {
        let l = Limit::fixed_window(1, 60_000_000).unwrap();
        let c = |on_error| Check {
            key: b"k",
            limit: &l,
            ask: Ask::take(1),
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error,
        };
        let of = |ps: &[Option<FailurePolicy>], default| {
            let checks: Vec<Check<'_>> = ps.iter().map(|&p| c(p)).collect();
            FailurePolicy::of_request(&checks, default)
        };
        assert_eq!(of(&[], Allow), Allow);
        assert_eq!(of(&[None], Local), Local);
        assert_eq!(of(&[Some(Allow), None], Unavailable), Unavailable);
        assert_eq!(of(&[Some(Allow), Some(Local)], Unavailable), Local);
        assert_eq!(of(&[Some(Deny), Some(Allow)], Allow), Deny);
        assert_eq!(of(&[Some(Unavailable), Some(Local)], Allow), Unavailable);
        assert_eq!(of(&[Some(Allow)], Deny), Allow, "a rule overrides the flag");
    }
}
