//! envoyproxy/ratelimit's `RateLimitConfig` (one xDS resource, one domain) -> the raw types
//! the YAML parser produces, field for field as envoyproxy/ratelimit's `ConfigXdsProtoToYaml`
//! maps them, so a snapshot is validated and compiled exactly as files are. The raw values
//! carry no YAML location: their errors are reported at the resource's name.

use std::sync::Arc;

use prost::Message;
use prost_types::{value::Kind, Any};
use serde_saphyr::{Location, Spanned};

use crate::config::compile::RawDocument;
use crate::config::raw::{Count, RawDescriptor, RawFile, RawRateLimit, RawReplaces};
use crate::proto::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use crate::rules::content_hash;

/// The type URL of the resources the config source subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A resource of a snapshot that is no `RateLimitConfig`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ResourceError {
    #[error("resource {index} has type {found}, expected {TYPE_URL}")]
    WrongType { index: usize, found: String },
    #[error("resource {index} does not decode as a RateLimitConfig: {reason}")]
    Undecodable { index: usize, reason: String },
}

/// Every resource of a snapshot as a document to compile.
pub(crate) fn documents(resources: &[Any]) -> Result<Vec<RawDocument>, ResourceError> {
    resources
        .iter()
        .enumerate()
        .map(|(index, any)| {
            if any.type_url != TYPE_URL {
                return Err(ResourceError::WrongType {
                    index,
                    found: any.type_url.clone(),
                });
            }
            let config = RateLimitConfig::decode(any.value.as_slice()).map_err(|e| {
                ResourceError::Undecodable {
                    index,
                    reason: e.to_string(),
                }
            })?;
            Ok(document(config, content_hash(&any.value)))
        })
        .collect()
}

/// One `RateLimitConfig` as a document named `xds:<name>` (its domain when unnamed).
pub(crate) fn document(config: RateLimitConfig, hash: u64) -> RawDocument {
    let name = if config.name.is_empty() {
        &config.domain
    } else {
        &config.name
    };
    RawDocument {
        name: Arc::from(format!("xds:{name}")),
        hash,
        raw: RawFile {
            domain: Some(at(config.domain)),
            descriptors: Some(config.descriptors.into_iter().map(descriptor).collect()),
            allow_refunds: false,
            allow_reservations: false,
            on_store_error: None,
            redis_hash_tag: None,
            allow_overrides: true,
        },
    }
}

/// A value with no source location.
fn at<T>(value: T) -> Spanned<T> {
    Spanned::new(value, Location::UNKNOWN, Location::UNKNOWN)
}

/// A string field: absent when empty, as proto3 cannot tell the two apart.
fn text(s: String) -> Option<Spanned<String>> {
    (!s.is_empty()).then(|| at(s))
}

fn descriptor(d: RateLimitDescriptor) -> Spanned<RawDescriptor> {
    at(RawDescriptor {
        key: Some(at(d.key)),
        value: text(d.value),
        rate_limit: d.rate_limit.map(|p| at(policy(p))),
        rate_limits: None,
        descriptors: (!d.descriptors.is_empty())
            .then(|| d.descriptors.into_iter().map(descriptor).collect()),
        shadow_mode: d.shadow_mode,
        detailed_metric: d.detailed_metric,
        value_to_metric: false,
        share_threshold: None,
        quota_mode: d.quota_mode,
        metadata: d.metadata.map(|m| at(object(m))),
    })
}

fn policy(p: RateLimitPolicy) -> RawRateLimit {
    // UNKNOWN (0) is how proto3 says "no unit"; envoyproxy/ratelimit reads it so too.
    let unit = match RateLimitUnit::try_from(p.unit) {
        Ok(RateLimitUnit::Unknown) => None,
        Ok(u) => Some(u.as_str_name().to_string()),
        // A unit this copy of the proto does not know: validation names the word it got.
        Err(_) => Some(p.unit.to_string()),
    };
    RawRateLimit {
        requests_per_unit: Some(at(Count(Ok(p.requests_per_unit)))),
        unit: unit.map(at),
        unlimited: p.unlimited,
        name: text(p.name),
        replaces: (!p.replaces.is_empty()).then(|| {
            p.replaces
                .into_iter()
                .map(|r| at(RawReplaces { name: text(r.name) }))
                .collect()
        }),
        charge: None,
        on_store_error: None,
        window: None,
        algorithm: None,
        max_in_flight: None,
        lease_time: None,
        burst: None,
        precision: None,
        align: None,
        timezone: None,
    }
}

/// A `google.protobuf.Struct` as the JSON object the YAML `metadata:` map gives.
fn object(s: prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(s.fields.into_iter().map(|(k, v)| (k, json(v))).collect())
}

fn json(v: prost_types::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::BoolValue(b)) => J::Bool(b),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n).map_or(J::Null, J::Number),
        Some(Kind::StringValue(s)) => J::String(s),
        Some(Kind::StructValue(s)) => object(s),
        Some(Kind::ListValue(l)) => J::Array(l.values.into_iter().map(json).collect()),
    }
}

#[cfg(test)]
mod tests;
