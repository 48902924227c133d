//! The conformance tables' vocabulary: requests ([`Req`], [`Desc`]), expected answers
//! ([`St`]), the steps of a case ([`Step`]) and the case itself ([`Case`]).

use serde_json::Value as Json;
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

// ---------------------------------------------------------------------------------------------
// Requests

/// One descriptor of a request.
#[derive(Clone)]
pub struct Desc {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub hits: Option<u64>,
    pub limit: Option<(u32, i32)>,
}

impl std::fmt::Debug for Desc {
    /// Entries as text (invalid UTF-8 escaped), so failure messages are readable.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = sluice::model::display_bytes;
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|(k, v)| format!("{}={}", show(k), show(v)))
            .collect();
        write!(f, "[{}]", entries.join(", "))?;
        if let Some(h) = self.hits {
            write!(f, " hits={h}")?;
        }
        if let Some((rpu, unit)) = self.limit {
            write!(f, " limit={rpu}/{unit}")?;
        }
        Ok(())
    }
}

/// A descriptor from `key, value` pairs.
pub fn d(entries: &[(&str, &str)]) -> Desc {
    Desc {
        entries: entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        hits: None,
        limit: None,
    }
}

/// A descriptor from raw byte entries (invalid UTF-8, long or hostile input).
pub fn d_raw(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Desc {
    Desc {
        entries,
        hits: None,
        limit: None,
    }
}

impl Desc {
    /// Per-descriptor `hits_addend`.
    pub fn hits(mut self, n: u64) -> Self {
        self.hits = Some(n);
        self
    }
    /// Per-descriptor limit override (`unit` as `envoy.type.v3.RateLimitUnit`).
    pub fn limit(mut self, requests_per_unit: u32, unit: Unit) -> Self {
        self.limit = Some((requests_per_unit, unit as i32));
        self
    }
    /// A limit override with a raw unit number (0 is UNKNOWN).
    pub fn limit_raw(mut self, requests_per_unit: u32, unit: i32) -> Self {
        self.limit = Some((requests_per_unit, unit));
        self
    }
}

#[derive(Clone, Debug)]
pub struct Req {
    pub domain: String,
    pub descriptors: Vec<Desc>,
    pub hits_addend: u32,
}

pub fn req(domain: &str, descriptors: Vec<Desc>) -> Req {
    Req {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Domain `d` with one descriptor `k=<value>` per value: the request of every test whose rule
/// is one key.
pub fn req_k<V: AsRef<[u8]>>(values: &[V]) -> Req {
    let descriptors = values
        .iter()
        .map(|v| d_raw(vec![(b"k".to_vec(), v.as_ref().to_vec())]))
        .collect();
    req("d", descriptors)
}

/// A request of raw descriptors, each a list of byte entries, as protobuf.
pub fn raw_request(domain: &str, descriptors: Vec<Vec<(Vec<u8>, Vec<u8>)>>) -> RateLimitRequest {
    req(domain, descriptors.into_iter().map(d_raw).collect()).to_proto()
}

impl Req {
    /// Request-level `hits_addend`.
    pub fn addend(mut self, n: u32) -> Self {
        self.hits_addend = n;
        self
    }

    pub fn to_proto(&self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            hits_addend: self.hits_addend,
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(k, v)| Entry {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect(),
                    limit: d.limit.map(|(rpu, unit)| RateLimitOverride {
                        requests_per_unit: rpu,
                        unit,
                    }),
                    hits_addend: d.hits,
                    is_negative_hits: false,
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Expected answers

/// When the expected `duration_until_reset` is.
#[derive(Clone, Copy, Debug)]
pub enum Reset {
    /// Computed from the limit's unit and the test clock: the rest of the epoch-aligned window,
    /// rounded up to the millisecond. Absent when there is no `current_limit`.
    Auto,
    /// Exactly this many milliseconds.
    Ms(i64),
}

/// The expected status of one descriptor.
#[derive(Clone, Debug)]
pub struct St {
    pub code: Code,
    pub limit: Option<(u32, Unit, &'static str)>,
    pub remaining: u32,
    pub reset: Reset,
}

/// OK within a limit, with `remaining` left.
pub fn ok(rpu: u32, unit: Unit, remaining: u32) -> St {
    St {
        code: Code::Ok,
        limit: Some((rpu, unit, "")),
        remaining,
        reset: Reset::Auto,
    }
}

/// OVER_LIMIT (remaining is always 0).
pub fn over(rpu: u32, unit: Unit) -> St {
    St {
        code: Code::OverLimit,
        limit: Some((rpu, unit, "")),
        remaining: 0,
        reset: Reset::Auto,
    }
}

/// Over a limit in shadow mode: OK with the limit and remaining 0.
pub fn shadowed(rpu: u32, unit: Unit) -> St {
    ok(rpu, unit, 0)
}

/// No limit applies: OK, no current_limit, remaining 0, no duration.
pub fn none() -> St {
    St {
        code: Code::Ok,
        limit: None,
        remaining: 0,
        reset: Reset::Auto,
    }
}

/// An `unlimited` rule: OK, no current_limit, remaining u32::MAX, no duration.
pub fn unlimited() -> St {
    St {
        remaining: u32::MAX,
        ..none()
    }
}

impl St {
    pub fn named(mut self, name: &'static str) -> Self {
        if let Some(l) = &mut self.limit {
            l.2 = name;
        }
        self
    }
    pub fn reset_ms(mut self, ms: i64) -> Self {
        self.reset = Reset::Ms(ms);
        self
    }
}

/// One step of a conformance case.
#[derive(Clone, Debug)]
pub enum Step {
    /// Send `req`; the answer must be exactly this (headers and metadata included: `None`
    /// means the response must carry none).
    Call {
        req: Req,
        overall: Code,
        statuses: Vec<St>,
        headers: Option<Vec<(String, String)>>,
        metadata: Option<Json>,
    },
    /// Send `req`; it must fail with `code` and exactly `message`.
    Fail {
        req: Req,
        code: tonic::Code,
        message: String,
    },
    /// Move the test clock forward.
    Advance(Micros),
}

pub fn expect(req: Req, overall: Code, statuses: Vec<St>) -> Step {
    Step::Call {
        req,
        overall,
        statuses,
        headers: None,
        metadata: None,
    }
}

pub fn fail(req: Req, code: tonic::Code, message: &str) -> Step {
    Step::Fail {
        req,
        code,
        message: message.into(),
    }
}

pub fn advance(by: Micros) -> Step {
    Step::Advance(by)
}

impl Step {
    /// The response headers this call must carry, in order.
    pub fn headers(mut self, want: &[(&str, &str)]) -> Self {
        if let Step::Call { headers, .. } = &mut self {
            *headers = Some(
                want.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        self
    }
    /// The `dynamic_metadata` this call must carry (protobuf numbers are doubles).
    pub fn metadata(mut self, want: Json) -> Self {
        if let Step::Call { metadata, .. } = &mut self {
            *metadata = Some(want);
        }
        self
    }
}

/// One conformance case: a config (`None`: none loaded), server flags, and steps.
pub struct Case {
    pub name: &'static str,
    pub config: Option<&'static str>,
    pub flags: &'static [&'static str],
    pub steps: Vec<Step>,
}
