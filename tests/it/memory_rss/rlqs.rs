//! RLQS state against `--rlqs-max-bytes`, as an operator sees it: a fresh `sluice` process,
//! streams filled with buckets whose ids are 60 KB of bytes that storage keys escape (each
//! becomes three), until the cap refuses them; the high-water mark of its resident set above
//! its cold baseline must stay within 1.25 times the cap (issue 34). Prints the memory per
//! stream and per bucket.

use tonic::Code;

use super::{metric, status_bytes};
use crate::rlqs::{Quota, Usage};
use crate::support::process::spawn_serve;

const CAP: u64 = 96 << 20;
/// Buckets per report: 12 ids of 60 KB stay under the 1 MiB report cap.
const PER_REPORT: usize = 12;
const STREAMS: usize = 50;

const CONFIG: &str =
    "domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_memory_stays_within_its_byte_cap_from_a_cold_start() {
    let (_dir, config) = crate::support::config_file(CONFIG);
    let cap = CAP.to_string();
    #[rustfmt::skip]
    let s = spawn_serve(
        &config,
        &["--backend", "memory", "--rlqs-max-bytes", &cap, "--log-format", "json"],
        &[],
    );
    let pid = s.child.id();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let cold = status_bytes(pid, "VmHWM");

    // Streams without buckets: what a stream costs by itself.
    let before = status_bytes(pid, "VmRSS");
    let mut open = Vec::new();
    for _ in 0..STREAMS {
        open.push(Quota::open(s.grpc).await.expect("open"));
    }
    let per_stream = status_bytes(pid, "VmRSS").saturating_sub(before) / STREAMS as u64;
    drop(open);

    // 1,000 buckets of short ids on one stream: what a typical bucket costs.
    let before = status_bytes(pid, "VmRSS");
    let ids: Vec<String> = (0..1_000).map(|i| format!("user-{i}")).collect();
    let pairs: Vec<[(&str, &str); 1]> = ids.iter().map(|v| [("k", v.as_str())]).collect();
    let usages: Vec<Usage<'_>> = pairs.iter().map(|p| (&p[..], 1, 0)).collect();
    let mut short = Quota::open(s.grpc).await.expect("open");
    short.send("q", &usages).await;
    short.next().await.expect("answered");
    let short_counted = metric(s.http, "sluice_rlqs_bytes").await / 1_000.0;
    let short_rss = status_bytes(pid, "VmRSS").saturating_sub(before) as f64 / 1_000.0;
    drop(short);
    println!(
        "RLQS: 1,000 buckets of short ids: {short_counted:.0} bytes counted per bucket (its \
         stream's buffers included), {short_rss:.0} bytes RSS"
    );

    // Buckets of 60 KB ids, one report of them per stream (kept open), until the total cap
    // refuses one.
    let before = status_bytes(pid, "VmRSS");
    let mut streams = Vec::new();
    let mut buckets = 0usize;
    loop {
        assert!(
            buckets < 10_000,
            "10,000 buckets of 60 KB kept within {cap} bytes"
        );
        let ids: Vec<String> = (buckets..buckets + PER_REPORT)
            .map(|i| format!("{i}{}", "~".repeat(60_000)))
            .collect();
        let pairs: Vec<[(&str, &str); 1]> = ids.iter().map(|v| [("k", v.as_str())]).collect();
        let usages: Vec<Usage<'_>> = pairs.iter().map(|p| (&p[..], 1, 0)).collect();
        let mut q = Quota::open(s.grpc).await.expect("open");
        q.send("q", &usages).await;
        match q.next().await {
            Ok(_) => {
                buckets += PER_REPORT;
                streams.push(q);
            }
            Err(st) => {
                assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
                assert!(st.message().contains("--rlqs-max-bytes)"), "{st:?}");
                break;
            }
        }
    }
    let rss = status_bytes(pid, "VmRSS");
    let hwm = status_bytes(pid, "VmHWM");
    let counted = metric(s.http, "sluice_rlqs_bytes").await as u64;
    println!(
        "RLQS: {:.1} KiB per stream without buckets; {buckets} buckets of 60 KB ids in {} streams: \
         {:.0} KiB RSS per bucket, {:.0} KiB counted per bucket",
        per_stream as f64 / 1024.0,
        streams.len(),
        rss.saturating_sub(before) as f64 / 1024.0 / buckets as f64,
        counted as f64 / 1024.0 / buckets as f64,
    );
    println!(
        "cap {:.0} MiB, counted {:.1} MiB: cold VmHWM {:.1} MiB, VmHWM after {:.1} MiB; {:.2}x the cap",
        mib(CAP),
        mib(counted),
        mib(cold),
        mib(hwm),
        (hwm - cold) as f64 / CAP as f64
    );
    assert!(counted <= CAP, "counted {counted} over the cap");
    assert!(
        hwm - cold <= CAP + CAP / 4,
        "VmHWM {:.1} MiB above the cold {:.1} MiB: more than 1.25x the cap",
        mib(hwm),
        mib(cold)
    );
}
