//! The Redis store against a real single `redis-server` (started per test on a free loopback
//! port): parity of the Lua script with the in-memory policy, one round trip per request,
//! exact limits across instances, the failure policy, the circuit breaker, recovery, NOSCRIPT,
//! the command timeout, and the `--backend redis` wiring of the server.
//!
//! Each test owns its Redis, so they may run in parallel.

use crate::support::redis as redis_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fred::prelude::{ClientLike, KeysInterface};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use crate::support::poll::{wait_until, wait_until_async};
use redis_support::{ping, RedisNode};
use sluice::algorithm::{distinct, Algorithm, Ask, Calendar, Limit, State};
use sluice::clock::ManualClock;
use sluice::model::{Micros, Unit};
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::settings::{Cli, Command, ServeArgs};
use sluice::store::batch;
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore};
use sluice::store::{Charge, Check, Deadline, ErrorKind, FailurePolicy, Fallback, MapTable, Store};

const SEC: Micros = 1_000_000;
/// A realistic "now" (November 2023): timestamps of 16 digits, as in production.
const T0: Micros = 1_700_000_000 * SEC;

fn options(url: &str, clock: ClockSource) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url: url.into(),
            tls_ca: None,
            tls_client: None,
            username: None,
            password: None,
            password_file: None,
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
        },
        // Generous: this box is small and shared; the timeout test sets its own.
        command_timeout: Duration::from_secs(2),
        clock,
        breaker: BreakerOptions::default(),
    }
}

async fn connected(opts: RedisOptions) -> RedisStore {
    let store = RedisStore::connect(opts).expect("valid options");
    tokio::time::timeout(Duration::from_secs(60), store.ready())
        .await
        .expect("the store connects");
    store
}

fn key_of(prefix: &str, value: &str, limit: &Limit) -> Vec<u8> {
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
        None,
    );
    out
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

#[derive(Clone, Debug)]
struct CheckSpec {
    key: usize,
    requests: u64,
    /// Picks the burst of a bucket (see [`Scenario::limit`]).
    param: usize,
    hits: u64,
    /// distinct: which of a few values.
    value: u8,
    refund: bool,
    always: bool,
    group: u32,
}

#[derive(Clone, Debug)]
struct Step {
    dt: Micros,
    quota: [bool; 3],
    checks: Vec<CheckSpec>,
}

/// One parity timeline family: three keys, each with its algorithm, window and layout.
struct Scenario {
    name: &'static str,
    keys: [KeySpec; 3],
    /// The three keys are limits of one descriptor (`rate_limits`, named), not three
    /// descriptors.
    one_descriptor: bool,
    /// Added to every requests_per_unit (distinct above 1000 is a HyperLogLog).
    requests_base: u64,
    /// Time steps are drawn up to this long (and back up to a tenth of it).
    max_dt: Micros,
    start: Micros,
    /// Checks per request are drawn below this (2: one check, `fixed_window.lua`'s case).
    max_checks: usize,
}

#[derive(Clone, Copy)]
struct KeySpec {
    algorithm: Algorithm,
    window: Micros,
    precision: u32,
    calendar: Option<Calendar>,
}

const fn spec(algorithm: Algorithm, window: Micros) -> KeySpec {
    KeySpec {
        algorithm,
        window,
        precision: 10,
        calendar: None,
    }
}

impl Scenario {
    fn limit(&self, key: usize, requests: u64, param: usize) -> Limit {
        let k = self.keys[key];
        let requests = self.requests_base + requests;
        let mut l = Limit::new(k.algorithm, requests, k.window);
        l.precision = k.precision;
        l.calendar = k.calendar;
        if k.algorithm.has_burst() && requests > 0 {
            l.burst = [requests, 1, 3, 7][param];
        }
        assert_eq!(l.validate(), Ok(()), "{l:?}");
        l
    }
}

