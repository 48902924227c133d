//! `sluice check --requests FILE`: sample requests decided against a config on a fresh
//! in-memory store, each decision explained, before the config is rolled out.
//!
//! FILE holds requests as `POST /json` takes them, one JSON object per line (blank lines and
//! lines starting with `#` skipped) or one JSON array. An object `{"advance": "30s"}` moves
//! the clock forward between requests; otherwise every request is decided at the same
//! instant (the time the check started).

use std::fmt::Write;
use std::sync::Arc;

use serde_json::Value;

use crate::clock::{Clock, ManualClock, SystemClock};
use crate::limiter::{Code, Limiter, LimiterOptions};
use crate::model::{display_bytes, MICROS_PER_MILLI};
use crate::rules::duration::parse as parse_duration;
use crate::rules::RuleSet;
use crate::service::rls_json;
use crate::store::{Deadline, MemoryStore};

/// The steps of a requests file, each with its line (or array index) for messages.
fn steps(text: &str) -> Result<Vec<(usize, Value)>, String> {
    if text.trim_start().starts_with('[') {
        let items: Vec<Value> =
            serde_json::from_str(text).map_err(|e| format!("invalid JSON array: {e}"))?;
        return Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, v))
            .collect());
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        out.push((i + 1, v));
    }
    Ok(out)
}

/// Decides every request of `text` against `rules` and renders the decisions (text, or one
/// JSON response per request with `json`).
pub async fn run(rules: RuleSet, text: &str, as_json: bool) -> Result<String, String> {
    let clock = ManualClock::new(SystemClock.now());
    let store = MemoryStore::new(1_000_000);
    let limiter = Limiter::new(store, Arc::new(clock.clone()), LimiterOptions::default());
    limiter.set_rules(Arc::new(rules));
    let mut out = String::new();
    let mut n = 0;
    for (at, step) in steps(text)? {
        if let Some(by) = step.get("advance") {
            let d = by
                .as_str()
                .ok_or_else(|| format!("item {at}: advance takes a duration such as \"30s\""))
                .and_then(|s| parse_duration(s).map_err(|e| format!("item {at}: {e}")))?;
            clock.advance(i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
            if !as_json {
                let _ = writeln!(out, "(+{} later)", by.as_str().unwrap_or_default());
            }
            continue;
        }
        n += 1;
        let body = serde_json::to_vec(&step).map_err(|e| e.to_string())?;
        let req = rls_json::request(&body).map_err(|e| format!("item {at}: {e}"))?;
        let (resp, explained) = limiter
            .explain(&req, Deadline::NONE)
            .await
            .map_err(|e| format!("item {at}: {e}"))?;
        if as_json {
            let _ = writeln!(out, "{}", rls_json::response(&resp, Some(&explained)));
            continue;
        }
        let overall = match resp.overall {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        };
        let _ = writeln!(out, "#{n} domain {}: {overall}", req.domain);
        for (d, e) in req.descriptors.iter().zip(&explained) {
            let entries: Vec<String> = d
                .entries
                .iter()
                .map(|e| format!("{}={}", display_bytes(&e.key), display_bytes(&e.value)))
                .collect();
            let _ = write!(out, "  [{}] {}", entries.join(", "), e.code);
            match (&e.rule, &e.source) {
                (Some(r), Some(s)) => {
                    let _ = write!(out, " <- {} {r} ({s})", e.matched);
                }
                _ => {
                    let _ = write!(out, " <- {}", e.matched);
                }
            }
            out.push('\n');
            for l in &e.limits {
                let _ = writeln!(
                    out,
                    "      {}{} {}/{} {}: {}, remaining {}, resets in {:.3}s, {} (key {})",
                    l.name
                        .as_deref()
                        .map(|n| format!("{n}: "))
                        .unwrap_or_default(),
                    l.algorithm,
                    l.requests_per_unit,
                    l.unit,
                    if l.hits == 1 {
                        "1 hit".to_string()
                    } else {
                        format!("{} hits", l.hits)
                    },
                    if l.allowed { "allowed" } else { "rejected" },
                    l.remaining,
                    l.reset_ms as f64 / MICROS_PER_MILLI as f64,
                    if l.charged { "charged" } else { "not charged" },
                    l.key
                );
            }
        }
    }
    Ok(out)
}
