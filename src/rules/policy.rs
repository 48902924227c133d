//! The policy words a rule, a domain or a flag can name: what a failed store answers
//! ([`FailurePolicy`]), whose clock decides on Redis ([`ClockSource`]), when a check consumes
//! quota ([`Charge`]) and what a Redis Cluster hash tag covers ([`HashTag`]). Each is defined
//! here once, with its spelling, parsing, printing and `--help` text (see [`super::vocab`]);
//! the store, the config and the flags use these types.

use super::vocab::words;

words! {
    /// What a request gets when its store fails or the store's circuit breaker is open
    /// (`--on-store-error`, and `on_store_error` of a domain or a limit).
    pub enum FailurePolicy as "on_store_error" {
        /// gRPC UNAVAILABLE (Envoy's failure_mode_deny then decides).
        Unavailable = "unavailable",
        /// OK: let the request through, count nothing.
        Allow = "allow",
        /// OVER_LIMIT for every limited descriptor.
        Deny = "deny",
        /// Decide with an in-memory store (same rules, counted per instance) until the
        /// store is back.
        Local = "local",
    }
}

words! {
    /// Whose clock decides with the Redis store (`--clock`).
    pub enum ClockSource as "clock" {
        /// Redis' TIME (read by the script): instances with skewed clocks agree.
        Redis = "redis",
        /// This instance's clock (the `now` given to the store).
        Local = "local",
    }
}

words! {
    /// When a check consumes quota (`charge` of a limit).
    pub enum Charge as "charge" {
        /// Even when rejected: the count may go past the limit as a debt later requests see.
        Always = "always",
        /// Only when the whole request is admitted and the check's descriptor is allowed.
        IfAdmitted = "if_admitted",
    }
}

words! {
    /// What the `{...}` Redis Cluster hash tag of a key covers (`redis_hash_tag` of a domain).
    pub enum HashTag as "redis_hash_tag" {
        /// The domain and the descriptor: each descriptor has its own slot, so a domain's keys
        /// spread over the cluster (`{domain|k=v|...}`).
        Descriptor = "descriptor",
        /// The domain only: every key of the domain is in one slot, on one node, so a request
        /// is decided in one exact call even on Cluster (`{domain}|k=v|...`).
        Domain = "domain",
    }
}

// A derive would need `#[default]` on a variant, which `words!` does not carry.
#[allow(clippy::derivable_impls)]
impl Default for HashTag {
    fn default() -> Self {
        HashTag::Descriptor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_errors_list_every_word() {
        for p in [
            FailurePolicy::Unavailable,
            FailurePolicy::Allow,
            FailurePolicy::Deny,
            FailurePolicy::Local,
        ] {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
        assert_eq!(
            "closed".parse::<FailurePolicy>().unwrap_err().to_string(),
            "invalid on_store_error 'closed' (expected unavailable, allow, deny or local)"
        );
        assert_eq!("local".parse(), Ok(ClockSource::Local));
        assert_eq!("if_admitted".parse(), Ok(Charge::IfAdmitted));
        assert_eq!(HashTag::default(), HashTag::Descriptor);
    }
}
