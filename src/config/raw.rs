//! The YAML as serde reads it: envoyproxy/ratelimit's format plus sluice's extensions.
//! These types are never used past validation; [`super::compile`] turns them into rules.
//! They ignore unknown keys, which [`super::keys`] reports, each one, without stopping the
//! parse (serde's `deny_unknown_fields` would hide every later error of the file).

use serde::Deserialize;
use serde_saphyr::Spanned;

/// One config file: one domain.
#[derive(Debug, Deserialize)]
pub struct RawFile {
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
    /// sluice: accept `is_negative_hits` refunds for this domain (off by default).
    #[serde(default)]
    pub allow_refunds: bool,
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
pub struct RawRateLimit {
    pub requests_per_unit: Option<Spanned<u32>>,
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
    /// leaky_bucket, gcra or distinct.
    pub algorithm: Option<Spanned<String>>,
    /// sluice: bucket capacity / gcra burst (default: requests_per_unit).
    pub burst: Option<Spanned<u32>>,
    /// sluice: sliding_window sub-windows per window (default 10).
    pub precision: Option<Spanned<u32>>,
    /// sluice: `calendar` aligns windows to local hours, days, weeks, months or years.
    pub align: Option<Spanned<String>>,
    /// sluice: the IANA time zone of `align: calendar` (default UTC).
    pub timezone: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
pub struct RawReplaces {
    pub name: Option<Spanned<String>>,
}
