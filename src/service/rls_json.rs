//! The JSON form of the RLS API (`POST /json`, `sluice check --requests`): a
//! `RateLimitRequest` in, a `RateLimitResponse` out, in protobuf's JSON mapping (camelCase
//! names out; camelCase or the proto's snake_case names in; enums by name; 64-bit numbers as
//! numbers or strings), as envoyproxy/ratelimit's `/json` endpoint. The HTTP handler is in
//! [`super::json_route`].

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::excerpt::excerpt;
use crate::limiter::{Explanation, Response};
use crate::model::{Request, MICROS_PER_SEC};
use crate::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use crate::proto::{RateLimitDescriptor, RateLimitRequest};

use super::convert;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: Option<String>,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hitsAddend")]
    hits_addend: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    limit: Option<JsonLimit>,
    #[serde(default, alias = "hitsAddend")]
    hits_addend: Option<Value>,
    #[serde(default, alias = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLimit {
    #[serde(alias = "requestsPerUnit")]
    requests_per_unit: Value,
    unit: Value,
}

/// A whole number given as a JSON number or a decimal string (protobuf's 64-bit form).
fn number(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        format!(
            "{what} must be a whole number, not {}",
            excerpt(&v.to_string())
        )
    })
}

/// `envoy.type.v3.RateLimitUnit` by name (`MINUTE`) or number.
fn unit(v: &Value) -> Result<i32, String> {
    const NAMES: [&str; 8] = [
        "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK",
    ];
    match v {
        Value::String(s) => NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s))
            .map(|i| i as i32)
            .ok_or_else(|| format!("unknown unit '{}'", excerpt(s))),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| format!("unknown unit {n}")),
        _ => Err(format!(
            "unit must be a name or a number, not {}",
            excerpt(&v.to_string())
        )),
    }
}

/// Parses and validates a JSON `RateLimitRequest` (the same checks as over gRPC, without
/// the size limits: for `sluice check --requests`).
pub(crate) fn request(body: &[u8]) -> Result<Request, String> {
    convert::request(parse(body)?)
}

/// Parses a JSON `RateLimitRequest` into its protobuf form.
pub(crate) fn parse(body: &[u8]) -> Result<RateLimitRequest, String> {
    let r: JsonRequest = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let hits_addend = match &r.hits_addend {
        None => 0,
        Some(v) => u32::try_from(number(v, "hits_addend")?)
            .map_err(|_| "hits_addend exceeds 4294967295".to_string())?,
    };
    let mut descriptors = Vec::with_capacity(r.descriptors.len());
    for d in r.descriptors {
        let limit = match d.limit {
            None => None,
            Some(l) => Some(RateLimitOverride {
                requests_per_unit: u32::try_from(number(
                    &l.requests_per_unit,
                    "requests_per_unit",
                )?)
                .map_err(|_| "requests_per_unit exceeds 4294967295".to_string())?,
                unit: unit(&l.unit)?,
            }),
        };
        descriptors.push(RateLimitDescriptor {
            entries: d
                .entries
                .into_iter()
                .map(|e| Entry {
                    key: e.key.into_bytes(),
                    value: e.value.into_bytes(),
                })
                .collect(),
            limit,
            hits_addend: d
                .hits_addend
                .as_ref()
                .map(|v| number(v, "hits_addend"))
                .transpose()?,
            is_negative_hits: d.is_negative_hits,
        });
    }
    Ok(RateLimitRequest {
        domain: r.domain.unwrap_or_default(),
        descriptors,
        hits_addend,
    })
}

/// A duration in protobuf's JSON form (seconds and an `s`), to the millisecond as reported.
fn duration(us: i64) -> String {
    let us = us.max(0);
    let (s, ms) = (us / MICROS_PER_SEC, us % MICROS_PER_SEC / 1_000);
    if ms == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{ms:03}s")
    }
}

/// The response in protobuf's JSON form (fields at their default value left out, as
/// protojson does), with `explain` when given.
pub(crate) fn response(r: &Response, explain: Option<&[Explanation]>) -> Value {
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(r.overall.as_str()));
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("code".into(), json!(s.code.as_str()));
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                lm.insert("unit".into(), json!(l.unit.as_str()));
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.remaining));
            }
            if let Some(d) = s.duration_until_reset {
                m.insert("durationUntilReset".into(), json!(duration(d)));
            }
            Value::Object(m)
        })
        .collect();
    out.insert("statuses".into(), Value::Array(statuses));
    if !r.headers.is_empty() {
        let headers: Vec<Value> = r
            .headers
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(m) = &r.metadata {
        out.insert("dynamicMetadata".into(), json!({ "metadata": m }));
    }
    if let Some(e) = explain {
        out.insert("explain".into(), json!(e));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_accept_both_spellings() {
        let r = request(
            br#"{"domain":"d","hitsAddend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],
                "limit":{"requestsPerUnit":"5","unit":"MINUTE"},"hits_addend":"3"}]}"#,
        )
        .expect("valid");
        assert_eq!(r.descriptors[0].hits, 3);
        assert_eq!(
            r.descriptors[0].limit_override.map(|o| o.requests_per_unit),
            Some(5)
        );
        assert!(request(br#"{"domain":"d","descriptors":[],"bogus":1}"#).is_err());
        assert!(request(br#"{"domain":"d","descriptors":[]}"#).is_err());
        assert!(request(b"not json").is_err());
    }

    #[test]
    fn durations_in_protojson_form() {
        assert_eq!(duration(30_000_000), "30s");
        assert_eq!(duration(29_750_000), "29.750s");
        assert_eq!(duration(1_000), "0.001s");
    }
}
