//! Protobuf <-> model, with the request validation of the RLS API.

use std::time::Duration;

use crate::limiter::{Code, Response, Status};
use crate::model::{Descriptor, Entry, LimitOverride, Micros, Request, Unit, MICROS_PER_SEC};
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code as ProtoCode, DescriptorStatus, RateLimit,
};
use crate::proto::{RateLimitRequest, RateLimitResponse};

/// Validates and converts a request; the error text is for INVALID_ARGUMENT.
#[inline(never)] // a stage the profile counts (bench/profile_memory.py)
pub(crate) fn request(req: RateLimitRequest) -> Result<Request, String> {
    if req.domain.is_empty() {
        return Err("rate limit domain must not be empty".into());
    }
    if req.descriptors.is_empty() {
        return Err("rate limit descriptor list must not be empty".into());
    }
    let default_hits = u64::from(req.hits_addend.max(1));
    let mut descriptors = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.into_iter().enumerate() {
        if d.entries.is_empty() {
            return Err(format!("descriptor {i} has no entries"));
        }
        let mut entries = Vec::with_capacity(d.entries.len());
        for (j, e) in d.entries.into_iter().enumerate() {
            if e.key.is_empty() {
                return Err(format!("descriptor {i} entry {j} has an empty key"));
            }
            entries.push(Entry {
                key: e.key,
                value: e.value,
            });
        }
        let limit_override = match d.limit {
            None => None,
            Some(o) => match Unit::from_proto(o.unit) {
                Some(unit) => Some(LimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit,
                }),
                None => {
                    return Err(format!(
                        "descriptor {i}: limit override has an unknown unit ({})",
                        o.unit
                    ))
                }
            },
        };
        let hits = match d.hits_addend {
            Some(h) if h > u64::from(u32::MAX) => {
                return Err(format!(
                    "descriptor {i}: hits_addend {h} exceeds {}",
                    u32::MAX
                ))
            }
            Some(h) => h,
            None => default_hits,
        };
        descriptors.push(Descriptor {
            entries,
            limit_override,
            hits,
            refund: d.is_negative_hits,
        });
    }
    Ok(Request {
        domain: req.domain,
        descriptors,
    })
}

#[inline(never)] // a stage the profile counts (bench/profile_memory.py)
pub(crate) fn response(r: Response) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code(r.overall) as i32,
        statuses: r.statuses.into_iter().map(status).collect(),
        response_headers_to_add: r
            .headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        dynamic_metadata: r.metadata.map(|m| prost_types::Struct {
            fields: [(
                "metadata".to_string(),
                json_to_value(serde_json::Value::Object(m)),
            )]
            .into_iter()
            .collect(),
        }),
        ..Default::default()
    }
}

fn code(c: Code) -> ProtoCode {
    match c {
        Code::Ok => ProtoCode::Ok,
        Code::OverLimit => ProtoCode::OverLimit,
    }
}

fn status(s: Status) -> DescriptorStatus {
    DescriptorStatus {
        code: code(s.code) as i32,
        current_limit: s.current_limit.map(|l| RateLimit {
            name: l.name,
            requests_per_unit: l.requests_per_unit,
            unit: proto_unit(l.unit) as i32,
        }),
        limit_remaining: s.remaining,
        duration_until_reset: s.duration_until_reset.map(duration),
        quota: None,
    }
}

fn proto_unit(u: Unit) -> ProtoUnit {
    match u {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    }
}

pub(crate) fn duration(us: Micros) -> prost_types::Duration {
    let us = us.max(0);
    prost_types::Duration {
        seconds: us / MICROS_PER_SEC,
        nanos: ((us % MICROS_PER_SEC) * 1_000) as i32,
    }
}

fn json_to_value(v: serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.into_iter().map(json_to_value).collect(),
        }),
        serde_json::Value::Object(o) => Kind::StructValue(prost_types::Struct {
            fields: o.into_iter().map(|(k, v)| (k, json_to_value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// Parses a `grpc-timeout` header value: up to 8 digits and a unit (H, M, S, m, u, n).
pub(crate) fn grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(grpc_timeout("20m"), Some(Duration::from_millis(20)));
        assert_eq!(grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(grpc_timeout("5"), None);
        assert_eq!(grpc_timeout("123456789m"), None);
        assert_eq!(grpc_timeout("1x"), None);
    }

    #[test]
    fn durations_keep_milliseconds() {
        let d = duration(1_234_000);
        assert_eq!((d.seconds, d.nanos), (1, 234_000_000));
    }
}
