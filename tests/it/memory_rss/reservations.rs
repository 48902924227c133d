//! Unsettled reservations against `--memory-max-bytes`, as an operator sees it (issue 34): a
//! fresh `sluice` on the memory store, Reserves of three 60 KB descriptors never settled, up to
//! 1,000 or the first refusal; the high-water mark of its resident set above its cold start
//! stays within 1.25 times the cap.

use sluice::proto::sluice::v1 as pb;
use sluice::proto::sluice::v1::rate_limiter_client::RateLimiterClient;
use tonic::Code;

use super::{metric, status_bytes};
use crate::native_api::{descriptor, ttl_ms, CONFIG};
use crate::support::process::spawn_serve;

const CAP: u64 = 32 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettled_reservations_stay_within_the_byte_cap_from_a_cold_start() {
    let (_dir, config) = crate::support::config_file(CONFIG);
    let cap = CAP.to_string();
    #[rustfmt::skip]
    let s = spawn_serve(
        &config,
        &["--backend", "memory", "--memory-max-bytes", &cap, "--max-reservation-bytes", "1048576", "--log-format", "json"],
        &[],
    );
    let pid = s.child.id();
    let cold = status_bytes(pid, "VmHWM");
    let mut c = RateLimiterClient::new(crate::support::channel(s.grpc).await);
    let mut held = 0;
    while held < 1_000 {
        let value = |i: usize| format!("{held}-{i}-{}", "v".repeat(60_000));
        let req = pb::ReserveRequest {
            domain: "native".into(),
            descriptors: (0..3)
                .map(|i| descriptor("user", &value(i), Some(1)))
                .collect(),
            ttl: ttl_ms(600_000),
        };
        match c.reserve(req).await {
            Ok(_) => held += 1,
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                break;
            }
        }
    }
    let hwm = status_bytes(pid, "VmHWM");
    let counted = metric(s.http, "sluice_store_memory_bytes").await;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!(
        "{held} reservations of 3 x 60 KB held, cap {:.0} MiB: counted {:.1} MiB; cold VmHWM \
         {:.1} MiB, VmHWM after {:.1} MiB; {:.2}x the cap",
        mib(CAP),
        counted / f64::from(1 << 20),
        mib(cold),
        mib(hwm),
        (hwm - cold) as f64 / CAP as f64
    );
    assert!(
        hwm - cold <= CAP + CAP / 4,
        "VmHWM {:.1} MiB above the cold {:.1} MiB: more than 1.25x the cap",
        mib(hwm),
        mib(cold)
    );
}
