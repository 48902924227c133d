//! The fuzz targets' bodies, in the library so that `cargo test` replays the committed corpora
//! (`fuzz/corpus/<target>/`, tests/it/fuzz_replay.rs) through exactly the code the fuzzers run
//! (`fuzz/fuzz_targets/*.rs` only call these). Each takes arbitrary bytes, must never panic,
//! and asserts the invariants it can check cheaply (an assertion failure is a finding). Built
//! only with the `fuzzing` feature (tests and fuzz/ enable it), so the server does not ship it.
//!
//! * [`config`]: bytes as a YAML config file -> compiler -> rule dump.
//! * [`request`]: bytes as an encoded `RateLimitRequest` -> request limits -> validation ->
//!   matching against a fixed rule set -> storage keys -> the in-memory store -> response.
//! * [`decide`]: bytes as a limit and a timeline of asks -> the decision functions.

use std::sync::{Arc, OnceLock};

use prost::Message;

use crate::algorithm::{self, Algorithm, Ask, Limit, Param, State};
use crate::clock::ManualClock;
use crate::config::{compile, ConfigFile, LoadOptions};
use crate::limiter::{Limiter, LimiterOptions};
use crate::model::{Micros, MICROS_PER_SEC};
use crate::rules::RuleSet;
use crate::service::{convert, limits::RequestLimits};
use crate::store::{key, Deadline, MemoryStore};

/// Compiles `data` as one config file; an accepted config must also dump.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = ConfigFile {
        path: "fuzz.yaml".into(),
        content: text.to_string(),
    };
    for merge_domains in [false, true] {
        match compile(
            std::slice::from_ref(&file),
            LoadOptions {
                merge_domains,
                ..LoadOptions::default()
            },
        ) {
            Ok(rules) => {
                let _ = rules.dump();
            }
            Err(errors) => assert!(!errors.0.is_empty(), "a rejected config names an error"),
        }
    }
}

/// The rule set requests are matched against: every kind of rule, in domain `f`.
pub const REQUEST_CONFIG: &str = r#"
domain: f
allow_refunds: true
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: "*:*"
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: user
    rate_limits:
      - {name: short, unit: second, requests_per_unit: 2, algorithm: token_bucket}
      - {name: long, unit: hour, requests_per_unit: 5, algorithm: gcra}
    descriptors:
      - key: ip
        rate_limit: {unit: hour, requests_per_unit: 2, algorithm: distinct}
  - key: log
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
  - key: leak
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: leaky_bucket, name: leak}
  - key: vip
    rate_limit: {unlimited: true, name: vip, replaces: [{name: leak}]}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
"#;

fn request_rules() -> &'static Arc<RuleSet> {
    static RULES: OnceLock<Arc<RuleSet>> = OnceLock::new();
    RULES.get_or_init(|| {
        let file = ConfigFile {
            path: "fuzz-request.yaml".into(),
            content: REQUEST_CONFIG.to_string(),
        };
        match compile(&[file], LoadOptions::default()) {
            Ok(rules) => Arc::new(rules),
            Err(e) => panic!("the fuzz rule set must compile: {e:?}"),
        }
    })
}

/// Decodes `data` as a request and runs it through the whole request path twice (as sent, and
/// with its domain set to `f` so that it meets rules), on a fresh in-memory store.
pub fn request(data: &[u8]) {
    let Ok(req) = crate::proto::RateLimitRequest::decode(data) else {
        return;
    };
    if RequestLimits::default().check(&req).is_err() {
        return;
    }
    let n = req.descriptors.len();
    let mut in_domain = req.clone();
    in_domain.domain = "f".into();
    for req in [req, in_domain] {
        let Ok(req) = convert::request(req) else {
            continue;
        };
        storage_keys_are_injective(&req);
        let limiter = Limiter::new(
            MemoryStore::new(1_000),
            Arc::new(ManualClock::new(1_700_000_000 * MICROS_PER_SEC)),
            LimiterOptions {
                response_headers: Some(Default::default()),
                ietf_headers: true,
                ..Default::default()
            },
        );
        limiter.set_rules(request_rules().clone());
        // The in-memory store never waits: the future completes on its first poll.
        if let Ok(r) = futures::executor::block_on(limiter.should_rate_limit(&req, Deadline::NONE))
        {
            assert_eq!(r.statuses.len(), n, "one status per descriptor");
            let _ = convert::response(r);
        }
    }
}

