use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::Ok as OK;
use support::*;

const SHADOW: &str = r#"
domain: shadow
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadowed}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

pub(super) fn shadow() -> Vec<Case> {
    let r = |keys: &[&str]| req("shadow", keys.iter().map(|k| d(&[(k, "x")])).collect());
    vec![
        Case {
            name: "shadow: a shadow-mode rule reports OK while counting",
            config: Some(SHADOW),
            flags: &[],
            steps: vec![
                expect(r(&["s"]), OK, vec![ok(1, Minute, 0).named("shadowed")]),
                expect(r(&["s"]), OK, vec![shadowed(1, Minute).named("shadowed")]),
                // Counting is that of enforcement (decided before the shadow conversion): the
                // request would have been rejected, so the other descriptor is not charged
                // and shows its unchanged remaining.
                expect(
                    r(&["s", "e"]),
                    OK,
                    vec![shadowed(1, Minute).named("shadowed"), ok(5, Minute, 5)],
                ),
                expect(r(&["e"]), OK, vec![ok(5, Minute, 4)]),
                advance(30 * SEC),
                expect(
                    r(&["s", "e"]),
                    OK,
                    vec![ok(1, Minute, 0).named("shadowed"), ok(5, Minute, 4)],
                ),
            ],
        },
        Case {
            name: "shadow: global --shadow-mode turns OVER_LIMIT overall into OK only",
            config: Some(SHADOW),
            flags: &["--shadow-mode"],
            steps: vec![
                expect(r(&["a", "e"]), OK, vec![ok(1, Minute, 0), ok(5, Minute, 4)]),
                expect(r(&["a", "e"]), OK, vec![over(1, Minute), ok(5, Minute, 4)]),
                expect(r(&["e"]), OK, vec![ok(5, Minute, 3)]),
                expect(r(&["a"]), OK, vec![over(1, Minute)]),
            ],
        },
    ]
}
