//! Connection-level attacks over real HTTP/2 frames (the `h2` crate as a raw client), each
//! with a normal client's requests checked while it runs: streams opened and never finished
//! hold no in-flight slot, a non-gRPC content type gets HTTP 415, and every refusal is counted
//! in `sluice_rpc_requests_total` with its code.

mod support;

use std::time::Duration;

use bytes::Bytes;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use support::*;

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"k".to_vec(),
                value: b"normal".to_vec(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// A raw HTTP/2 connection to `addr`, its driver spawned.
async fn raw(addr: std::net::SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn post(addr: std::net::SocketAddr, content_type: &str) -> http::Request<()> {
    http::Request::post(format!("http://{addr}{PATH}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
        .expect("request")
}

#[tokio::test]
async fn unfinished_streams_hold_no_slot() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--max-in-flight", "16", "--grpc-request-read-timeout", "2s"],
    )
    .await;
    let addr = s.server.grpc_addr;
    // 200 streams with HEADERS and no END_STREAM, far more than the 16 slots.
    let mut send = raw(addr).await;
    let mut held = Vec::new();
    for _ in 0..200 {
        send = send.ready().await.expect("stream capacity");
        let (answer, stream) = send
            .send_request(post(addr, "application/grpc"), false)
            .expect("open stream");
        held.push((answer, stream));
    }
    // While they are open, a normal client is served, every time.
    for _ in 0..20 {
        let r = tokio::time::timeout(Duration::from_secs(5), s.call(request()))
            .await
            .expect("answered in time")
            .expect("served, not locked out");
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    // The unfinished streams end with DEADLINE_EXCEEDED once the read timeout passes.
    let (answer, _stream) = held.swap_remove(0);
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("the unfinished stream is answered")
        .expect("a response");
    assert_eq!(
        answer
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok()),
        Some("4"),
        "{answer:?}"
    );
    let (_, metrics) = s.http_get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_rpc_requests_total")
                && l.contains("code=\"DEADLINE_EXCEEDED\"")),
        "{metrics}"
    );
    drop(held);
    s.stop().await;
}

#[tokio::test]
async fn a_non_grpc_content_type_gets_415_and_is_counted() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let addr = s.server.grpc_addr;
    let mut send = raw(addr).await;
    for _ in 0..3 {
        send = send.ready().await.expect("stream capacity");
        let (answer, mut stream) = send
            .send_request(post(addr, "text/plain"), false)
            .expect("open stream");
        stream
            .send_data(Bytes::from_static(b"hello"), true)
            .expect("body");
        let answer = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("answered in time")
            .expect("a response");
        assert_eq!(answer.status(), http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
        // A normal client alongside is served.
        assert_eq!(
            s.call(request()).await.expect("served").overall_code,
            Code::Ok as i32
        );
    }
    let (_, metrics) = s.http_get("/metrics").await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("sluice_rpc_requests_total") && l.contains("UNSUPPORTED_MEDIA_TYPE")
        })
        .unwrap_or_else(|| panic!("415 not counted: {metrics}"));
    assert!(line.ends_with(" 3"), "{line}");
    s.stop().await;
}
