//! The caller's trace context from gRPC metadata: W3C `traceparent` (Envoy's OpenTelemetry
//! tracer) first, else B3 (Envoy's Zipkin tracer), single `b3` header or `x-b3-*` headers.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::MetadataMap;

struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The remote parent named by `metadata`, or an empty context.
pub(crate) fn extract(metadata: &MetadataMap) -> Context {
    let m = Metadata(metadata);
    let cx = TraceContextPropagator::new().extract(&m);
    if cx.span().span_context().is_valid() {
        return cx;
    }
    match b3(&m) {
        Some(sc) => Context::new().with_remote_span_context(sc),
        None => cx,
    }
}

fn b3(m: &dyn Extractor) -> Option<SpanContext> {
    let (trace, span, sampled) = match m.get("b3") {
        Some(single) => {
            let mut parts = single.split('-');
            let trace = parts.next()?;
            let span = parts.next()?;
            (
                trace.to_string(),
                span.to_string(),
                parts.next().map(str::to_string),
            )
        }
        None => (
            m.get("x-b3-traceid")?.to_string(),
            m.get("x-b3-spanid")?.to_string(),
            match m.get("x-b3-flags") {
                Some("1") => Some("d".to_string()),
                _ => m.get("x-b3-sampled").map(str::to_string),
            },
        ),
    };
    if !(trace.len() == 16 || trace.len() == 32) || span.len() != 16 {
        return None;
    }
    // A 64-bit trace id is the low half of a 128-bit one.
    let trace = TraceId::from_hex(&format!("{trace:0>32}")).ok()?;
    let span = SpanId::from_hex(&span).ok()?;
    let flags = match sampled.as_deref() {
        Some("1" | "true" | "d") => TraceFlags::SAMPLED,
        Some(_) => TraceFlags::NOT_SAMPLED,
        // No decision: let the sampler decide, as for a sampled parent.
        None => TraceFlags::SAMPLED,
    };
    let sc = SpanContext::new(trace, span, flags, true, TraceState::NONE);
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(pairs: &[(&'static str, &'static str)]) -> SpanContext {
        let mut md = MetadataMap::new();
        for (k, v) in pairs {
            md.insert(*k, v.parse().unwrap());
        }
        extract(&md).span().span_context().clone()
    }

    #[test]
    fn w3c_and_b3() {
        let sc = parent(&[(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )]);
        assert_eq!(sc.span_id(), SpanId::from_hex("00f067aa0ba902b7").unwrap());
        let sc = parent(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1")]);
        assert_eq!(sc.span_id(), SpanId::from_hex("e457b5a2e4d86bd1").unwrap());
        assert!(sc.is_sampled());
        let sc = parent(&[
            ("x-b3-traceid", "463ac35c9f6413ad"),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
            ("x-b3-sampled", "0"),
        ]);
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("0000000000000000463ac35c9f6413ad").unwrap()
        );
        assert!(!sc.is_sampled());
        assert!(!parent(&[("b3", "1")]).is_valid());
    }
}
