use crate::support;

use serde_json::json;
use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::{Ok as OK, OverLimit as OVER};
use support::*;

const METADATA: &str = r#"
domain: md
descriptors:
  - key: m1
    metadata: {tier: gold, nested: {a: 1}}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: m2
    metadata: {tier: silver, nested: {b: 2}, list: [1, 2]}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: m0
    metadata: {blocked: true}
    rate_limit: {unit: minute, requests_per_unit: 0}
"#;

pub(super) fn metadata() -> Vec<Case> {
    let r = |keys: &[&str]| req("md", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![Case {
        name: "metadata: merged from descriptors within their limits, first wins",
        config: Some(METADATA),
        flags: &[],
        steps: vec![
            expect(r(&["m1", "m2"]), OK, vec![ok(10, Minute, 9), ok(10, Minute, 9)]).metadata(
                json!({"metadata": {"tier": "gold", "nested": {"a": 1.0, "b": 2.0}, "list": [1.0, 2.0]}}),
            ),
            expect(r(&["m0", "m1"]), OVER, vec![over(0, Minute), ok(10, Minute, 9)])
                .metadata(json!({"metadata": {"tier": "gold", "nested": {"a": 1.0}}})),
            expect(r(&["m0"]), OVER, vec![over(0, Minute)]),
        ],
    }]
}
