//! The draft-10 `RateLimit-Policy` and `RateLimit` fields end to end: sluice with
//! `--response-headers-format ietf` behind a real Envoy, every assertion on what the HTTP
//! client receives, read back with an independent Structured Fields parser (the `sfv` crate).

use crate::support;

use serde_json::json;
use support::envoy::{base64, route, Filter, Stack};

const CONFIG: &str = r#"
domain: e2e
descriptors:
  - key: user
    rate_limits:
      - {unit: minute, requests_per_unit: 3, name: per-minute}
      - {unit: hour, requests_per_unit: 5, name: per-hour}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 100}
"#;

// Partition keys: base64 of the first 16 bytes of SHA-256(4-byte big-endian length ‖ value),
// computed with Python's hashlib (README.md, "IETF headers").
const ALICE: &str = "4+QMxXiW3NrGcx9gyxdIvQ==";
const ADDR: &str = "IpBr9GdwSoJq/dVgksqG9g==";

/// One item of a field as `sfv` reads it: (name, [(param, value as text)]), where Integers are
/// written as numbers and Byte Sequences as base64 (nothing else is expected).
type Item = (String, Vec<(String, String)>);

fn parse(field: &str) -> Vec<Item> {
    let list: sfv::List = sfv::Parser::new(field)
        .parse()
        .unwrap_or_else(|e| panic!("{field:?} is not an sf-list: {e}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("{field:?}: an inner list")
            };
            let name = item.bare_item.as_string().expect("a String item");
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let text = if let Some(i) = v.as_integer() {
                        i.to_string()
                    } else if let Some(b) = v.as_byte_sequence() {
                        base64(b)
                    } else {
                        panic!("{field:?}: {} is neither an Integer nor bytes", k.as_str())
                    };
                    (k.as_str().to_string(), text)
                })
                .collect();
            (name.as_str().to_string(), params)
        })
        .collect()
}

fn item(name: &str, params: &[(&str, &str)]) -> Item {
    (
        name.to_string(),
        params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_receives_one_item_per_limit() {
    let routes = json!([route(
        "/",
        json!([
            {"actions": [{"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]},
            {"actions": [{"remote_address": {}}]}
        ])
    )]);
    let s = Stack::start(
        CONFIG,
        &["--response-headers-format", "ietf"],
        Filter::default(),
        routes,
    )
    .await;
    let alice = ALICE;
    let headers = [("x-user", "alice"), ("x-forwarded-for", "10.0.0.1")];
    let policy = [
        item("per-minute", &[("q", "3"), ("w", "60"), ("pk", alice)]),
        item("per-hour", &[("q", "5"), ("w", "3600"), ("pk", alice)]),
        item(
            "e2e.remote_address",
            &[("q", "100"), ("w", "3600"), ("pk", ADDR)],
        ),
    ];
    // At T0, 29.7495 s are left of the minute and 3569.7495 s of the hour: t rounds up.
    let limit = |minute: &str, hour: &str, addr: &str| {
        [
            item("per-minute", &[("r", minute), ("t", "30"), ("pk", alice)]),
            item("per-hour", &[("r", hour), ("t", "3570"), ("pk", alice)]),
            item(
                "e2e.remote_address",
                &[("r", addr), ("t", "3570"), ("pk", ADDR)],
            ),
        ]
    };
    for (minute, hour, addr) in [("2", "4", "99"), ("1", "3", "98"), ("0", "2", "97")] {
        let r = s.get("/", &headers).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(parse(r.header("ratelimit-policy").expect("policy")), policy);
        assert_eq!(
            parse(r.header("ratelimit").expect("ratelimit")),
            limit(minute, hour, addr),
        );
        assert_eq!(r.header("ratelimit-limit"), None, "no draft-03 headers");
    }
    // Over the minute's 3: 429, r=0 for the minute; the request is not charged elsewhere.
    let r = s.get("/", &headers).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        parse(r.header("ratelimit").expect("ratelimit")),
        limit("0", "2", "97")
    );
    // The exact text the client got, as sluice wrote it.
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(&*format!(
            r#""per-minute";q=3;w=60;pk=:{alice}:, "per-hour";q=5;w=3600;pk=:{alice}:, "e2e.remote_address";q=100;w=3600;pk=:{ADDR}:"#
        ))
    );
    s.stop().await;
}
