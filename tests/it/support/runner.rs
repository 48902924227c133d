//! Runs conformance cases ([`Case`]) on a fresh in-process server and compares every answer
//! field by field, `duration_until_reset` included (see [`window_rest_ms`]).

use serde_json::Value as Json;
use sluice::model::Micros;
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::rate_limit_response::{Code, DescriptorStatus};
use sluice::proto::RateLimitResponse;

use super::dsl::{Case, Reset, St, Step};
use super::server::{Sluice, StoreKind, SEC};

/// Runs one case on a fresh server with `store`; `Err` describes the first mismatch.
pub async fn check(store: StoreKind, case: &Case) -> Result<(), String> {
    let s = Sluice::start(store, case.config, case.flags).await;
    let result = run_steps(&s, &case.steps).await;
    s.stop().await;
    result
}

/// Runs every case and fails with the list of every case that failed.
pub async fn run_suite(store: StoreKind, cases: Vec<Case>) {
    let mut failures = Vec::new();
    let mut names = std::collections::HashSet::new();
    for case in &cases {
        assert!(names.insert(case.name), "duplicate case name {}", case.name);
        if let Err(e) = check(store, case).await {
            failures.push(format!("[{store:?}] {}: {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

async fn run_steps(s: &Sluice, steps: &[Step]) -> Result<(), String> {
    for (n, step) in steps.iter().enumerate() {
        let at = format!("step {n}");
        match step {
            Step::Advance(by) => s.clock.advance(*by),
            Step::Fail { req, code, message } => match s.call(req.to_proto()).await {
                Ok(r) => return Err(format!("{at}: expected {code:?} error, got {r:?}")),
                Err(e) if e.code() == *code && e.message() == message => {}
                Err(e) => {
                    return Err(format!(
                        "{at}: expected {code:?} {message:?}, got {:?} {:?}",
                        e.code(),
                        e.message()
                    ))
                }
            },
            Step::Call {
                req,
                overall,
                statuses,
                headers,
                metadata,
            } => {
                let r = s
                    .call(req.to_proto())
                    .await
                    .map_err(|e| format!("{at}: request failed: {e:?}"))?;
                let now = sluice::clock::Clock::now(&s.clock);
                compare(&r, *overall, statuses, headers.as_deref(), metadata, now)
                    .map_err(|e| format!("{at} {req:?}:\n  {e}\n  response: {r:?}"))?;
            }
        }
    }
    Ok(())
}

fn compare(
    r: &RateLimitResponse,
    overall: Code,
    statuses: &[St],
    headers: Option<&[(String, String)]>,
    metadata: &Option<Json>,
    now: Micros,
) -> Result<(), String> {
    if r.overall_code != overall as i32 {
        return Err(format!(
            "overall_code {:?}, want {overall:?}",
            Code::try_from(r.overall_code)
        ));
    }
    if r.statuses.len() != statuses.len() {
        return Err(format!(
            "{} statuses, want {}",
            r.statuses.len(),
            statuses.len()
        ));
    }
    for (i, (got, want)) in r.statuses.iter().zip(statuses).enumerate() {
        compare_status(got, want, now).map_err(|e| format!("status {i}: {e}"))?;
    }
    let got_headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let want_headers = headers.unwrap_or(&[]);
    if got_headers != want_headers {
        return Err(format!("headers {got_headers:?}, want {want_headers:?}"));
    }
    if !r.request_headers_to_add.is_empty() {
        return Err("unexpected request_headers_to_add".into());
    }
    let got_meta = r.dynamic_metadata.as_ref().map(struct_to_json);
    if &got_meta != metadata {
        return Err(format!("dynamic_metadata {got_meta:?}, want {metadata:?}"));
    }
    Ok(())
}

fn compare_status(got: &DescriptorStatus, want: &St, now: Micros) -> Result<(), String> {
    let got_limit = got.current_limit.as_ref().map(|l| {
        (
            l.requests_per_unit,
            Unit::try_from(l.unit).unwrap_or(Unit::Unknown),
            l.name.as_str(),
        )
    });
    let want_limit = want.limit;
    if got.code != want.code as i32
        || got_limit != want_limit
        || got.limit_remaining != want.remaining
    {
        return Err(format!(
            "got code {:?} limit {got_limit:?} remaining {}, want code {:?} limit {want_limit:?} remaining {}",
            Code::try_from(got.code),
            got.limit_remaining,
            want.code,
            want.remaining
        ));
    }
    let want_reset = match (want.reset, want.limit) {
        (Reset::Ms(ms), _) => Some(ms),
        (Reset::Auto, Some((_, unit, _))) => Some(window_rest_ms(unit, now)),
        (Reset::Auto, None) => None,
    };
    let got_reset = got
        .duration_until_reset
        .as_ref()
        .map(|d| (d.seconds, d.nanos));
    let want_reset = want_reset.map(|ms| (ms / 1000, (ms % 1000) as i32 * 1_000_000));
    if got_reset != want_reset {
        return Err(format!(
            "duration_until_reset (s, ns) {got_reset:?}, want {want_reset:?}"
        ));
    }
    Ok(())
}

/// The length of `unit` in seconds, as envoyproxy/ratelimit's `UnitToDivider`.
pub fn unit_seconds(unit: Unit) -> i64 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 2_592_000,
        Unit::Year => 31_536_000,
        Unit::Unknown => panic!("no window for UNKNOWN"),
    }
}

/// Milliseconds (rounded up) from `now` to the end of its epoch-aligned `unit` window.
pub fn window_rest_ms(unit: Unit, now: Micros) -> i64 {
    let w = unit_seconds(unit) * SEC;
    let rest = w - now.rem_euclid(w);
    (rest + 999) / 1000
}

/// `google.protobuf.Struct` as JSON (numbers as doubles).
pub fn struct_to_json(s: &prost_types::Struct) -> Json {
    Json::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &prost_types::Value) -> Json {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}