fn scenarios() -> Vec<Scenario> {
    use Algorithm::*;
    let each = |name, a: Algorithm| Scenario {
        name,
        keys: [spec(a, 10 * SEC), spec(a, 60 * SEC), spec(a, 3 * SEC)],
        one_descriptor: false,
        requests_base: 0,
        max_dt: 70 * SEC,
        start: T0 + 7_654_321,
        max_checks: 6,
    };
    let tz = |unit, tz| Some(Calendar { unit, tz });
    let mut sliding = each("sliding_window", SlidingWindow);
    sliding.keys[0].precision = 5;
    sliding.keys[1].precision = 1;
    sliding.keys[2].precision = 100;
    vec![
        each("fixed_window", FixedWindow),
        // One check or two: fixed_window.lua and decide.lua take turns on the same keys.
        Scenario {
            max_checks: 3,
            ..each("fixed_window (fast path)", FixedWindow)
        },
        sliding,
        each("sliding_log", SlidingLog),
        each("token_bucket", TokenBucket),
        each("leaky_bucket", LeakyBucket),
        each("gcra", Gcra),
        each("distinct", Distinct),
        Scenario {
            requests_base: 1_001,
            ..each("distinct (HyperLogLog)", Distinct)
        },
        Scenario {
            name: "calendar windows",
            keys: [
                KeySpec {
                    calendar: tz(Unit::Hour, chrono_tz::Asia::Kolkata),
                    ..spec(FixedWindow, 3_600 * SEC)
                },
                KeySpec {
                    calendar: tz(Unit::Day, chrono_tz::America::New_York),
                    ..spec(FixedWindow, 86_400 * SEC)
                },
                KeySpec {
                    calendar: tz(Unit::Hour, chrono_tz::Asia::Kathmandu),
                    ..spec(Distinct, 3_600 * SEC)
                },
            ],
            one_descriptor: false,
            requests_base: 0,
            max_dt: 3 * 3_600 * SEC,
            // 2023-11-05 03:00 UTC: New York's 25-hour day starts an hour later.
            start: 1_699_153_200 * SEC + 1_234_567,
            max_checks: 6,
        },
        Scenario {
            name: "rate_limits (several limits of one descriptor)",
            keys: [
                spec(SlidingLog, 5 * SEC),
                spec(Gcra, 60 * SEC),
                KeySpec {
                    precision: 4,
                    ..spec(SlidingWindow, 20 * SEC)
                },
            ],
            one_descriptor: true,
            ..each("", FixedWindow)
        },
    ]
}

fn step_strategy(max_dt: Micros, max_checks: usize) -> impl Strategy<Value = Step> {
    let check = (
        (0..3usize, 0..6u64, 0..4usize),
        prop_oneof![3 => 0..3u64, 1 => 3..10u64],
        0..5u8,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.25),
        0..3u32,
    )
        .prop_map(
            |((key, requests, param), hits, value, refund, always, group)| CheckSpec {
                key,
                requests,
                param,
                hits,
                value,
                refund,
                always,
                group,
            },
        );
    let dt = prop_oneof![
        3 => Just(0),
        3 => 1..1_000i64,
        3 => 1..max_dt,
        1 => -(max_dt / 10)..0,
    ];
    (
        dt,
        prop::array::uniform3(prop::bool::weighted(0.3)),
        prop::collection::vec(check, 1..max_checks),
    )
        .prop_map(|(dt, quota, checks)| Step { dt, quota, checks })
}

/// Cases per scenario: eleven scenarios share the < 60 s the Redis parity tests may take.
const PARITY_CASES: u32 = 64;

#[test]
fn lua_script_matches_the_in_memory_policy() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let case = AtomicU64::new(0);
    for scenario in scenarios() {
        let mut runner = TestRunner::new(ProptestConfig {
            cases: PARITY_CASES,
            failure_persistence: crate::support::seeds::regressions(
                "lua_script_matches_the_in_memory_policy",
            ),
            ..ProptestConfig::default()
        });
        let timeline =
            prop::collection::vec(step_strategy(scenario.max_dt, scenario.max_checks), 1..12);
        let result = runner.run(&timeline, |steps| {
            // Fresh keys per case: cases never see each other's state.
            let prefix = format!("parity{}:", case.fetch_add(1, Ordering::Relaxed));
            let limits: Vec<Vec<Vec<Limit>>> = (0..3)
                .map(|k| {
                    (0..6)
                        .map(|r| (0..4).map(|p| scenario.limit(k, r, p)).collect())
                        .collect()
                })
                .collect();
            let keys: Vec<Vec<u8>> = (0..3)
                .map(|k| {
                    let l = &limits[k][1][0];
                    if scenario.one_descriptor {
                        named_key_of(&prefix, "one", l, ["a", "b", "c"][k])
                    } else {
                        key_of(&prefix, &format!("v{k}"), l)
                    }
                })
                .collect();
            let values: Vec<u64> = (0..5)
                .map(|v| distinct::hash(format!("10.0.0.{v}").as_bytes()))
                .collect();
            let mut table = MapTable::default();
            let mut now = scenario.start;
            for (i, step) in steps.iter().enumerate() {
                now += step.dt;
                let checks: Vec<Check<'_>> = step
                    .checks
                    .iter()
                    .map(|c| {
                        let limit = &limits[c.key][c.requests as usize][c.param];
                        Check {
                            key: &keys[c.key],
                            limit,
                            ask: Ask {
                                hits: c.hits,
                                refund: c.refund,
                                value: if limit.algorithm == Algorithm::Distinct {
                                    values[c.value as usize]
                                } else {
                                    0
                                },
                            },
                            charge: if c.always {
                                Charge::Always
                            } else {
                                Charge::IfAdmitted
                            },
                            group: c.group,
                            quota: step.quota[c.group as usize],
                            on_error: None,
                        }
                    })
                    .collect();
                let want = batch::decide(&mut table, &checks, now);
                let got = rt
                    .block_on(store.decide_checks(&checks, now, Deadline::NONE))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want, "step {} at {}: {:?}", i, now, step);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", scenario.name);
        }
    }
}

