//! `sluice-bench memory`: bytes per active key of the in-memory store, per algorithm. Fills
//! the library's `MemoryStore` through `Store::decide` with one hit on each of N distinct
//! keys (built by the library's key layout, as the limiter builds them) and reports the
//! store's own byte estimate (what `--memory-max-bytes` caps) and the process' RSS growth.
//!
//! Freed memory is not always returned to the OS, so with several algorithms each one is
//! measured in a fresh child process (this binary again, with one `--algorithm`).

use anyhow::Context;
use serde::Serialize;

use sluice::algorithm::{Algorithm, Ask, Limit};
use sluice::store::key::{self, Part};
use sluice::store::{Charge, Check, Deadline, MemoryStore, Store};

use crate::cpu;

#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct MemoryReport {
    pub algorithm: String,
    pub keys: u64,
    /// The store's own estimate (key, state, bookkeeping), per key.
    pub store_bytes_per_key: f64,
    /// Resident set growth of the process while filling, per key.
    pub rss_bytes_per_key: f64,
    /// The key length of this layout, for reference (keys here look like the limiter's).
    pub key_len: usize,
}

/// Fills a fresh store with `keys` keys of `algorithm` in this process.
pub(crate) fn measure(algorithm: Algorithm, keys: u64) -> anyhow::Result<MemoryReport> {
    // A realistic limit: 100 per minute (burst 100 for the buckets).
    let limit = Limit::new(algorithm, 100, 60_000_000)?;
    let store = MemoryStore::new(usize::try_from(keys)?.saturating_mul(2).max(64));
    let now = 1_700_000_000_000_000;
    let rss_before = cpu::rss_bytes().map_err(anyhow::Error::msg)?;
    let mut k = Vec::with_capacity(96);
    let mut key_len = 0;
    futures::executor::block_on(async {
        for i in 0..keys {
            let value = format!("user-{i}");
            let parts = if algorithm.counts_values() {
                vec![
                    Part::Value {
                        key: b"route",
                        value: value.as_bytes(),
                    },
                    Part::Counted { key: b"client" },
                ]
            } else {
                vec![Part::Value {
                    key: b"user",
                    value: value.as_bytes(),
                }]
            };
            key::build(&mut k, b"", "bench", parts, &limit, None);
            key_len = k.len();
            let ask = Ask {
                value: if algorithm.counts_values() {
                    sluice::algorithm::distinct::hash(b"client-1")
                } else {
                    0
                },
                ..Ask::take(1)
            };
            let check = Check {
                key: &k,
                limit: &limit,
                ask,
                charge: Charge::IfAdmitted,
                group: 0,
                quota: false,
                on_error: None,
            };
            store
                .decide(std::slice::from_ref(&check), now, Deadline::NONE)
                .await
                .context("the memory store failed")?;
        }
        anyhow::Ok(())
    })?;
    let rss_after = cpu::rss_bytes().map_err(anyhow::Error::msg)?;
    if store.len() as u64 != keys {
        anyhow::bail!("the store holds {} keys, not {keys}", store.len());
    }
    let per = |b: f64| b / keys.max(1) as f64;
    let report = MemoryReport {
        algorithm: algorithm.as_str().to_string(),
        keys,
        store_bytes_per_key: per(store.bytes() as f64),
        rss_bytes_per_key: per(rss_after.saturating_sub(rss_before) as f64),
        key_len,
    };
    drop(store);
    Ok(report)
}

/// Measures each algorithm in a child process (see the module comment); one algorithm runs
/// here.
pub(crate) fn run(algorithms: &[Algorithm], keys: u64) -> anyhow::Result<Vec<MemoryReport>> {
    if let [one] = algorithms {
        return Ok(vec![measure(*one, keys)?]);
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let mut out = Vec::new();
    for a in algorithms {
        let child = std::process::Command::new(&exe)
            .args(["memory", "--keys", &keys.to_string()])
            .args(["--algorithm", a.as_str(), "--json", "-"])
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        if !child.status.success() {
            anyhow::bail!(
                "measuring {} failed ({}): {}",
                a.as_str(),
                child.status,
                String::from_utf8_lossy(&child.stderr)
            );
        }
        let mut reports: Vec<MemoryReport> = serde_json::from_slice(&child.stdout)
            .with_context(|| format!("bad output measuring {}", a.as_str()))?;
        out.append(&mut reports);
    }
    Ok(out)
}

pub(crate) fn text(reports: &[MemoryReport]) -> String {
    let mut s = format!(
        "{:<15} {:>10} {:>14} {:>14} {:>8}\n",
        "algorithm", "keys", "store B/key", "RSS B/key", "key len"
    );
    for r in reports {
        s.push_str(&format!(
            "{:<15} {:>10} {:>14.1} {:>14.1} {:>8}\n",
            r.algorithm, r.keys, r.store_bytes_per_key, r.rss_bytes_per_key, r.key_len
        ));
    }
    s
}
