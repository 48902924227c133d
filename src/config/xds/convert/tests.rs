//! Tests: a `RateLimitConfig` compiles to the same rules as the YAML envoyproxy/ratelimit
//! would read for it, and a bad one fails with the file path's errors.

use std::sync::Arc;

use prost::Message;
use prost_types::Any;

use super::*;
use crate::config::{compile, compile_raw, ConfigFile, LoadOptions};
use crate::proto::rls_conf::{RateLimitReplace, RateLimitUnit};

fn any(config: &RateLimitConfig) -> Any {
    Any {
        type_url: TYPE_URL.into(),
        value: config.encode_to_vec(),
    }
}

fn leaf(key: &str, value: &str, rpu: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: rpu,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The rules of a compiled rule set, without where they were written (file and line, or
/// resource) and without the source lines.
fn rules(set: &crate::rules::RuleSet) -> Vec<String> {
    set.dump()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(" (").map_or(l, |(rule, _)| rule).to_string())
        .collect()
}

#[test]
fn a_snapshot_compiles_to_the_rules_of_the_same_yaml() {
    let mut metadata = prost_types::Struct::default();
    metadata.fields.insert(
        "tier".into(),
        prost_types::Value {
            kind: Some(Kind::StringValue("gold".into())),
        },
    );
    let mut named = leaf("remote_address", "", 3, RateLimitUnit::Minute);
    named.rate_limit.as_mut().unwrap().name = "per_ip".into();
    let mut replacing = leaf("user", "vip", 100, RateLimitUnit::Hour);
    replacing.rate_limit.as_mut().unwrap().replaces = vec![RateLimitReplace {
        name: "per_ip".into(),
    }];
    replacing.metadata = Some(metadata);
    let route = RateLimitDescriptor {
        key: "first-route".into(),
        value: "first-route".into(),
        descriptors: vec![named, replacing],
        ..Default::default()
    };
    let mut quota = leaf("model_name_override", "gpt-4", 1000, RateLimitUnit::Day);
    quota.quota_mode = true;
    let mut shadow = leaf("client", "*", 2, RateLimitUnit::Second);
    shadow.shadow_mode = true;
    shadow.detailed_metric = true;
    let unlimited = RateLimitDescriptor {
        key: "health".into(),
        rate_limit: Some(RateLimitPolicy {
            unlimited: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let snapshot = [
        RateLimitConfig {
            name: "first-listener".into(),
            domain: "first-listener".into(),
            descriptors: vec![route, shadow, unlimited],
        },
        RateLimitConfig {
            name: String::new(),
            domain: "ai-gateway-quota".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "backend_name".into(),
                value: "default/openai".into(),
                descriptors: vec![quota],
                ..Default::default()
            }],
        },
    ];
    let docs = documents(&snapshot.iter().map(any).collect::<Vec<_>>()).unwrap();
    assert_eq!(&*docs[1].name, "xds:ai-gateway-quota");
    let from_xds = compile_raw(&docs, LoadOptions::default()).unwrap();

    let yaml = [
        r#"
domain: first-listener
descriptors:
  - key: first-route
    value: first-route
    descriptors:
      - key: remote_address
        rate_limit: {requests_per_unit: 3, unit: MINUTE, name: per_ip}
      - key: user
        value: vip
        rate_limit: {requests_per_unit: 100, unit: HOUR, replaces: [{name: per_ip}]}
        metadata: {tier: gold}
  - key: client
    value: "*"
    shadow_mode: true
    detailed_metric: true
    rate_limit: {requests_per_unit: 2, unit: SECOND}
  - key: health
    rate_limit: {unlimited: true}
"#,
        r#"
domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: default/openai
    descriptors:
      - key: model_name_override
        value: gpt-4
        quota_mode: true
        rate_limit: {requests_per_unit: 1000, unit: DAY}
"#,
    ];
    let files: Vec<ConfigFile> = yaml
        .iter()
        .enumerate()
        .map(|(i, y)| ConfigFile {
            path: Arc::from(format!("{i}.yaml")),
            content: y.to_string(),
        })
        .collect();
    let from_yaml = compile(&files, LoadOptions::default()).unwrap();
    assert_eq!(rules(&from_xds), rules(&from_yaml));
    assert_eq!(rules(&from_xds).len(), 5, "{:#?}", rules(&from_xds));
    let quota_rule = from_xds
        .all_rules()
        .into_iter()
        .find(|r| r.full_key.contains("gpt-4"))
        .unwrap();
    assert!(quota_rule.quota_mode);
    let vip = from_xds
        .all_rules()
        .into_iter()
        .find(|r| r.full_key.ends_with("user_vip"))
        .unwrap();
    assert_eq!(vip.metadata, Some(serde_json::json!({"tier": "gold"})));
}

#[test]
fn a_bad_snapshot_fails_with_every_error_at_its_resource() {
    let no_unit = leaf("a", "", 5, RateLimitUnit::Unknown);
    let dup = [
        leaf("b", "x", 1, RateLimitUnit::Second),
        leaf("b", "x", 2, RateLimitUnit::Second),
    ];
    let config = RateLimitConfig {
        name: "edge".into(),
        domain: "edge".into(),
        descriptors: [vec![no_unit], dup.to_vec()].concat(),
    };
    let docs = documents(&[any(&config)]).unwrap();
    let errors = compile_raw(&docs, LoadOptions::default()).unwrap_err();
    let text = errors.to_string();
    assert_eq!(errors.0.len(), 2, "{text}");
    assert!(
        text.contains("xds:edge:1:1: rate_limit needs a unit"),
        "{text}"
    );
    assert!(
        text.contains("duplicate descriptor composite key 'edge.b_x'"),
        "{text}"
    );

    // Two resources of one domain: refused, as two files would be.
    let twice = compile_raw(
        &documents(&[any(&config), any(&config)]).unwrap(),
        LoadOptions::default(),
    );
    assert!(twice.is_err());
}

#[test]
fn resources_of_another_type_or_undecodable_are_refused() {
    let wrong = Any {
        type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
        value: Vec::new(),
    };
    assert!(matches!(
        documents(&[wrong]),
        Err(ResourceError::WrongType { index: 0, .. })
    ));
    let garbage = Any {
        type_url: TYPE_URL.into(),
        value: vec![0xff, 0xff, 0xff],
    };
    assert!(matches!(
        documents(&[garbage]),
        Err(ResourceError::Undecodable { index: 0, .. })
    ));
}
