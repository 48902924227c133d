//! The YAML as serde reads it: envoyproxy/ratelimit's format plus sluice's extensions.
//! These types are never used past validation; [`super::compile`] turns them into rules.

use serde::Deserialize;
use serde_saphyr::Spanned;

/// One config file: one domain.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDescriptor {
    pub key: Option<Spanned<String>>,
    pub value: Option<Spanned<String>>,
    pub rate_limit: Option<Spanned<RawRateLimit>>,
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
#[serde(deny_unknown_fields)]
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplaces {
    pub name: Option<Spanned<String>>,
}
