//! What a decision answers, in the model's terms: an overall code, one status per descriptor,
//! headers and metadata. The wire forms (protobuf, JSON) are built from it in `service/`.

use crate::model::{Micros, Unit, MICROS_PER_MILLI};

/// Names of the `RateLimit-*` response headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

impl Code {
    /// The RLS name (`OK`, `OVER_LIMIT`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// Empty when the rule has no name.
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    pub remaining: u32,
    pub duration_until_reset: Option<Micros>,
}

impl Status {
    /// A descriptor that matched no limit.
    pub fn no_limit() -> Self {
        Status {
            code: Code::Ok,
            current_limit: None,
            remaining: 0,
            duration_until_reset: None,
        }
    }

    /// A descriptor whose rule is `unlimited`.
    pub fn unlimited() -> Self {
        Status {
            remaining: u32::MAX,
            ..Status::no_limit()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub overall: Code,
    pub statuses: Vec<Status>,
    pub headers: Vec<(String, String)>,
    /// Merged `metadata` of the rules of descriptors within their limits.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Durations are reported in whole milliseconds, rounded up so that a client waiting that
/// long is never early.
pub(crate) fn ceil_millis(us: Micros) -> Micros {
    ceil_div(us.max(0), MICROS_PER_MILLI) * MICROS_PER_MILLI
}

/// `a / b` rounded up, for `a >= 0`, `b > 0`.
pub(crate) fn ceil_div(a: Micros, b: Micros) -> Micros {
    a / b + Micros::from(a % b != 0)
}
