//! The observable instruments: the per-rule counters of [`crate::stats`] and the gauges read
//! from the stores and the service when a reader collects.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;

use super::{GaugeSources, MemoryCounts};
use crate::stats::{StatsRegistry, COUNTER_NAMES};

pub(super) fn register_observables(
    meter: &Meter,
    stats: &Arc<StatsRegistry>,
    gauges: &Arc<GaugeSources>,
) {
    const HELP: [&str; 6] = [
        "Hits of requests that matched the rule (envoyproxy/ratelimit's total_hits)",
        "Hits over the rule's limit",
        "Hits above --near-limit-ratio of the rule's limit, within it",
        "Hits within the rule's limit",
        "Hits over the limit of a rule in shadow mode (allowed anyway)",
        "Hits rejected by the local over-limit cache (always 0: sluice has no such cache yet)",
    ];
    for (i, name) in COUNTER_NAMES.iter().enumerate() {
        let stats = stats.clone();
        meter
            .u64_observable_counter(format!("sluice.rate_limit.{name}"))
            .with_description(HELP[i])
            .with_callback(move |o| {
                for c in stats.snapshot() {
                    o.observe(c.get(i), &c.attrs);
                }
            })
            .build();
    }
    {
        let stats = stats.clone();
        meter
            .u64_observable_counter("sluice.stats.keys_overflow")
            .with_description(
                "Requests whose per-value stats key was dropped by --metrics-max-keys (counted on their rule's key)",
            )
            .with_callback(move |o| o.observe(stats.overflow(), &[]))
            .build();
    }
    {
        let stats = stats.clone();
        meter
            .u64_observable_gauge("sluice.stats.keys")
            .with_description("Stats keys with counters")
            .with_callback(move |o| o.observe(stats.snapshot().len() as u64, &[]))
            .build();
    }
    {
        let g = gauges.clone();
        meter
            .u64_observable_gauge("sluice.config.generation")
            .with_description("Rule sets loaded so far (the one in use is the latest)")
            .with_callback(move |o| o.observe(g.generation.load(Ordering::Relaxed), &[]))
            .build();
    }
    {
        let g = gauges.clone();
        meter
            .u64_observable_gauge("sluice.xds.connected")
            .with_description(
                "1 while the xDS config source has a stream open to its control plane",
            )
            .with_callback(move |o| o.observe(g.xds_connected.load(Ordering::Relaxed), &[]))
            .build();
    }
    type Pick = fn(&MemoryCounts) -> u64;
    let memory: [(&str, &str, bool, Pick); 4] = [
        (
            "sluice.store.memory.entries",
            "Keys held by an in-memory store",
            false,
            |c| c.entries,
        ),
        (
            "sluice.store.memory.bytes",
            "Estimated bytes held by an in-memory store (capped by --memory-max-bytes)",
            false,
            |c| c.bytes,
        ),
        (
            "sluice.store.memory.evictions",
            "Keys forgotten before they expired because an in-memory store was full",
            true,
            |c| c.evictions,
        ),
        (
            "sluice.store.memory.evictions_over_limit",
            "Evicted keys that were over their limit (their clients regain quota early)",
            true,
            |c| c.evictions_over_limit,
        ),
    ];
    for (name, help, counter, pick) in memory {
        let g = gauges.clone();
        let observe = move |o: &dyn opentelemetry::metrics::AsyncInstrument<u64>| {
            for (role, read) in &g.stores.memory {
                if let Some(c) = read() {
                    o.observe(pick(&c), &[KeyValue::new("store", *role)]);
                }
            }
        };
        if counter {
            meter
                .u64_observable_counter(name)
                .with_description(help)
                .with_callback(move |o| observe(o))
                .build();
        } else {
            meter
                .u64_observable_gauge(name)
                .with_description(help)
                .with_callback(move |o| observe(o))
                .build();
        }
    }
    {
        let g = gauges.clone();
        meter
            .u64_observable_gauge("sluice.store.redis.breaker_open")
            .with_description("1 while the Redis circuit breaker is open (calls fail at once)")
            .with_callback(move |o| {
                if let Some((_, open)) = g.stores.redis.as_ref().and_then(|f| f()) {
                    o.observe(u64::from(open), &[]);
                }
            })
            .build();
    }
    {
        let g = gauges.clone();
        meter
            .u64_observable_gauge("sluice.store.redis.connected")
            .with_description("1 while at least one Redis connection is up")
            .with_callback(move |o| {
                if let Some((connected, _)) = g.stores.redis.as_ref().and_then(|f| f()) {
                    o.observe(u64::from(connected), &[]);
                }
            })
            .build();
    }
}
