//! `sluice-bench rlqs`, the built binary, against an in-process sluice: every stream reports
//! every bucket and each report is answered. Nothing here asserts speed.

use crate::support;

use std::process::Command;

use serde_json::Value as Json;
use support::{Sluice, StoreKind};

const BENCH: &str = env!("CARGO_BIN_EXE_sluice-bench");

const CONFIG: &str = "domain: q
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_streams_report_every_bucket_and_each_report_is_answered() {
    let sluice = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let target = sluice.server.grpc_addr.to_string();
    let pid = std::process::id().to_string();
    // The server runs in this process: the generator runs beside it, off the runtime.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BENCH)
            .args(["rlqs", "--target", &target, "--server-pid", &pid])
            .args(["--streams", "4", "--buckets", "3", "--interval", "200ms"])
            .args(["--duration", "1s", "--connections", "2", "--domain", "q"])
            .args(["--key", "k", "--json", "-"])
            .output()
            .expect("sluice-bench runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Json = serde_json::from_slice(&out.stdout).expect("JSON");
    let n = |f: &str| j[f].as_u64().unwrap_or_else(|| panic!("{f} in {j}"));
    assert_eq!(
        (n("streams"), n("buckets_per_stream"), n("errors")),
        (4, 3, 0)
    );
    assert!(n("reports") >= 4, "{j}");
    assert_eq!(n("bucket_reports"), n("reports") * 3, "{j}");
    assert!(
        j["assignment_latency_us"]["max"].as_u64().unwrap() > 0,
        "{j}"
    );
    assert!(j["server_rss_bytes"].as_u64().unwrap() > 0, "{j}");
    sluice.stop().await;
}