/// Different descriptors never share a storage key, and a key's `{...}` hash tag is exactly
/// the descriptor (user bytes never contain the delimiters after escaping).
fn storage_keys_are_injective(req: &crate::model::Request) {
    let Ok(limit) = Limit::fixed_window(1, MICROS_PER_SEC) else {
        return;
    };
    let keys: Vec<Vec<u8>> = req
        .descriptors
        .iter()
        .map(|d| {
            let mut k = Vec::new();
            key::build(
                &mut k,
                b"",
                &req.domain,
                d.entries.iter().map(|e| key::Part::Value {
                    key: &e.key,
                    value: &e.value,
                }),
                &limit,
                None,
            );
            assert_eq!(k.iter().filter(|&&b| b == b'{').count(), 1, "one hash tag");
            assert_eq!(k.iter().filter(|&&b| b == b'}').count(), 1, "one hash tag");
            k
        })
        .collect();
    for (i, a) in req.descriptors.iter().enumerate() {
        for (j, b) in req.descriptors.iter().enumerate().skip(i + 1) {
            assert_eq!(
                a.entries == b.entries,
                keys[i] == keys[j],
                "descriptors {i} and {j}: equal keys iff equal entries"
            );
        }
    }
}

/// Reads numbers off the front of the fuzz input (zeros once it runs out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Bytes as a limit (algorithm, requests, window, burst, precision) and a timeline of asks
/// (time step, hits, refund); every valid limit is run through the decision function with the
/// state carried as a store would carry it.
///
/// Layout: `alg:u8 requests:u32 window_ms:u32 burst:u32 precision:u8`, then repeated
/// `step_ms:u32 hits:u8 flags:u8` (flags bit 0: refund, bit 1: charge even if rejected).
pub fn decide(data: &[u8]) {
    let mut b = Bytes(data);
    let algorithm = Algorithm::ALL[usize::from(b.u8()) % Algorithm::ALL.len()];
    let requests = u64::from(b.u32());
    let window = Micros::from(b.u32().max(1)) * 1_000;
    let burst = b.u32();
    let precision = u32::from(b.u8());
    let built = Limit::new(algorithm, requests, window).and_then(|l| match algorithm.param() {
        Some(Param::Burst) if burst != 0 => l.with_burst(u64::from(burst)),
        Some(Param::Precision) if precision != 0 => l.with_precision(precision),
        _ => Ok(l),
    });
    let Ok(limit) = built else {
        return;
    };
    let mut now: Micros = 1_700_000_000 * MICROS_PER_SEC;
    // The stored state and when the decision function said it may be forgotten.
    let mut state: Option<(State, Micros)> = None;
    let mut steps = 0;
    while !b.is_empty() && steps < 256 {
        steps += 1;
        now += Micros::from(b.u32()) * 1_000;
        let hits = u64::from(b.u8() % 8);
        let flags = b.u8();
        let ask = Ask {
            hits,
            refund: flags & 1 != 0,
            value: u64::from(flags >> 2),
            dry_run: false,
        };
        let frame = limit.frame(now);
        let o = algorithm::evaluate(&limit, state.as_ref().map(|(s, _)| s), frame, ask);
        assert!(o.reset >= 0, "reset {} < 0", o.reset);
        assert!(o.debt_reset >= 0, "debt_reset {} < 0", o.debt_reset);
        if !o.allowed {
            assert_eq!(o.remaining, 0, "a rejected ask reports nothing remaining");
        }
        let cap = limit.requests().max(limit.burst().unwrap_or(0));
        assert!(
            o.remaining <= cap,
            "remaining {} above the limit's {cap}",
            o.remaining
        );
        // Stores forget a state at its expiry: it must decide like no state at all.
        if matches!(state, Some((_, expires_at)) if expires_at <= now) {
            let fresh = algorithm::evaluate(&limit, None, frame, ask);
            assert_eq!(
                (fresh.allowed, fresh.remaining),
                (o.allowed, o.remaining),
                "an expired state must equal no state"
            );
        }
        if hits > 0 && (o.allowed || ask.refund || flags & 2 != 0) {
            state = Some((o.charged, o.expires_at));
        }
    }
}