/// A HyperLogLog-mode distinct limit filled past its limit, 100 values per request (the same
/// key 100 times in one request): the Lua estimate equals Rust's at every step, so the window
/// closes on the same request, and then refuses values seen before too.
#[test]
fn distinct_hyperloglog_closes_on_the_same_request_as_rust() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::new(Algorithm::Distinct, 1_200, 3_600 * SEC);
    assert!(limit.is_approximate());
    let key = key_of("hll:", "x", &limit);
    let mut table = MapTable::default();
    let mut closed_at = None;
    for round in 0..16u32 {
        let checks: Vec<Check<'_>> = (0..100u32)
            .map(|i| Check {
                ask: Ask {
                    value: distinct::hash(&(round * 100 + i).to_le_bytes()),
                    ..Ask::take(1)
                },
                ..take(&key, &limit, 1, i)
            })
            .collect();
        let want = batch::decide(&mut table, &checks, T0);
        let got = rt
            .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
            .unwrap();
        assert_eq!(got, want, "round {round}");
        if closed_at.is_none() && got.iter().any(|v| !v.allowed) {
            closed_at = Some(round);
        }
    }
    assert!(closed_at.is_some(), "1 600 values close a limit of 1 200");
    let seen = [Check {
        ask: Ask {
            value: distinct::hash(&0u32.to_le_bytes()),
            ..Ask::take(1)
        },
        ..take(&key, &limit, 1, 0)
    }];
    let v = rt
        .block_on(store.decide_checks(&seen, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[0].allowed, "a closed HyperLogLog refuses every value");
    let stored = redis.cli(&["STRLEN", std::str::from_utf8(&key).unwrap()]);
    let len: usize = stored.parse().unwrap();
    assert!(
        len > 16_384 && len < 16_384 + 200,
        "registers + header: {len}"
    );
}

/// The HyperLogLog estimate, bit for bit, over register states far beyond what a test can fill
/// value by value (the raw estimate, not only linear counting): a state written in the
/// script's layout (ALGORITHMS.md) and the same state in memory, looked at with a limit so
/// large that `remaining` is `limit - estimate`.
#[test]
fn distinct_hyperloglog_estimate_is_bit_exact() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::new(Algorithm::Distinct, u64::from(u32::MAX), 3_600 * SEC);
    let window_start = T0 - T0 % (3_600 * SEC);
    // A plain client writes the states (binary) the script then reads.
    let client =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis.url()).unwrap())
            .build()
            .unwrap();
    rt.block_on(client.init()).unwrap();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: crate::support::seeds::regressions(
            "distinct_hyperloglog_estimate_is_bit_exact",
        ),
        ..ProptestConfig::default()
    });
    let case = AtomicU64::new(0);
    runner
        .run(
            &(any::<u64>(), 0..101u64, 0..40u32, 0..3u32),
            |(seed, zero_pct, offset, spread)| {
                // Registers: some zero, the others 1 + a geometric draw shifted by `offset`.
                let mut x = seed | 1;
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let regs: Vec<u8> = (0..16_384)
                    .map(|_| {
                        if next() % 100 < zero_pct {
                            0
                        } else {
                            let r = 1 + offset + (next().leading_zeros() >> spread);
                            r.min(51) as u8
                        }
                    })
                    .collect();
                let key = key_of(
                    &format!("est{}:", case.fetch_add(1, Ordering::Relaxed)),
                    "x",
                    &limit,
                );
                let mut ranks = [0u32; 52];
                regs.iter().for_each(|&r| ranks[usize::from(r)] += 1);
                let mut raw = format!("h {window_start}").into_bytes();
                for n in ranks {
                    raw.extend_from_slice(format!(" {n}").as_bytes());
                }
                raw.push(b'\n');
                raw.extend_from_slice(&regs);
                rt.block_on(client.set::<(), _, _>(
                    key.as_slice(),
                    raw.as_slice(),
                    None,
                    None,
                    false,
                ))
                .map_err(|e| TestCaseError::fail(format!("SET: {e}")))?;
                let mut table = MapTable::default();
                table.0.insert(
                    key.clone(),
                    State::Distinct(distinct::State {
                        window_start,
                        values: distinct::Values::Hll(regs.into_boxed_slice()),
                    }),
                );
                let look = [Check {
                    ask: Ask {
                        value: seed,
                        ..Ask::peek()
                    },
                    ..take(&key, &limit, 0, 0)
                }];
                let want = batch::decide(&mut table, &look, T0);
                let got = rt
                    .block_on(store.decide_checks(&look, T0, Deadline::NONE))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want);
                Ok(())
            },
        )
        .unwrap();
}

