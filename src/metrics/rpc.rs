//! `sluice.rpc.requests` and `sluice.rpc.duration`, recorded once per answered request.
//!
//! Recording with an attribute set makes the SDK hash the set and look its series up on every
//! call (about 2,300 instructions per request for the two, a third of sluice's own work on a
//! one-descriptor request: bench/why.md). The (method, code) pairs are few and `'static`, so
//! each is bound once to its series (the SDK's bound instruments) and found again by pointer.

use std::sync::RwLock;

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};
use opentelemetry::KeyValue;

/// One (method, code) pair's series.
struct Bound {
    method: &'static str,
    code: &'static str,
    requests: BoundCounter<u64>,
    duration: BoundHistogram<f64>,
}

impl Bound {
    /// The same pair: the same static strings, almost always the same pointers.
    fn is(&self, method: &str, code: &str) -> bool {
        (std::ptr::eq(self.method, method) || self.method == method)
            && (std::ptr::eq(self.code, code) || self.code == code)
    }
}

/// The two RPC instruments and their bound series.
pub(super) struct RpcInstruments {
    requests: Counter<u64>,
    duration: Histogram<f64>,
    /// Grows by one per pair first seen: bounded by the methods and codes the code names.
    bound: RwLock<Vec<Bound>>,
}

impl RpcInstruments {
    pub(super) fn new(requests: Counter<u64>, duration: Histogram<f64>) -> Self {
        RpcInstruments {
            requests,
            duration,
            bound: RwLock::new(Vec::new()),
        }
    }

    pub(super) fn record(&self, method: &'static str, code: &'static str, seconds: f64) {
        {
            let bound = self.bound.read().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = bound.iter().find(|b| b.is(method, code)) {
                b.requests.add(1);
                b.duration.record(seconds);
                return;
            }
        }
        let mut bound = self.bound.write().unwrap_or_else(|e| e.into_inner());
        // Another thread may have bound it meanwhile.
        if !bound.iter().any(|b| b.is(method, code)) {
            let attrs = [KeyValue::new("method", method), KeyValue::new("code", code)];
            bound.push(Bound {
                method,
                code,
                requests: self.requests.bind(&attrs),
                duration: self.duration.bind(&attrs),
            });
        }
        if let Some(b) = bound.iter().find(|b| b.is(method, code)) {
            b.requests.add(1);
            b.duration.record(seconds);
        }
    }
}
