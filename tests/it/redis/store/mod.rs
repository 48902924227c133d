//! The Redis store against a real single `redis-server` (started per test on a free loopback
//! port): parity of the Lua script with the in-memory policy, one round trip per request,
//! exact limits across instances, the failure policy, the circuit breaker, recovery, a lost function library,
//! the command timeout, and the `--backend redis` wiring of the server.
//!
//! Each test owns its Redis, so they may run in parallel.
//!
//! Modules: `parity` (the scripts against the in-memory policy), `decisions` (round trips,
//! exactness across instances, the clock), `plain` (fixed_window takes with no script:
//! exact across window edges, settled, given back, mended), `long_log` (a sliding_log of
//! thousands of entries beside fixed windows, exact and O(log n)), `failures` (the failure policy,
//! the breaker, a lost library, stalls), `server` (`--backend redis` end to end).

mod clocks;
mod decisions;
mod failures;
mod long_log;
mod parity;
mod plain;
mod server;
mod window_first_take;

use crate::support::redis as redis_support;
use crate::support::req_k;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use crate::support::poll::{wait_until, wait_until_async};
use redis_support::{connected, fixed_window_state, key_of};
use redis_support::{ping, RedisNode};
use sluice::algorithm::{distinct, Algorithm, Ask, Calendar, Limit, Param, State};
use sluice::clock::ManualClock;
use sluice::model::{Micros, Unit};
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::settings::ServeArgs;
use sluice::store::batch;
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, RedisOptions, RedisStore};
use sluice::store::{Charge, Check, Deadline, ErrorKind, FailurePolicy, Fallback, MapTable, Store};

const SEC: Micros = 1_000_000;
/// A realistic "now" (November 2023): timestamps of 16 digits, as in production.
const T0: Micros = 1_700_000_000 * SEC;

fn options(url: &str, clock: ClockSource) -> RedisOptions {
    // Generous: this box is small and shared; the timeout test sets its own.
    redis_support::store_options(url, clock, Duration::from_secs(2))
}

fn named_key_of(prefix: &str, value: &str, limit: &Limit, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    key::build(
        &mut out,
        prefix.as_bytes(),
        "d",
        [Part::Value {
            key: b"k",
            value: value.as_bytes(),
        }],
        limit,
        Some(name),
    );
    out
}

fn take<'a>(key: &'a [u8], limit: &'a Limit, hits: u64, group: u32) -> Check<'a> {
    Check {
        group,
        ..Check::new(key, limit, Ask::take(hits))
    }
}

// ---------------------------------------------------------------------------------------------
// Parity: the Lua script and `batch::decide` agree on random timelines.
// ---------------------------------------------------------------------------------------------

/// `sluice serve` on the Redis at `url` with `config`, on free ports, plus `extra` flags.
fn serve_on_redis(config: &std::path::Path, url: &str, extra: &[&str]) -> ServeArgs {
    let mut flags = vec!["--backend", "redis", "--redis-url", url];
    flags.extend_from_slice(extra);
    crate::support::parse_serve(config, &flags)
}

/// A Redis server with sluice's function library loaded, for calling its functions directly.
fn with_library() -> RedisNode {
    let redis = RedisNode::start();
    let loaded = redis.cli(&[
        "FUNCTION",
        "LOAD",
        &sluice::store::redis::library::LIBRARY.source,
    ]);
    assert!(loaded.starts_with("sluice_"), "{loaded}");
    redis
}

/// Redis' own clock (`TIME`), µs.
fn redis_now(redis: &RedisNode) -> Micros {
    let t = redis.cli(&["TIME"]);
    let mut parts = t.lines().map(|l| l.trim().parse::<i64>().unwrap());
    let (s, us) = (parts.next().unwrap(), parts.next().unwrap());
    s * SEC + us
}

/// A hash key's fields and values, in Redis' order.
fn fields(redis: &RedisNode, key: &[u8]) -> Vec<(String, String)> {
    let all = redis.cli(&["HGETALL", std::str::from_utf8(key).unwrap()]);
    let lines: Vec<&str> = all.lines().collect();
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// A superseded fixed window's mark (expiry.lua `SUPERSEDED`, 2^53).
const SUPERSEDED: &str = "9007199254740992";