/// With the Redis clock, calendar windows are computed by sluice (the tz database) around its
/// own clock: a Redis clock an hour away from it still counts in Redis' own hour.
#[test]
fn calendar_windows_follow_the_redis_clock() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Redis)));
    let mut limit = Limit::fixed_window(5, 3_600 * SEC);
    limit.calendar = Some(Calendar {
        unit: Unit::Hour,
        tz: chrono_tz::Asia::Kolkata,
    });
    let redis_now = || -> Micros {
        let t = redis.cli(&["TIME"]);
        let mut it = t.lines().map(|l| l.trim().parse::<i64>().unwrap());
        it.next().unwrap() * SEC + it.next().unwrap()
    };
    for (i, skew) in [-3_600 * SEC, 0, 3_600 * SEC].into_iter().enumerate() {
        let key = key_of("cal:", &format!("x{i}"), &limit);
        let c = [take(&key, &limit, 1, 0)];
        let before = redis_now();
        let v = rt
            .block_on(store.decide_checks(&c, before + skew, Deadline::NONE))
            .unwrap();
        let after = redis_now();
        assert!(v[0].allowed && v[0].remaining == 4, "{v:?}");
        let stored = redis.cli(&["GET", std::str::from_utf8(&key).unwrap()]);
        let start: Micros = stored.split(' ').next().unwrap().parse().unwrap();
        // Kolkata's hours start at :30 UTC; an hour boundary may pass during the call.
        let starts = [
            limit.frame(before).window_start,
            limit.frame(after).window_start,
        ];
        assert!(
            starts.contains(&start),
            "skew {skew}: {stored} not in {starts:?}"
        );
        assert_eq!(start % (1_800 * SEC), 0);
        assert_ne!(start % (3_600 * SEC), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips and sharing.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_five_descriptors_is_one_evalsha() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Redis)).await;
    let limit = Limit::fixed_window(3, 3_600 * SEC);
    let keys: Vec<Vec<u8>> = (0..5)
        .map(|i| key_of("rt:", &format!("v{i}"), &limit))
        .collect();
    let checks: Vec<Check<'_>> = (0..5u32)
        .map(|i| take(&keys[i as usize], &limit, 1, i))
        .collect();
    // Warm up: the script is loaded by then whatever the order of events.
    store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();

    let before = redis.command_calls("evalsha");
    let v = store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();
    assert_eq!(redis.command_calls("evalsha") - before, 1);
    assert!(v.iter().all(|v| v.allowed && v.charged && v.remaining == 1));

    // The rejecting path too: one descriptor over its limit, still one round trip.
    let mut checks = checks;
    checks[2].ask = Ask::take(5);
    let before = redis.command_calls("evalsha");
    let v = store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();
    assert_eq!(redis.command_calls("evalsha") - before, 1);
    assert!(!v[2].allowed);
    assert!(
        v.iter().all(|v| !v.charged),
        "a rejected request charges nothing"
    );
    assert_eq!(
        v[0].remaining, 1,
        "uncharged checks show their unchanged allowance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_sharing_one_redis_admit_exactly_the_limit() {
    const LIMIT: u64 = 50;
    let redis = RedisNode::start();
    let a = connected(options(&redis.url(), ClockSource::Local)).await;
    let b = connected(options(&redis.url(), ClockSource::Local)).await;
    let limit = Limit::fixed_window(LIMIT, 3_600 * SEC);
    let key = key_of("share:", "one", &limit);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let store = if t % 2 == 0 { a.clone() } else { b.clone() };
        let (key, limit) = (key.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..20 {
                let c = [take(&key, &limit, 1, 0)];
                if store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, LIMIT, "320 requests for a limit of {LIMIT}");
}

#[tokio::test]
async fn the_redis_clock_decides_by_default() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Redis)).await;
    let limit = Limit::fixed_window(2, 3_600 * SEC);
    let k = key_of("clock:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    // The `now` given is ignored: a timestamp of 0 would otherwise be a window of 1970.
    let v = store.decide_checks(&c, 0, Deadline::NONE).await.unwrap();
    assert!(v[0].allowed && v[0].remaining == 1);
    assert!(v[0].reset > 0 && v[0].reset <= 3_600 * SEC);
    let stored = redis.cli(&["GET", std::str::from_utf8(c[0].key).unwrap()]);
    let window_start: i64 = stored.split(' ').next().unwrap().parse().unwrap();
    assert!(
        window_start > T0,
        "the window comes from Redis' TIME: {stored}"
    );
    let ttl: i64 = redis
        .cli(&["PTTL", std::str::from_utf8(c[0].key).unwrap()])
        .parse()
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 3_601_000,
        "keys expire by themselves: {ttl}"
    );
}

