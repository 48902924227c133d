//! The Redis store against a real single `redis-server` (started per test on a free loopback
//! port): parity of the Lua script with the in-memory policy, one round trip per request,
//! exact limits across instances, the failure policy, the circuit breaker, recovery, NOSCRIPT,
//! the command timeout, and the `--backend redis` wiring of the server.
//!
//! Each test owns its Redis, so they may run in parallel.

#[path = "support/redis.rs"]
mod redis_support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use redis_support::{ping, wait_until, wait_until_async, RedisNode};
use sluice::algorithm::{Ask, Limit, State};
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::settings::{Cli, Command};
use sluice::store::batch::{self, StateTable};
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore};
use sluice::store::{Charge, Check, FailurePolicy, Fallback, Store};

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

fn take<'a>(key: &'a [u8], limit: &'a Limit, hits: u64, group: u32) -> Check<'a> {
    Check {
        key,
        limit,
        ask: Ask::take(hits),
        charge: Charge::IfAdmitted,
        group,
        quota: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Parity: the Lua script and `batch::decide` agree on random timelines.
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Table(HashMap<Vec<u8>, State>);

impl StateTable for Table {
    fn get(&self, key: &[u8]) -> Option<&State> {
        self.0.get(key)
    }
    fn put(&mut self, key: &[u8], state: State, _: Micros) {
        self.0.insert(key.to_vec(), state);
    }
}

#[derive(Clone, Debug)]
struct CheckSpec {
    key: usize,
    requests: u64,
    hits: u64,
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

/// Windows of the three keys a timeline uses (the window is part of the key).
const WINDOWS: [Micros; 3] = [10 * SEC, 60 * SEC, 10 * SEC];

fn step_strategy() -> impl Strategy<Value = Step> {
    let check = (
        0..3usize,
        0..6u64,
        0..4u64,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.25),
        0..3u32,
    )
        .prop_map(|(key, requests, hits, refund, always, group)| CheckSpec {
            key,
            requests,
            hits,
            refund,
            always,
            group,
        });
    let dt = prop_oneof![
        3 => Just(0),
        3 => 1..1_000i64,
        3 => 1..(70 * SEC),
        1 => -(5 * SEC)..0,
    ];
    (
        dt,
        prop::array::uniform3(prop::bool::weighted(0.3)),
        prop::collection::vec(check, 1..6),
    )
        .prop_map(|(dt, quota, checks)| Step { dt, quota, checks })
}

#[test]
fn lua_script_matches_the_in_memory_policy() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let timeline = prop::collection::vec(step_strategy(), 1..12);
    runner
        .run(&timeline, |steps| {
            // Fresh keys per case: cases never see each other's state.
            let prefix = format!("parity{}:", case.fetch_add(1, Ordering::Relaxed));
            let limits: Vec<Vec<Limit>> = WINDOWS
                .iter()
                .map(|&w| (0..6).map(|r| Limit::fixed_window(r, w)).collect())
                .collect();
            let keys: Vec<Vec<u8>> = (0..3)
                .map(|k| key_of(&prefix, &format!("v{k}"), &limits[k][0]))
                .collect();
            let mut table = Table::default();
            // Anywhere in a window, so boundaries get crossed.
            let mut now = T0 + 7_654_321;
            for (i, step) in steps.iter().enumerate() {
                now += step.dt;
                let checks: Vec<Check<'_>> = step
                    .checks
                    .iter()
                    .map(|c| Check {
                        key: &keys[c.key],
                        limit: &limits[c.key][c.requests as usize],
                        ask: Ask {
                            hits: c.hits,
                            refund: c.refund,
                            value: 0,
                        },
                        charge: if c.always {
                            Charge::Always
                        } else {
                            Charge::IfAdmitted
                        },
                        group: c.group,
                        quota: step.quota[c.group as usize],
                    })
                    .collect();
                let want = batch::decide(&mut table, &checks, now);
                let got = rt
                    .block_on(store.decide_checks(&checks, now))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want, "step {} at {}: {:?}", i, now, step);
            }
            Ok(())
        })
        .unwrap();
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
    store.decide_checks(&checks, 0).await.unwrap();

    let before = redis.command_calls("evalsha");
    let v = store.decide_checks(&checks, 0).await.unwrap();
    assert_eq!(redis.command_calls("evalsha") - before, 1);
    assert!(v.iter().all(|v| v.allowed && v.charged && v.remaining == 1));

    // The rejecting path too: one descriptor over its limit, still one round trip.
    let mut checks = checks;
    checks[2].ask = Ask::take(5);
    let before = redis.command_calls("evalsha");
    let v = store.decide_checks(&checks, 0).await.unwrap();
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
                if store.decide_checks(&c, T0).await.unwrap()[0].allowed {
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
    let v = store.decide_checks(&c, 0).await.unwrap();
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
        backoff: Duration::from_millis(300),
        max_backoff: Duration::from_secs(1),
    };
    let store = connected(opts).await;
    let f = Fallback::new(store.clone(), FailurePolicy::Allow, None);
    let limit = Limit::fixed_window(1, 3_600 * SEC);
    let k = key_of("outage:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(f.decide(&c, T0).await.unwrap()[0].charged);
    assert!(
        !f.decide(&c, T0).await.unwrap()[0].allowed,
        "the limit of 1 holds"
    );

    redis.kill();
    // While down, the policy answers: allowed, nothing charged. The breaker opens.
    let mut calls = 0;
    while !store.status().breaker_open {
        let v = f.decide(&c, T0).await.expect("allow policy answers");
        assert!(v[0].allowed && !v[0].charged);
        calls += 1;
        assert!(calls < 1_000, "the breaker never opened");
    }
    // Open: calls are refused without touching the network (one probe at a time may pass).
    let mut refused_at_once = 0;
    for _ in 0..20 {
        match store.decide_checks(&c, T0).await {
            Err(e) if e.to_string().contains("circuit breaker open") => refused_at_once += 1,
            Err(_) => {}
            Ok(_) => panic!("redis is down"),
        }
    }
    assert!(refused_at_once > 0);
    assert!(f.decide(&c, T0).await.unwrap()[0].allowed);

    // Back (empty, no script): recovery without restarting anything, NOSCRIPT handled.
    redis.restart();
    let noscript_before = noscript_errors(&redis);
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0).await.is_ok()
    })
    .await;
    assert!(
        noscript_errors(&redis) > noscript_before,
        "the script was reloaded"
    );
    let status = store.status();
    assert!(status.connected && !status.breaker_open, "{status:?}");
    // The restarted Redis is empty: the key counts from zero again, in Redis.
    assert!(!store.decide_checks(&c, T0).await.unwrap()[0].allowed);

    // SCRIPT FLUSH is handled the same way.
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    let before = noscript_errors(&redis);
    let k2 = key_of("outage:", "y", &limit);
    let other = [take(&k2, &limit, 1, 0)];
    assert!(store.decide_checks(&other, T0).await.unwrap()[0].allowed);
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
            out.push(f.decide(&c, T0).await.unwrap()[0].allowed);
        }
        out
    };
    assert_eq!(v, [true, true, false], "the same rule, counted locally");
    let deny = Fallback::new(store, FailurePolicy::Deny, None);
    assert!(!deny.decide(&c, T0).await.unwrap()[0].allowed);
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
    store.decide_checks(&c, T0).await.unwrap();

    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "3"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("redis to stall", || !ping(redis.port));
    let r = store.decide_checks(&c, T0).await;
    assert!(r.is_err(), "a stalled redis is an error: {r:?}");
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the call gave up while redis was still stalled"
    );
    sleeper.wait().unwrap();
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0).await.is_ok()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The server with `--backend redis`.
// ---------------------------------------------------------------------------------------------

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
    let cli = Cli::try_parse_from([
        "sluice",
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--backend",
        "redis",
        "--redis-url",
        &redis.url(),
        "--redis-command-timeout",
        "2s",
        "--on-store-error",
        "allow",
        "--clock",
        "local",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("serve")
    };
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
    assert!(store.decide_checks(&c, T0).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0).await.unwrap()[0].allowed);
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
    assert!(store.decide_checks(&c, T0).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0).await.unwrap()[0].allowed);
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

/// Algorithms without a Lua port yet are refused when the config loads (naming the rule),
/// not when a request arrives; the running rules stay in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_with_an_algorithm_the_redis_store_lacks_is_rejected() {
    let redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    let cli = Cli::try_parse_from([
        "sluice",
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--backend",
        "redis",
        "--redis-url",
        &redis.url(),
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("serve")
    };
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("starts");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_log}\n",
    )
    .unwrap();
    assert!(!server.reload(), "sliding_log has no Lua port yet");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
    )
    .unwrap();
    assert!(server.reload(), "fixed_window is supported");
    server.shutdown();
    server.wait().await.unwrap();
}
