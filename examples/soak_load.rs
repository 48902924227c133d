//! A simple closed-loop load generator for `scripts/soak.sh`: `--concurrency` workers send
//! `ShouldRateLimit` requests to `--addr` for `--seconds`, with values cycling through
//! `--keys` distinct clients (so the store sees new keys and expiring ones all the time), and
//! print one JSON line of counts by outcome at the end. (The real benchmark tool is separate.)
//!
//! ```sh
//! cargo run --release --example soak_load -- --addr 127.0.0.1:8081 --seconds 60
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

struct Args {
    addr: String,
    seconds: u64,
    concurrency: usize,
    keys: u64,
}

fn args() -> Args {
    let mut a = Args {
        addr: "127.0.0.1:8081".into(),
        seconds: 60,
        concurrency: 16,
        keys: 50_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--addr" => a.addr = value,
            "--seconds" => a.seconds = value.parse().expect("--seconds N"),
            "--concurrency" => a.concurrency = value.parse().expect("--concurrency N"),
            "--keys" => a.keys = value.parse().expect("--keys N"),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn request(i: u64, keys: u64) -> RateLimitRequest {
    let client = format!("client-{}", i % keys);
    let entry = |k: &str, v: &[u8]| Entry {
        key: k.as_bytes().to_vec(),
        value: v.to_vec(),
    };
    RateLimitRequest {
        domain: "soak".into(),
        descriptors: vec![
            RateLimitDescriptor {
                entries: vec![entry("client", client.as_bytes())],
                ..Default::default()
            },
            RateLimitDescriptor {
                entries: vec![entry("path", format!("/api/{}", i % 97).as_bytes())],
                ..Default::default()
            },
        ],
        hits_addend: 0,
    }
}

#[tokio::main]
async fn main() {
    let a = args();
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", a.addr))
        .expect("address")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let counts: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let workers: Vec<_> = (0..a.concurrency)
        .map(|_| {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let (stop, next, counts, keys) = (stop.clone(), next.clone(), counts.clone(), a.keys);
            tokio::spawn(async move {
                let mut local: BTreeMap<String, u64> = BTreeMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let outcome = match client.should_rate_limit(request(i, keys)).await {
                        Ok(r) if r.get_ref().overall_code == Code::OverLimit as i32 => {
                            "over_limit".to_string()
                        }
                        Ok(_) => "ok".to_string(),
                        Err(e) => format!("error_{:?}", e.code()),
                    };
                    *local.entry(outcome).or_default() += 1;
                }
                let mut all = counts.lock().unwrap_or_else(|e| e.into_inner());
                for (k, v) in local {
                    *all.entry(k).or_default() += v;
                }
            })
        })
        .collect();
    // Real time is the point of a soak run; this measures nothing but its own length.
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let counts = counts.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "{}",
        serde_json::to_string(&*counts).expect("counts serialize")
    );
}