// ---------------------------------------------------------------------------------------------
// Faults.
// ---------------------------------------------------------------------------------------------

fn noscript_errors(redis: &RedisNode) -> u64 {
    redis
        .cli(&["INFO", "errorstats"])
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_allow_policy_breaker_and_recovery_with_noscript() {
    let mut redis = RedisNode::start();
    let mut opts = options(&redis.url(), ClockSource::Local);
    opts.breaker = BreakerOptions {
        threshold: 3,
        probe_every: Duration::from_millis(20),
    };
    let store = connected(opts).await;
    let f = Fallback::new(store.clone(), FailurePolicy::Allow, None);
    let limit = Limit::fixed_window(1, 3_600 * SEC);
    let k = key_of("outage:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].charged);
    assert!(
        !f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed,
        "the limit of 1 holds"
    );

    redis.kill();
    // While down, the policy answers: allowed, nothing charged. The breaker opens.
    let mut calls = 0;
    while !store.status().breaker_open {
        let v = f
            .decide(&c, T0, Deadline::NONE)
            .await
            .expect("allow policy answers");
        assert!(v[0].allowed && !v[0].charged);
        calls += 1;
        assert!(calls < 1_000, "the breaker never opened");
    }
    // Open: calls are refused without touching the network (one probe at a time may pass).
    let mut refused_at_once = 0;
    for _ in 0..20 {
        match store.decide_checks(&c, T0, Deadline::NONE).await {
            Err(e) if e.kind() == ErrorKind::BreakerOpen => refused_at_once += 1,
            // The probe let through: the connection is down.
            Err(e) => assert_eq!(e.kind(), ErrorKind::Connection, "{e}"),
            Ok(_) => panic!("redis is down"),
        }
    }
    assert!(refused_at_once > 0);
    assert!(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);

    // Back (empty, no script): recovery without restarting anything, NOSCRIPT handled.
    redis.restart();
    let noscript_before = noscript_errors(&redis);
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0, Deadline::NONE).await.is_ok()
    })
    .await;
    assert!(
        noscript_errors(&redis) > noscript_before,
        "the script was reloaded"
    );
    let status = store.status();
    assert!(status.connected && !status.breaker_open, "{status:?}");
    // The restarted Redis is empty: the key counts from zero again, in Redis.
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);

    // SCRIPT FLUSH is handled the same way.
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    let before = noscript_errors(&redis);
    let k2 = key_of("outage:", "y", &limit);
    let other = [take(&k2, &limit, 1, 0)];
    assert!(
        store
            .decide_checks(&other, T0, Deadline::NONE)
            .await
            .unwrap()[0]
            .allowed
    );
    assert_eq!(noscript_errors(&redis), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_policy_counts_in_memory_while_redis_is_down() {
    let mut redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Local)).await;
    let local = Arc::new(sluice::store::MemoryStore::new(1_000));
    let f = Fallback::new(store.clone(), FailurePolicy::Local, Some(local));
    let limit = Limit::fixed_window(2, 3_600 * SEC);
    let k = key_of("local:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    redis.kill();
    let v: Vec<bool> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
        }
        out
    };
    assert_eq!(v, [true, true, false], "the same rule, counted locally");
    let deny = Fallback::new(store, FailurePolicy::Deny, None);
    assert!(!deny.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_costs_the_command_timeout_not_more() {
    let redis = RedisNode::start();
    let mut opts = options(&redis.url(), ClockSource::Local);
    opts.command_timeout = Duration::from_millis(300);
    let store = connected(opts).await;
    let limit = Limit::fixed_window(10, 3_600 * SEC);
    let k = key_of("stall:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    store.decide_checks(&c, T0, Deadline::NONE).await.unwrap();

    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "3"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("redis to stall", || !ping(redis.port));
    let r = store.decide_checks(&c, T0, Deadline::NONE).await;
    assert_eq!(
        r.as_ref().map_err(|e| e.kind()).err(),
        Some(ErrorKind::Timeout),
        "a stalled redis is a timeout: {r:?}"
    );
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the call gave up while redis was still stalled"
    );
    sleeper.wait().unwrap();
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0, Deadline::NONE).await.is_ok()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The server with `--backend redis`.
// ---------------------------------------------------------------------------------------------

/// `sluice serve` on the Redis at `url` with `config`, on free ports, plus `extra` flags.
fn serve_on_redis(config: &std::path::Path, url: &str, extra: &[&str]) -> ServeArgs {
    let config = config.to_str().unwrap();
    let mut argv = vec![
        "sluice",
        "serve",
        "--config",
        config,
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--backend",
        "redis",
        "--redis-url",
        url,
    ];
    argv.extend_from_slice(extra);
    let Command::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("serve")
    };
    args
}

