//! The admin side of the HTTP port: `POST /json` (off unless `--json-api`; 200 OK, 429 over
//! the limit, 400 for a bad body) with its explain mode, `/version`, and the same explanation
//! offline with `sluice check --requests`.

use crate::support;

use serde_json::{json, Value};
use support::http::http_post;
use support::*;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: client
    value: alice
    rate_limit: {unit: minute, requests_per_unit: 2, name: alice_rule}
  - key: path
    value: "/api/*"
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

const ALICE: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"alice"}]}]}"#;

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_is_off_unless_enabled() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let (code, body) = http_post(s.server.http_addr, "/json", ALICE).await;
    assert_eq!(code, 404);
    assert!(body.contains("--json-api"), "{body}");
    // Nothing was charged.
    let r = s
        .call(req("edge", vec![d(&[("client", "alice")])]).to_proto())
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(
        s.http_get("/version").await,
        (200, format!("sluice {}\n", env!("CARGO_PKG_VERSION")))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_status_codes_and_explain() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--json-api"]).await;
    let addr = s.server.http_addr;

    let (code, body) = http_post(addr, "/json", ALICE).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        parse(&body),
        json!({
            "overallCode": "OK",
            "statuses": [{
                "code": "OK",
                "currentLimit": {"name": "alice_rule", "requestsPerUnit": 2, "unit": "MINUTE"},
                "limitRemaining": 1,
                "durationUntilReset": "29.750s"
            }]
        })
    );

    // The explain mode decides (and charges) the same way and says why.
    let (code, body) = http_post(addr, "/json?explain=true", ALICE).await;
    assert_eq!(code, 200, "{body}");
    let v = parse(&body);
    let e = &v["explain"][0];
    assert_eq!(e["matched"], "rule");
    assert_eq!(e["rule"], "edge.client_alice");
    assert!(
        e["source"].as_str().unwrap().ends_with("config.yaml:6:17"),
        "{e}"
    );
    assert_eq!(e["stats_key"], "edge.client_alice");
    assert_eq!(e["code"], "OK");
    let l = &e["limits"][0];
    assert_eq!(l["algorithm"], "fixed_window");
    assert_eq!(l["requests_per_unit"], 2);
    assert_eq!(l["remaining"], 0);
    assert_eq!(l["allowed"], true);
    assert_eq!(l["charged"], true);
    assert_eq!(l["reset_ms"], 29_750);
    assert!(l["key"].as_str().unwrap().contains("client"), "{l}");

    // Over the limit: 429, and the explanation says rejected and not charged.
    let (code, body) = http_post(addr, "/json?explain=true", ALICE).await;
    assert_eq!(code, 429, "{body}");
    let v = parse(&body);
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(v["explain"][0]["limits"][0]["allowed"], false);
    assert_eq!(v["explain"][0]["limits"][0]["charged"], false);

    // Detailed metric, no rule, and an override, in one request.
    let body = json!({
        "domain": "edge",
        "descriptors": [
            {"entries": [{"key": "path", "value": "/api/users"}]},
            {"entries": [{"key": "nothing", "value": "here"}]},
            {"entries": [{"key": "client", "value": "bob"}],
             "limit": {"requests_per_unit": 7, "unit": "HOUR"}}
        ]
    });
    let (code, reply) = http_post(addr, "/json?explain", &body.to_string()).await;
    assert_eq!(code, 200, "{reply}");
    let v = parse(&reply);
    assert_eq!(v["explain"][0]["stats_key"], "edge.path_/api/users");
    assert_eq!(v["explain"][0]["rule"], "edge.path_/api/*");
    assert_eq!(v["explain"][1]["matched"], "no_rule");
    assert!(v["explain"][1].get("limits").is_none());
    assert_eq!(v["explain"][2]["matched"], "override");
    assert_eq!(v["explain"][2]["stats_key"], "edge.client");
    assert_eq!(v["statuses"][2]["currentLimit"]["unit"], "HOUR");
    assert_eq!(v["statuses"][1], json!({"code": "OK"}));

    // Bad bodies: 400 with the reason.
    for (bad, why) in [
        ("not json", "invalid JSON"),
        (
            r#"{"domain":"edge","descriptors":[],"extra":1}"#,
            "unknown field",
        ),
        (
            r#"{"domain":"","descriptors":[{"entries":[{"key":"k"}]}]}"#,
            "domain must not be empty",
        ),
        (r#"{"domain":"edge"}"#, "descriptor list must not be empty"),
        (
            r#"{"domain":"edge","descriptors":[{"entries":[]}]}"#,
            "has no entries",
        ),
    ] {
        let (code, reply) = http_post(addr, "/json", bad).await;
        assert_eq!(code, 400, "{bad}: {reply}");
        assert!(
            parse(&reply)["error"].as_str().unwrap().contains(why),
            "{bad}: {reply}"
        );
    }
    // GET is not the API.
    assert_eq!(s.http_get("/json").await.0, 405);
    s.stop().await;
}

