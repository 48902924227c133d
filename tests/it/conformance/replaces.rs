use crate::support;

use sluice::proto::rate_limit_response::rate_limit::Unit::Minute;
use sluice::proto::rate_limit_response::Code::Ok as OK;
use support::*;

const REPLACES: &str = r#"
domain: repl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: premium
      replaces: [{name: per_user}]
  - key: vip
    rate_limit:
      unlimited: true
      name: vip
      replaces: [{name: per_user}]
"#;

pub(super) fn replaces() -> Vec<Case> {
    let r = |keys: &[&str]| req("repl", keys.iter().map(|k| d(&[(k, "a")])).collect());
    vec![Case {
        name: "replaces: a replaced limit is neither reported nor consumed",
        config: Some(REPLACES),
        flags: &[],
        steps: vec![
            expect(r(&["user"]), OK, vec![ok(10, Minute, 9).named("per_user")]),
            expect(
                r(&["user", "premium"]),
                OK,
                vec![none(), ok(100, Minute, 99).named("premium")],
            ),
            expect(
                r(&["premium", "user"]),
                OK,
                vec![ok(100, Minute, 98).named("premium"), none()],
            ),
            // Not consumed by the two requests above.
            expect(r(&["user"]), OK, vec![ok(10, Minute, 8).named("per_user")]),
            // An unlimited rule replaces too.
            expect(r(&["user", "vip"]), OK, vec![none(), unlimited()]),
            expect(r(&["user"]), OK, vec![ok(10, Minute, 7).named("per_user")]),
        ],
    }]
}
