//! Runs N decisions through the limiter and the in-memory store, in process (no gRPC), with
//! the server's metrics attached: the subject of an instruction-count profile of the decision
//! path. Run it twice with different N and subtract, so start-up and config loading cancel:
//!
//! ```sh
//! cargo build --release --example decide_profile
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/decide_profile 100000 1 1000
//! callgrind_annotate cg.out | head -60
//! ```
//!
//! Arguments: decisions (default 100000), descriptors per request (1), distinct clients (1000),
//! rules in the config (1000).

use std::sync::Arc;

use sluice::clock::SystemClock;
use sluice::config::{compile, synthetic, ConfigFile, LoadOptions};
use sluice::limiter::{Limiter, LimiterMetrics, LimiterOptions};
use sluice::metrics::{Metrics, MetricsOptions};
use sluice::model::{Descriptor, Entry, Request};
use sluice::store::memory::MemoryStore;
use sluice::store::Deadline;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let (n, descriptors, clients, rules) = (arg(1, 100_000), arg(2, 1), arg(3, 1000), arg(4, 1000));
    let files: Vec<ConfigFile> = synthetic::files(rules.max(24), 4)
        .into_iter()
        .map(|(path, content)| ConfigFile {
            path: path.into(),
            content,
        })
        .collect();
    let set = compile(&files, LoadOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = Metrics::new(
        &MetricsOptions {
            otlp_endpoint: None,
            max_dynamic_keys: 1000,
            near_limit_ratio: 0.8,
        },
        Default::default(),
        Arc::new(SystemClock),
    )?;
    let limiter = Limiter::new(
        MemoryStore::new(1_000_000),
        Arc::new(SystemClock),
        LimiterOptions::default(),
    )
    .with_metrics(LimiterMetrics {
        stats: metrics.stats.clone(),
        store_duration: metrics
            .store_duration
            .bind(&[opentelemetry::KeyValue::new("backend", "memory")]),
    });
    limiter.set_rules(Arc::new(set));
    // Shape 0 of the synthetic config (tenant -> method) with the client in the tenant's
    // place would match nothing; use api_key rules (shape 5 is `rate_limits`, so take the
    // single-limit exact shape 4 and the trailing wildcard shape 1).
    let per_file = rules.max(24) / 4;
    let requests: Vec<Request> = (0..clients)
        .map(|c| Request {
            domain: "bench0".into(),
            descriptors: (0..descriptors)
                .map(|d| {
                    let shape = if d % 2 == 0 { 4 } else { 1 };
                    let i = ((c * 6 + d * 12) % per_file) / 6 * 6 + shape;
                    let i = if i >= per_file { shape } else { i };
                    Descriptor {
                        entries: synthetic::request_entries(i)
                            .into_iter()
                            .map(|(k, v)| Entry {
                                key: k.into_bytes(),
                                value: v.into_bytes(),
                            })
                            .collect(),
                        limit_override: None,
                        hits: 1,
                        refund: false,
                    }
                })
                .collect(),
        })
        .collect();
    let mut over = 0u64;
    for i in 0..n {
        let r = futures::executor::block_on(
            limiter.should_rate_limit(&requests[i % clients], Deadline::NONE),
        )?;
        over += u64::from(r.overall == sluice::limiter::Code::OverLimit);
    }
    println!("{n} decisions, {descriptors} descriptors each, {clients} clients: {over} over limit");
    Ok(())
}
