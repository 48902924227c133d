//! What an HTTP client gets through a real Envoy when the rate limit service fails: a table of
//! faults x the rate limit filter's failure settings, with the expected HTTP statuses per cell.
//!
//! sluice's own faults (stopped, no config) send their requests to a route whose rule rejects
//! everything (`requests_per_unit: 0`), so a 200 can only come from Envoy failing open, and a
//! 429 only from sluice answering.
//!
//! Redis faults: sluice on a real `redis-server` (started by the test), which first decides the
//! route's rule of 2 a minute (200, 200, 429: the count is in Redis), then is killed (SIGKILL).
//! Once sluice's circuit breaker is open (polled), each policy of `--on-store-error` answers:
//! `unavailable` is a gRPC error, so Envoy's filter settings decide (200 failing open, 500 or
//! `status_on_error` failing closed); `allow` is OK whatever the filter says; `deny` is
//! OVER_LIMIT (429); `local` counts the same rule in memory from zero (200, 200, 429).

use crate::support;

use serde_json::json;
use sluice::rules::vocab::Word;
use sluice::rules::FailurePolicy;
use support::envoy::{bootstrap, route, sluice_on_redis, Envoy, Filter, Upstream};
use support::http::HttpResponse;
use support::{d, req, Sluice, StoreKind};

use crate::support::redis as redis_support;
use redis_support::RedisNode;
use support::poll::wait_until_async;

const CONFIG: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: generic_key
    value: two
    rate_limit: {unit: minute, requests_per_unit: 2}
  # Requests (straight to sluice, not through Envoy) that drive the circuit breaker open.
  - key: generic_key
    value: probe
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"#;

/// What is wrong when the requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Nothing: sluice answers OVER_LIMIT.
    None,
    /// sluice answered once, then was stopped: Envoy's calls are refused.
    SluiceStopped,
    /// sluice runs without a loaded config: it answers gRPC UNAVAILABLE.
    NoConfig,
    /// sluice runs on Redis with this `--on-store-error` policy, and Redis was killed.
    RedisDown(FailurePolicy),
}

use FailurePolicy::{Allow, Deny, Local, Unavailable};
use Fault::RedisDown;

/// One cell: a fault, the filter's `failure_mode_deny` and `status_on_error`, and the statuses
/// of successive requests once the fault is there.
struct Cell {
    fault: Fault,
    deny: bool,
    status_on_error: Option<u16>,
    want: &'static [u16],
}

const fn cell(
    fault: Fault,
    deny: bool,
    status_on_error: Option<u16>,
    want: &'static [u16],
) -> Cell {
    Cell {
        fault,
        deny,
        status_on_error,
        want,
    }
}

#[rustfmt::skip]
const MATRIX: &[Cell] = &[
    //   fault                    deny   status_on_error  HTTP statuses
    cell(Fault::None,             false, None,            &[429]),
    cell(Fault::None,             true,  None,            &[429]),
    cell(Fault::None,             true,  Some(503),       &[429]),
    cell(Fault::SluiceStopped,    false, None,            &[200]),
    cell(Fault::SluiceStopped,    false, Some(503),       &[200]),
    cell(Fault::SluiceStopped,    true,  None,            &[500]),
    cell(Fault::SluiceStopped,    true,  Some(503),       &[503]),
    cell(Fault::NoConfig,         false, None,            &[200]),
    cell(Fault::NoConfig,         false, Some(503),       &[200]),
    cell(Fault::NoConfig,         true,  None,            &[500]),
    cell(Fault::NoConfig,         true,  Some(503),       &[503]),
    // Redis down; the rule allows 2 a minute, and Redis had already counted 2.
    cell(RedisDown(Unavailable),  false, None,            &[200, 200, 200]),
    cell(RedisDown(Unavailable),  true,  None,            &[500, 500, 500]),
    cell(RedisDown(Unavailable),  true,  Some(503),       &[503, 503, 503]),
    cell(RedisDown(Allow),        false, None,            &[200, 200, 200]),
    cell(RedisDown(Allow),        true,  None,            &[200, 200, 200]),
    cell(RedisDown(Allow),        true,  Some(503),       &[200, 200, 200]),
    cell(RedisDown(Deny),         false, None,            &[429, 429, 429]),
    cell(RedisDown(Deny),         true,  None,            &[429, 429, 429]),
    cell(RedisDown(Local),        false, None,            &[200, 200, 429]),
    cell(RedisDown(Local),        true,  None,            &[200, 200, 429]),
];

fn policy_flag(p: FailurePolicy) -> &'static str {
    p.word()
}

