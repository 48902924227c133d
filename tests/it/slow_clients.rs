//! Clients that hold connections without asking anything, each with a normal client checked
//! while it runs: an HTTP/1 client dripping its headers a byte at a time is cut off by
//! `--http-header-read-timeout`; an HTTP/2 connection with no stream open is reaped after
//! `--grpc-idle-timeout` though it answers and sends pings, while one carrying requests stays;
//! and every service of the gRPC port, not only RLS, answers a non-gRPC content type with 415.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use sluice::proto::rate_limit_response::Code;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// The same server and normal client as the connection tests.
use crate::connections::{CONFIG, PATH};
use crate::support::req_k;

/// Drips `GET` headers one byte per 50 ms; whether the server closes the connection within
/// `within` (a read gives EOF or an error, or a write fails).
async fn dripping_is_cut_off(addr: std::net::SocketAddr, within: Duration) -> bool {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n";
    let filler = b"X-Drip: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let bytes = head.iter().chain(filler.iter().cycle());
    let deadline = crate::support::poll::tokio_now() + within;
    let mut buf = [0u8; 256];
    for &b in bytes {
        if crate::support::poll::tokio_now() > deadline {
            return false;
        }
        if tcp.write_all(&[b]).await.is_err() {
            return true;
        }
        match tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    unreachable!("the drip is endless")
}

#[tokio::test]
async fn a_client_dripping_its_headers_is_cut_off_while_others_are_served() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        // Idle reaping off, so only the header-read timeout can end the drip.
        &[
            "--http-header-read-timeout",
            "1s",
            "--http-idle-timeout",
            "0",
        ],
    )
    .await;
    let addr = s.server.http_addr;
    let drips = (0..10).map(|_| dripping_is_cut_off(addr, Duration::from_secs(15)));
    let served = async {
        for _ in 0..10 {
            assert_eq!(s.http_get("/healthcheck").await.0, 200);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let (cut, ()) = tokio::join!(futures::future::join_all(drips), served);
    assert!(cut.iter().all(|c| *c), "a dripping client stays: {cut:?}");
    assert_eq!(s.http_get("/healthcheck").await.0, 200);
    s.stop().await;
}

/// A raw HTTP/2 connection; the handle resolves when the server closes it.
async fn raw(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    h2::client::Connection<tokio::net::TcpStream>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    h2::client::handshake(tcp).await.expect("h2 handshake")
}

/// A gRPC-framed request (`k=normal`).
fn grpc_body() -> Bytes {
    let msg = req_k(&["normal"]).to_proto().encode_to_vec();
    let mut b = vec![0u8];
    b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    b.extend_from_slice(&msg);
    Bytes::from(b)
}

fn post(addr: std::net::SocketAddr, path: &str, content_type: &str) -> ::http::Request<()> {
    ::http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
        .expect("request")
}

#[tokio::test]
async fn a_connection_with_no_stream_is_reaped_though_it_pings() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &[
            "--grpc-idle-timeout",
            "1s",
            // The server pings every 200 ms; the idle connection answers every ping.
            "--grpc-keepalive-interval",
            "200ms",
        ],
    )
    .await;
    let addr = s.server.grpc_addr;
    // The idle one: no stream ever, its own PINGs every 100 ms besides answering the server's.
    let (_idle_send, mut idle_conn) = raw(addr).await;
    let mut pinger = idle_conn.ping_pong().expect("ping handle");
    let idle = tokio::spawn(async move {
        let _ = idle_conn.await;
    });
    let pings = tokio::spawn(async move {
        while pinger.ping(h2::Ping::opaque()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // The busy one (Envoy's shape): a request every 200 ms on one connection, for 4 s.
    let (mut busy_send, busy_conn) = raw(addr).await;
    let busy = tokio::spawn(async move {
        let _ = busy_conn.await;
    });
    for _ in 0..20 {
        busy_send = busy_send
            .ready()
            .await
            .expect("the busy connection stays open");
        let (answer, mut stream) = busy_send
            .send_request(post(addr, PATH, "application/grpc"), false)
            .expect("open stream");
        stream.send_data(grpc_body(), true).expect("body");
        let answer = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("answered in time")
            .expect("a response");
        assert_eq!(answer.status(), ::http::StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !busy.is_finished(),
        "a connection carrying requests was closed"
    );
    // The idle one was closed long ago (1 s idle); allow a generous bound.
    tokio::time::timeout(Duration::from_secs(10), idle)
        .await
        .expect("a pinging connection with no stream stays open")
        .expect("driver");
    pings.abort();
    assert_eq!(
        s.call(req_k(&["normal"]).to_proto())
            .await
            .expect("served")
            .overall_code,
        Code::Ok as i32
    );
    s.stop().await;
}

#[tokio::test]
async fn every_service_of_the_grpc_port_answers_415_to_other_content_types() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let addr = s.server.grpc_addr;
    let (mut send, conn) = raw(addr).await;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let paths = [
        "/grpc.health.v1.Health/Check",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "/no.such.Service/Method",
        PATH,
    ];
    for path in paths {
        send = send.ready().await.expect("stream capacity");
        let (answer, mut stream) = send
            .send_request(post(addr, path, "application/json"), false)
            .expect("open stream");
        stream
            .send_data(Bytes::from_static(b"{}"), true)
            .expect("body");
        let answer = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("answered in time")
            .expect("a response");
        assert_eq!(
            answer.status(),
            ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{path}"
        );
        assert_eq!(
            s.call(req_k(&["normal"]).to_proto())
                .await
                .expect("served")
                .overall_code,
            Code::Ok as i32
        );
    }
    let (_, metrics) = s.http_get("/metrics").await;
    for method in ["Check", "ServerReflectionInfo", "other", "ShouldRateLimit"] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("sluice_rpc_requests_total")
                    && l.contains(&format!("method=\"{method}\""))
                    && l.contains("UNSUPPORTED_MEDIA_TYPE")),
            "{method} not counted: {metrics}"
        );
    }
    s.stop().await;
}