fn request(values: &[&str], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: values
            .iter()
            .map(|v| RateLimitDescriptor {
                entries: vec![Entry {
                    key: b"k".to_vec(),
                    value: v.as_bytes().to_vec(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: hits,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_starts_with_redis_down_then_decides_in_redis() {
    // Take a port for Redis, and keep it down while sluice starts.
    let mut redis = RedisNode::start();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    let args = serve_on_redis(
        &config,
        &redis.url(),
        &[
            "--redis-command-timeout",
            "2s",
            "--on-store-error",
            "allow",
            "--clock",
            "local",
        ],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("starts with redis down");
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let status = server.redis_status().unwrap();
    assert!(!status.connected);
    // Three hits against a limit of two: only the allow policy says OK.
    let over = request(&["a"], 3);
    let r = client.should_rate_limit(over.clone()).await.unwrap();
    assert_eq!(r.into_inner().overall_code, Code::Ok as i32);

    redis.restart();
    wait_until_async("sluice to decide in redis", || {
        let mut client = client.clone();
        let over = over.clone();
        async move {
            let r = client.should_rate_limit(over).await.unwrap().into_inner();
            r.overall_code == Code::OverLimit as i32
        }
    })
    .await;
    assert!(server.redis_status().unwrap().connected);

    let five = request(&["1", "2", "3", "4", "5"], 1);
    let before = redis.command_calls("evalsha");
    let r = client
        .should_rate_limit(five.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(redis.command_calls("evalsha") - before, 1, "one round trip");
    let codes = |r: &sluice::proto::RateLimitResponse| {
        r.statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect::<Vec<_>>()
    };
    assert_eq!(codes(&r), vec![(Code::Ok as i32, 1); 5]);
    client.should_rate_limit(five.clone()).await.unwrap();
    let r = client.should_rate_limit(five).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// TLS with a custom CA, and ACL credentials.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_custom_ca() {
    let redis = RedisNode::start_tls();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let mut opts = options(&url, ClockSource::Local);
    opts.connect.tls_ca = Some(redis.tls_ca().unwrap().to_path_buf());
    let store = connected(opts).await;
    let limit = Limit::fixed_window(1, 3_600 * SEC);
    let k = key_of("tls:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    assert!(redis
        .cli(&["GET", std::str::from_utf8(&k).unwrap()])
        .ends_with(" 1"));

    // A CA file without certificates is a configuration error, not an outage.
    let empty = redis.dir().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let mut opts = options(&url, ClockSource::Local);
    opts.connect.tls_ca = Some(empty);
    assert!(RedisStore::connect(opts).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_username_and_password_from_the_url() {
    let redis = RedisNode::start_with(&[
        "--user", "default", "off", "--user", "sluice", "on", ">s3cret", "~*", "&*", "+@all",
    ]);
    let url = format!("redis://sluice:s3cret@127.0.0.1:{}", redis.port);
    let store = connected(options(&url, ClockSource::Local)).await;
    let limit = Limit::fixed_window(1, 3_600 * SEC);
    let k = key_of("acl:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    // The default user is off: the state was written by `sluice`.
    let got = redis.cli(&[
        "--user",
        "sluice",
        "--pass",
        "s3cret",
        "--no-auth-warning",
        "GET",
        std::str::from_utf8(&k).unwrap(),
    ]);
    assert!(got.ends_with(" 1"), "{got}");
}

/// Every algorithm loads and serves on the Redis backend: config/algorithms.yaml (one
/// descriptor per algorithm, `rate_limits` with a calendar day, refunds allowed) served by a
/// Redis-backed and a memory-backed server on the same manual clock gives identical responses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_serves_on_redis_as_in_memory() {
    let redis = RedisNode::start();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/algorithms.yaml");
    let clock = Arc::new(ManualClock::new(T0));
    let start = |backend: &[&str]| {
        let argv: Vec<String> = [
            "sluice",
            "serve",
            "--config",
            config,
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ]
        .iter()
        .chain(backend)
        .map(|s| s.to_string())
        .collect();
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        sluice::app::start(args, clock.clone())
    };
    let url = redis.url();
    let on_redis = start(&[
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--clock",
        "local",
        "--redis-command-timeout",
        "2s",
    ])
    .await
    .expect("every algorithm loads");
    let in_memory = start(&[]).await.expect("starts");
    let connect = |addr| async move {
        RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
    };
    let mut a = connect(on_redis.grpc_addr).await;
    let mut b = connect(in_memory.grpc_addr).await;

    let descriptor = |entries: &[(&str, &str)]| RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect(),
        ..Default::default()
    };
    // The store connects in the background: wait until it decides (a key of its own).
    let warm_up = RateLimitRequest {
        domain: "algorithms".into(),
        descriptors: vec![descriptor(&[("api_key", "warm-up")])],
        hits_addend: 1,
    };
    wait_until_async("sluice to decide in redis", || {
        let (mut a, warm_up) = (a.clone(), warm_up.clone());
        async move { a.should_rate_limit(warm_up).await.is_ok() }
    })
    .await;
    let (mut checked, mut over) = (0, 0);
    for round in 0..12u32 {
        let ip = format!("10.0.0.{}", round % 7);
        let d = [
            descriptor(&[("api_key", "k")]),
            descriptor(&[("search", "q")]),
            descriptor(&[("password_reset", "me")]),
            descriptor(&[("upload", "u")]),
            descriptor(&[("webhook", "w")]),
            descriptor(&[("sms", "s")]),
            descriptor(&[("user", "alice"), ("ip", &ip)]),
            descriptor(&[("login", "bob")]),
        ];
        for (i, d) in d.into_iter().enumerate() {
            // Alone, and with the next descriptor (several descriptors, one request).
            for hits in [1u32, 7] {
                let mut req = RateLimitRequest {
                    domain: "algorithms".into(),
                    descriptors: vec![d.clone()],
                    hits_addend: hits,
                };
                if round % 3 == 2 {
                    req.descriptors.push(descriptor(&[("login", "carol")]));
                }
                let ra = a.should_rate_limit(req.clone()).await.unwrap().into_inner();
                let rb = b.should_rate_limit(req).await.unwrap().into_inner();
                assert_eq!(ra, rb, "round {round}, descriptor {i}, hits {hits}");
                checked += 1;
                over += u64::from(ra.overall_code == Code::OverLimit as i32);
            }
        }
        clock.advance(700_000);
    }
    assert_eq!(checked, 12 * 8 * 2);
    assert!(
        over > 0 && over < checked,
        "{over} of {checked} over the limit"
    );
    assert!(redis.command_calls("evalsha") >= checked);
    for s in [on_redis, in_memory] {
        s.shutdown();
        s.wait().await.unwrap();
    }
}

/// The command timeout never outlives the request's gRPC deadline: with a command timeout of
/// 30 s and a stalled Redis, a call with a 1.5 s `grpc-timeout` is answered by the failure
/// policy before its deadline instead of failing with DEADLINE_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_grpc_deadline_caps_the_command_timeout() {
    let redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        &config,
        &url,
        &[
            "--redis-command-timeout",
            "30s",
            "--on-store-error",
            "allow",
            "--clock",
            "local",
        ],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .unwrap();
    server.store_ready().await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    // Three hits against a limit of two: only the allow policy says OK.
    let over = request(&["a"], 3);
    let with_deadline = || {
        let mut r = tonic::Request::new(over.clone());
        r.set_timeout(Duration::from_millis(1_500));
        r
    };
    let r = client.should_rate_limit(with_deadline()).await.unwrap();
    assert_eq!(
        r.into_inner().overall_code,
        Code::OverLimit as i32,
        "redis decides"
    );

    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "8"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("redis to stall", || !ping(redis.port));
    let r = client.should_rate_limit(with_deadline()).await;
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "redis was stalled for the whole call"
    );
    let r = r.expect("answered before the deadline");
    assert_eq!(
        r.into_inner().overall_code,
        Code::Ok as i32,
        "the failure policy answered"
    );
    sleeper.wait().unwrap();
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The local over-limit cache.
// ---------------------------------------------------------------------------------------------

/// The `over_limit_with_local_cache` counter of rule `d.k` in the server's /metrics.
fn with_local_cache(server: &sluice::app::Server) -> u64 {
    let text = server.metrics().render();
    text.lines()
        .find(|l| {
            l.starts_with("sluice_rate_limit_over_limit_with_local_cache_total{")
                && l.contains("key=\"d.k\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|n| n.parse::<f64>().unwrap() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_over_limit_keys_are_answered_without_redis_until_their_retry_time() {
    let redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let limit_of = |n: u32| {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}\n")
    };
    std::fs::write(&config, limit_of(2)).unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        &config,
        &url,
        &[
            "--redis-command-timeout",
            "2s",
            "--clock",
            "local",
            "--local-cache",
            "1000",
            "--watch-config",
            "false",
        ],
    );
    let clock = ManualClock::new(T0);
    let server = sluice::app::start(args, Arc::new(clock.clone()))
        .await
        .unwrap();
    server.store_ready().await;
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let code = |req: RateLimitRequest| {
        let mut client = client.clone();
        async move {
            client
                .should_rate_limit(req)
                .await
                .unwrap()
                .into_inner()
                .overall_code
        }
    };
    let one = request(&["a"], 1);
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    let before = redis.command_calls("evalsha");
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(
        redis.command_calls("evalsha"),
        before + 1,
        "Redis said over"
    );
    assert_eq!(with_local_cache(&server), 0);

    // Known over: answered here, Redis untouched, until the hour ends (T0 is 800 s into one).
    for _ in 0..5 {
        assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    }
    clock.advance(2_800 * SEC - 1);
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(redis.command_calls("evalsha"), before + 1, "no round trip");
    assert_eq!(with_local_cache(&server), 6);
    // Another descriptor in the request, not known over: the request goes to Redis whole.
    assert_eq!(code(request(&["a", "b"], 1)).await, Code::OverLimit as i32);
    assert_eq!(redis.command_calls("evalsha"), before + 2);

    // A limit override is another limit: not blocked by the entry.
    let mut raised = one.clone();
    raised.descriptors[0].limit = Some(sluice::proto::rate_limit_descriptor::RateLimitOverride {
        requests_per_unit: 50,
        unit: sluice::proto::rate_limit_response::rate_limit::Unit::Hour as i32,
    });
    assert_eq!(code(raised).await, Code::Ok as i32);
    assert_eq!(redis.command_calls("evalsha"), before + 3);

    // So is a raised limit after a reload.
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    let calls = redis.command_calls("evalsha");
    std::fs::write(&config, limit_of(10)).unwrap();
    assert!(server.reload());
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(redis.command_calls("evalsha"), calls + 1);

    // And the retry time comes: Redis decides again.
    std::fs::write(&config, limit_of(2)).unwrap();
    assert!(server.reload());
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    let calls = redis.command_calls("evalsha");
    clock.advance(1);
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(redis.command_calls("evalsha"), calls + 1);
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Failure policies per domain and per rule.
// ---------------------------------------------------------------------------------------------

const POLICIES: &str = r#"
domain: api
descriptors:
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: deny}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: report
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: unavailable}
  - key: upload
    rate_limit: {unit: hour, requests_per_unit: 1, on_store_error: local}
"#;

const CLOSED_DOMAIN: &str = r#"
domain: bank
on_store_error: deny
descriptors:
  - key: transfer
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: balance
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: allow}
"#;

/// With Redis down, each request is answered by the strictest policy among its limits': the
/// rule's, else its domain's, else `--on-store-error` (allow here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_per_domain_and_rule_with_redis_down() {
    let mut redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("api.yaml"), POLICIES).unwrap();
    std::fs::write(dir.path().join("bank.yaml"), CLOSED_DOMAIN).unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        dir.path(),
        &url,
        &["--clock", "local", "--on-store-error", "allow"],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .unwrap();
    server.store_ready().await;
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let ask = |domain: &str, keys: &[&str]| {
        let req = RateLimitRequest {
            domain: domain.into(),
            descriptors: keys
                .iter()
                .map(|k| RateLimitDescriptor {
                    entries: vec![Entry {
                        key: k.as_bytes().to_vec(),
                        value: b"x".to_vec(),
                    }],
                    ..Default::default()
                })
                .collect(),
            hits_addend: 1,
        };
        let mut client = client.clone();
        async move {
            match client.should_rate_limit(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
                    Ok((r.overall_code, codes))
                }
                Err(s) => Err(s.code()),
            }
        }
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    // Up: Redis decides everything.
    assert_eq!(ask("api", &["login", "path"]).await, Ok((ok, vec![ok, ok])));

    redis.kill();
    assert_eq!(ask("api", &["path"]).await, Ok((ok, vec![ok])), "the flag");
    assert_eq!(
        ask("api", &["login"]).await,
        Ok((over, vec![over])),
        "the rule"
    );
    assert_eq!(
        ask("api", &["path", "login"]).await,
        Ok((over, vec![over, over])),
        "deny wins over allow"
    );
    assert_eq!(
        ask("api", &["report", "path"]).await,
        Err(tonic::Code::Unavailable),
        "unavailable wins over allow"
    );
    assert_eq!(
        ask("api", &["report", "login"]).await,
        Ok((over, vec![over, over])),
        "deny wins over unavailable"
    );
    // Local: the same rule, counted in this instance (1 per hour).
    assert_eq!(ask("api", &["upload"]).await, Ok((ok, vec![ok])));
    assert_eq!(ask("api", &["upload"]).await, Ok((over, vec![over])));
    assert_eq!(
        ask("api", &["upload", "report"]).await,
        Err(tonic::Code::Unavailable),
        "unavailable wins over local"
    );
    // A domain's policy, and a rule overriding it.
    assert_eq!(ask("bank", &["transfer"]).await, Ok((over, vec![over])));
    assert_eq!(ask("bank", &["balance"]).await, Ok((ok, vec![ok])));
    server.shutdown();
    server.wait().await.unwrap();
}
