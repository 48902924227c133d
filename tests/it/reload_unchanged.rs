//! A reload of a config byte-identical to the last attempt's is recognised: nothing is
//! rebuilt (the generation stays, `sluice_config_loads_total{result="unchanged"}` counts it,
//! the "config unchanged" path answers as that attempt did), and a changed config is applied.

use crate::support;

use support::prom_text::{parse_prometheus, sample};
use support::*;

fn config(rpu: u32) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {rpu}}}\n"
    )
}

async fn limit_now(s: &Sluice) -> u32 {
    let r = s
        .call(req("d", vec![d(&[("k", "probe")])]).to_proto())
        .await
        .expect("answer");
    r.statuses[0]
        .current_limit
        .as_ref()
        .unwrap()
        .requests_per_unit
}

/// (loads by result: success, unchanged, error; the generation) from /metrics.
async fn loads(s: &Sluice) -> (f64, f64, f64, f64) {
    let m = parse_prometheus(&s.http_get("/metrics").await.1);
    let n = |r| sample(&m, "sluice_config_loads_total", &[("result", r)]).unwrap_or(0.0);
    let generation = sample(&m, "sluice_config_generation", &[]).unwrap_or(0.0);
    (n("success"), n("unchanged"), n("error"), generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_config_is_not_rebuilt_and_a_changed_one_is_applied() {
    // No watcher: each load here is one `reload()` (what SIGHUP calls).
    let s = Sluice::start(
        StoreKind::Memory,
        Some(&config(1000)),
        &["--watch-config", "false"],
    )
    .await;
    assert_eq!(loads(&s).await, (1.0, 0.0, 0.0, 1.0));

    // The same bytes again: recognised, not rebuilt.
    assert!(s.server.reload());
    assert!(s.server.reload());
    assert_eq!(loads(&s).await, (1.0, 2.0, 0.0, 1.0));
    assert!(s
        .http_get("/rlconfig")
        .await
        .1
        .contains("config generation 1"));

    // A changed file is applied, whatever came before it.
    s.write_config(&config(2000));
    assert!(s.server.reload());
    assert_eq!(limit_now(&s).await, 2000);
    assert_eq!(loads(&s).await, (2.0, 2.0, 0.0, 2.0));
    // A change of one byte that keeps the file's length is a change too.
    s.write_config(&config(2001));
    assert!(s.server.reload());
    assert_eq!(limit_now(&s).await, 2001);
    assert_eq!(loads(&s).await, (3.0, 2.0, 0.0, 3.0));

    // A broken config is rejected once; sent again unchanged, it is still refused (not
    // rebuilt), and the running rules stay.
    s.write_config("domain: d\ndescriptors: [oops\n");
    assert!(!s.server.reload());
    assert!(!s.server.reload());
    assert_eq!(loads(&s).await, (3.0, 1.0 + 2.0, 1.0, 3.0));
    assert_eq!(limit_now(&s).await, 2001);
    assert!(s
        .http_get("/rlconfig")
        .await
        .1
        .contains("last reload FAILED"));

    // Back to the running config's bytes: a change from the last attempt, so it is applied
    // (and clears the failure).
    s.write_config(&config(2001));
    assert!(s.server.reload());
    assert_eq!(loads(&s).await, (4.0, 3.0, 1.0, 4.0));
    assert!(!s.http_get("/rlconfig").await.1.contains("FAILED"));

    s.stop().await;
}