#[test]
fn check_requests_explains_offline() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let requests = dir.path().join("requests.jsonl");
    std::fs::write(
        &requests,
        format!("# three times alice, then a minute later\n{ALICE}\n{ALICE}\n\n{ALICE}\n{{\"advance\": \"60s\"}}\n{ALICE}\n"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--requests"])
        .arg(&requests)
        .arg(&config)
        .output()
        .expect("run sluice check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let heads: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with('#') || l.starts_with('('))
        .collect();
    assert_eq!(
        heads,
        [
            "#1 domain edge: OK",
            "#2 domain edge: OK",
            "#3 domain edge: OVER_LIMIT",
            "(+60s later)",
            "#4 domain edge: OK",
        ],
        "{stdout}"
    );
    let at = format!("{}:6:17", config.display());
    assert!(
        stdout.contains(&format!(
            "  [client=alice] OK <- rule edge.client_alice ({at})"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("alice_rule: fixed_window 2/MINUTE 1 hit: rejected, remaining 0"),
        "{stdout}"
    );
    assert!(stdout.contains("not charged"), "{stdout}");

    // --json: one /json response (with its explanation) per request.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--json", "--requests"])
        .arg(&requests)
        .arg(&config)
        .output()
        .expect("run sluice check");
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(parse)
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2]["overallCode"], "OVER_LIMIT");
    assert_eq!(lines[3]["explain"][0]["limits"][0]["remaining"], 1);

    // A bad request names its line.
    std::fs::write(&requests, format!("{ALICE}\n{{\"domain\":\"edge\"}}\n")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--requests"])
        .arg(&requests)
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("item 2: rate limit descriptor list must not be empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `POST /json` goes through the gRPC pipeline: the same size limits (issue 14: a 1.9 MB
/// value, 20,000 descriptors and 50,000 entries were all accepted), each refusal naming its
/// setting, and a normal request still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_has_the_grpc_size_limits() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--json-api"]).await;
    let addr = s.server.http_addr;
    let descriptor = |v: &str| json!({"entries": [{"key": "client", "value": v}]});
    let big_value = json!({"domain": "edge", "descriptors": [descriptor(&"x".repeat(1_900_000))]});
    let many_descriptors = json!({
        "domain": "edge",
        "descriptors": (0..20_000).map(|i| descriptor(&i.to_string())).collect::<Vec<_>>(),
    });
    let many_entries = json!({
        "domain": "edge",
        "descriptors": [{"entries": (0..50).map(|i| json!({"key": format!("k{i}"), "value": "v"})).collect::<Vec<_>>()}],
    });
    let long_value = json!({"domain": "edge", "descriptors": [descriptor(&"y".repeat(70_000))]});
    // Bodies past the byte limit get 413 from the HTTP port's gate, before they are parsed.
    for (body, setting, status) in [
        (big_value, "--max-request-bytes", 413),
        (many_descriptors, "--max-request-bytes", 413),
        (many_entries, "--max-entries", 400),
        (long_value, "--max-value-bytes", 400),
    ] {
        let (code, reply) = http_post(addr, "/json", &body.to_string()).await;
        assert_eq!(code, status, "{setting}: {reply}");
        let why = parse(&reply)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(why.contains(setting), "{setting}: {why}");
    }
    let few_descriptors = json!({
        "domain": "edge",
        "descriptors": (0..65).map(|i| descriptor(&i.to_string())).collect::<Vec<_>>(),
    });
    let (code, reply) = http_post(addr, "/json", &few_descriptors.to_string()).await;
    assert_eq!(code, 400, "{reply}");
    assert!(reply.contains("--max-descriptors"), "{reply}");
    let (code, body) = http_post(addr, "/json", ALICE).await;
    assert_eq!(code, 200, "{body}");
    s.stop().await;
}
