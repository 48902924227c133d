//! Builders for the stages' unit tests: rules from YAML, requests from entry lists.

use crate::config::{compile, ConfigFile, LoadOptions};
use crate::model::{Descriptor, Entry, Request};
use crate::rules::RuleSet;

/// The rules of one YAML file (panics on a config error: a broken test).
pub(crate) fn rules(yaml: &str) -> RuleSet {
    let file = ConfigFile {
        path: "test.yaml".into(),
        content: yaml.to_string(),
    };
    match compile(&[file], LoadOptions::default()) {
        Ok(r) => r,
        Err(e) => panic!("test config: {e}"),
    }
}

/// A descriptor of one hit with these `(key, value)` entries.
pub(crate) fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect(),
        limit_override: None,
        hits: 1,
        refund: false,
    }
}

/// A request of domain `d`.
pub(crate) fn request(descriptors: Vec<Descriptor>) -> Request {
    Request {
        domain: "d".into(),
        descriptors,
    }
}
