//! A statsd_exporter mapping file (`mappings:` of `match`, `match_type`, `name`, `labels`,
//! `action`, `match_metric_type`), as envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML takes it:
//! a statsd name becomes a Prometheus name and labels. Glob mappings are tried first, then
//! regex mappings, each in file order (statsd_exporter's order); an unmapped name is kept with
//! every character outside `[a-zA-Z0-9_]` replaced by `_`. Fields that would change a counter's
//! name or labels and cannot be honoured are refused when the file is read.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde::Deserialize;

/// A mapping file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapperError {
    #[error("cannot read the statsd mapping file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("statsd mapping file {path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    mappings: Vec<RawMapping>,
}

/// Only `match_type` changes names; the rest tunes timers and series lifetimes.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    match_type: Option<String>,
    #[serde(default)]
    glob_disable_ordering: bool,
    #[serde(rename = "observer_type", alias = "timer_type")]
    _observer_type: Option<String>,
    #[serde(rename = "histogram_options", alias = "buckets")]
    _histogram: Option<serde_json::Value>,
    #[serde(rename = "summary_options", alias = "quantiles")]
    _summary: Option<serde_json::Value>,
    #[serde(rename = "ttl")]
    _ttl: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    #[serde(rename = "match")]
    pattern: String,
    match_type: Option<String>,
    name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    action: Option<String>,
    match_metric_type: Option<String>,
    #[serde(default)]
    help: Option<String>,
    // These shape timers, summaries and series lifetimes; sluice's statsd names are counters.
    #[serde(rename = "timer_type", alias = "observer_type")]
    _observer_type: Option<String>,
    #[serde(rename = "histogram_options", alias = "buckets")]
    _histogram: Option<serde_json::Value>,
    #[serde(rename = "summary_options", alias = "quantiles")]
    _summary: Option<serde_json::Value>,
    #[serde(rename = "scale")]
    _scale: Option<f64>,
    #[serde(rename = "ttl")]
    _ttl: Option<String>,
}

/// The kind of a statsd event, for `match_metric_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Counter,
    Gauge,
    Observer,
}

struct Mapping {
    regex: Regex,
    /// Expanded with the captures; `None`: dropped.
    name: Option<String>,
    labels: Vec<(String, String)>,
    only: Option<EventType>,
    help: Option<String>,
}

/// A compiled mapping file.
pub(crate) struct Mapper {
    /// Globs first, then regexes, each in file order.
    mappings: Vec<Mapping>,
}

/// Where a statsd name ends up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub help: Option<String>,
}

impl Mapper {
    /// envoyproxy/ratelimit's built-in mapping, used when PROMETHEUS_MAPPER_YAML is unset.
    pub(crate) fn builtin() -> Mapper {
        Mapper::parse("envoyproxy/ratelimit's default mapper", DEFAULT)
            .expect("the built-in mapping file is valid")
    }

    pub(crate) fn load(path: &Path) -> Result<Mapper, MapperError> {
        let text = std::fs::read_to_string(path).map_err(|source| MapperError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Mapper::parse(&path.display().to_string(), &text)
    }

    pub(crate) fn parse(path: &str, text: &str) -> Result<Mapper, MapperError> {
        let invalid = |message: String| MapperError::Invalid {
            path: path.to_string(),
            message,
        };
        let raw: RawFile = serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let default_type = raw.defaults.match_type.as_deref().unwrap_or("glob");
        let _ = raw.defaults.glob_disable_ordering;
        let (mut globs, mut regexes) = (Vec::new(), Vec::new());
        for (i, m) in raw.mappings.into_iter().enumerate() {
            let at = |what: String| invalid(format!("mapping {} ({}): {what}", i + 1, m.pattern));
            let is_regex = match m.match_type.as_deref().unwrap_or(default_type) {
                "glob" | "" => false,
                "regex" => true,
                other => return Err(at(format!("match_type {other}: expected glob or regex"))),
            };
            let regex = if is_regex {
                Regex::new(&m.pattern)
            } else {
                Regex::new(&glob_to_regex(&m.pattern))
            }
            .map_err(|e| at(e.to_string()))?;
            let only = match m.match_metric_type.as_deref() {
                None | Some("") => None,
                Some("counter") => Some(EventType::Counter),
                Some("gauge") => Some(EventType::Gauge),
                Some("observer" | "timer" | "histogram" | "summary") => Some(EventType::Observer),
                Some(other) => return Err(at(format!("match_metric_type {other}"))),
            };
            let name = match m.action.as_deref() {
                None | Some("" | "map") => Some(
                    m.name
                        .clone()
                        .ok_or_else(|| at("a mapping needs a name".into()))?,
                ),
                Some("drop") => None,
                Some(other) => return Err(at(format!("action {other}: expected map or drop"))),
            };
            let mapping = Mapping {
                regex,
                name,
                labels: m.labels.into_iter().collect(),
                only,
                help: m.help,
            };
            if is_regex {
                regexes.push(mapping);
            } else {
                globs.push(mapping);
            }
        }
        globs.extend(regexes);
        Ok(Mapper { mappings: globs })
    }

    /// The Prometheus name and labels of the statsd event `name`; `None` when dropped.
    pub(crate) fn map(&self, name: &str, kind: EventType) -> Option<Mapped> {
        for m in &self.mappings {
            if m.only.is_some_and(|t| t != kind) {
                continue;
            }
            let Some(caps) = m.regex.captures(name) else {
                continue;
            };
            let target = m.name.as_ref()?;
            let expand = |template: &str| {
                let mut out = String::new();
                caps.expand(template, &mut out);
                out
            };
            return Some(Mapped {
                name: escape_name(&expand(target)),
                labels: m
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), expand(v)))
                    .collect(),
                help: m.help.clone(),
            });
        }
        Some(Mapped {
            name: escape_name(name),
            labels: Vec::new(),
            help: None,
        })
    }
}

/// statsd_exporter's glob: `*` is one run of characters without a dot, anchored at both ends.
fn glob_to_regex(glob: &str) -> String {
    let parts: Vec<String> = glob.split('*').map(regex::escape).collect();
    format!("^{}$", parts.join("([^.]*)"))
}

/// statsd_exporter's escaping: every character outside `[a-zA-Z0-9_]` becomes `_`, and a name
/// starting with a digit gets a `_` in front.
fn escape_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

const DEFAULT: &str = include_str!("default_mapper.yaml");

#[cfg(test)]
mod tests;
