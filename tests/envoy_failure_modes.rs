//! What an HTTP client gets through a real Envoy when the rate limit service fails: a table of
//! faults x the rate limit filter's failure settings, with the expected HTTP status per cell.
//!
//! Every cell's request goes to a route whose rule rejects everything (`requests_per_unit: 0`),
//! so a 200 can only come from Envoy failing open, and a 429 only from sluice answering.
//!
//! The Redis store will add rows: Redis down x sluice's `on_store_error` setting, each with the
//! HTTP code the client must see under each filter setting.

mod support;

use serde_json::json;
use support::envoy::{bootstrap, route, Envoy, Filter, HttpResponse, Upstream};
use support::{Sluice, StoreKind};

const CONFIG: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
"#;

/// What is wrong when the request arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Nothing: sluice answers OVER_LIMIT.
    None,
    /// sluice answered once, then was stopped: Envoy's calls are refused.
    SluiceStopped,
    /// sluice runs without a loaded config: it answers gRPC UNAVAILABLE.
    NoConfig,
}

/// One cell: a fault, the filter's `failure_mode_deny` and `status_on_error`, and the status
/// the client must get.
struct Cell {
    fault: Fault,
    deny: bool,
    status_on_error: Option<u16>,
    want: u16,
}

const fn cell(fault: Fault, deny: bool, status_on_error: Option<u16>, want: u16) -> Cell {
    Cell {
        fault,
        deny,
        status_on_error,
        want,
    }
}

#[rustfmt::skip]
const MATRIX: &[Cell] = &[
    //   fault                 deny   status_on_error  HTTP status
    cell(Fault::None,          false, None,            429),
    cell(Fault::None,          true,  None,            429),
    cell(Fault::None,          true,  Some(503),       429),
    cell(Fault::SluiceStopped, false, None,            200),
    cell(Fault::SluiceStopped, false, Some(503),       200),
    cell(Fault::SluiceStopped, true,  None,            500),
    cell(Fault::SluiceStopped, true,  Some(503),       503),
    cell(Fault::NoConfig,      false, None,            200),
    cell(Fault::NoConfig,      false, Some(503),       200),
    cell(Fault::NoConfig,      true,  None,            500),
    cell(Fault::NoConfig,      true,  Some(503),       503),
];

/// Runs one cell on a fresh sluice, upstream and Envoy; `Err` says what differed.
async fn run(c: &Cell) -> Result<(), String> {
    let config = (c.fault != Fault::NoConfig).then_some(CONFIG);
    let sluice = Sluice::start(StoreKind::Memory, config, &[]).await;
    let upstream = Upstream::start().await;
    let filter = Filter {
        failure_mode_deny: c.deny,
        status_on_error: c.status_on_error,
    };
    let routes = json!([route(
        "/",
        json!([{"actions": [{"generic_key": {"descriptor_value": "blocked"}}]}])
    )]);
    let envoy = Envoy::start(&bootstrap(
        sluice.server.grpc_addr,
        upstream.addr,
        filter,
        routes,
    ))
    .await;
    let front = envoy.listener("front");
    let get = || async {
        support::envoy::http(front, "GET", "/", &[])
            .await
            .map_err(|e| format!("request failed: {e}"))
    };

    let sluice = if c.fault == Fault::NoConfig {
        Some(sluice)
    } else {
        // First prove the path works: sluice is asked and rejects.
        let r = get().await?;
        check(&r, 429).map_err(|e| format!("before the fault: {e}"))?;
        if c.fault == Fault::SluiceStopped {
            sluice.stop().await;
            None
        } else {
            Some(sluice)
        }
    };
    let r = get().await?;
    let result = check(&r, c.want).map_err(|e| format!("{e}\n{}", envoy.log()));
    if let Some(s) = sluice {
        s.stop().await;
    }
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