/// Runs one cell on a fresh sluice, upstream and Envoy (and Redis); `Err` says what differed.
async fn run(c: &Cell) -> Result<(), String> {
    let mut redis = match c.fault {
        RedisDown(_) => Some(tokio::task::spawn_blocking(RedisNode::start).await.unwrap()),
        _ => None,
    };
    let sluice = match (c.fault, &redis) {
        (RedisDown(policy), Some(redis)) => {
            let flags = [
                "--on-store-error",
                policy_flag(policy),
                "--clock",
                "local",
                // Generous, so a loaded machine cannot time out a call while Redis is up (it
                // stays below the filter's timeout of 5 s).
                "--redis-command-timeout",
                "2s",
                // The first failure opens the breaker, which stays open for the whole cell.
                "--redis-breaker-failures",
                "1",
                "--redis-breaker-backoff",
                "60s",
            ];
            sluice_on_redis(CONFIG, &redis.url(), &flags).await
        }
        (Fault::NoConfig, _) => Sluice::start(StoreKind::Memory, None, &[]).await,
        _ => Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await,
    };
    let upstream = Upstream::start().await;
    let filter = Filter {
        failure_mode_deny: c.deny,
        status_on_error: c.status_on_error,
    };
    let routes = json!([
        route(
            "/blocked",
            json!([{"actions": [{"generic_key": {"descriptor_value": "blocked"}}]}])
        ),
        route(
            "/two",
            json!([{"actions": [{"generic_key": {"descriptor_value": "two"}}]}])
        ),
    ]);
    let envoy = Envoy::start(&bootstrap(
        sluice.server.grpc_addr,
        upstream.addr,
        filter,
        routes,
    ))
    .await;
    let front = envoy.listener("front");
    let get = |path: &'static str| async move {
        support::envoy::http(front, "GET", path, &[])
            .await
            .map_err(|e| format!("request failed: {e}"))
    };
    let path = if redis.is_some() { "/two" } else { "/blocked" };

    let sluice = match c.fault {
        Fault::NoConfig => Some(sluice),
        Fault::None | Fault::SluiceStopped => {
            // First prove the path works: sluice is asked and rejects.
            let r = get(path).await?;
            check(&r, 429).map_err(|e| format!("before the fault: {e}"))?;
            if c.fault == Fault::SluiceStopped {
                sluice.stop().await;
                None
            } else {
                Some(sluice)
            }
        }
        RedisDown(_) => {
            let redis = redis.as_mut().expect("a redis for this fault");
            wait_until_async("sluice connected to redis", || async {
                sluice.server.redis_status().is_some_and(|s| s.connected)
            })
            .await;
            // Redis decides: the rule's 2, then OVER_LIMIT.
            for want in [200, 200, 429] {
                let r = get(path).await?;
                check(&r, want).map_err(|e| format!("before the fault: {e}"))?;
            }
            tokio::task::block_in_place(|| redis.kill());
            // sluice sees the connection go first (a call made before that could wait in
            // the client's queue for the command timeout), then each probe fails in Redis and
            // is answered by the policy (or is an error): the first failure opens the breaker.
            wait_until_async("sluice to see redis disconnected", || async {
                sluice.server.redis_status().is_some_and(|s| !s.connected)
            })
            .await;
            let probe = req(support::envoy::DOMAIN, vec![d(&[("generic_key", "probe")])]);
            wait_until_async(
                "the circuit breaker open and redis disconnected",
                || async {
                    let _ = sluice.call(probe.to_proto()).await;
                    sluice
                        .server
                        .redis_status()
                        .is_some_and(|s| s.breaker_open && !s.connected)
                },
            )
            .await;
            Some(sluice)
        }
    };
    let mut got = Vec::new();
    let mut result = Ok(());
    for &want in c.want {
        let r = get(path).await?;
        got.push(r.status);
        if let Err(e) = check(&r, want) {
            result = Err(format!(
                "request {}: {e}\nstatuses so far {got:?}, want {:?}\n{}",
                got.len(),
                c.want,
                envoy.log()
            ));
            break;
        }
    }
    if let Some(s) = sluice {
        s.stop().await;
    }
    drop(redis);
    result
}

/// The status, and `x-envoy-ratelimited` on (and only on) a 429.
fn check(r: &HttpResponse, want: u16) -> Result<(), String> {
    let limited = r.header("x-envoy-ratelimited");
    if r.status != want || (limited == Some("true")) != (want == 429) {
        return Err(format!("want HTTP {want}, got {r:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_mode_matrix() {
    let mut failures = Vec::new();
    for c in MATRIX {
        if let Err(e) = run(c).await {
            failures.push(format!(
                "{:?} failure_mode_deny={} status_on_error={:?}: {e}",
                c.fault, c.deny, c.status_on_error
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cells failed:\n\n{}",
        failures.len(),
        MATRIX.len(),
        failures.join("\n\n")
    );
}
