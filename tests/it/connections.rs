//! Connection-level attacks over real HTTP/2 frames (the `h2` crate as a raw client), each
//! with a normal client's requests checked while it runs: streams opened and never finished
//! hold no in-flight slot, a non-gRPC content type gets HTTP 415, and every refusal is counted
//! in `sluice_rpc_requests_total` with its code.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use sluice::proto::rate_limit_response::Code;
use support::*;

pub(crate) const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";
pub(crate) const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A raw HTTP/2 connection to `addr`, its driver spawned.
async fn raw(addr: std::net::SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn post(addr: std::net::SocketAddr, content_type: &str) -> ::http::Request<()> {
    ::http::Request::post(format!("http://{addr}{PATH}"))
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
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            s.call(req_k(&["normal"]).to_proto()),
        )
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
        assert_eq!(answer.status(), ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
        // A normal client alongside is served.
        assert_eq!(
            s.call(req_k(&["normal"]).to_proto())
                .await
                .expect("served")
                .overall_code,
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

/// Whether the server closes `tcp` within `within` (a read gives EOF or an error).
async fn closed_within(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let deadline = crate::support::poll::tokio_now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // the server's SETTINGS and the like
        }
    }
}

#[tokio::test]
async fn idle_grpc_connections_are_reaped_while_clients_are_served() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--grpc-idle-timeout", "1s"],
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(
            tokio::net::TcpStream::connect(s.server.grpc_addr)
                .await
                .expect("connect"),
        );
    }
    // A client that keeps asking keeps its connection.
    for _ in 0..15 {
        assert_eq!(
            s.call(req_k(&["normal"]).to_proto())
                .await
                .expect("served")
                .overall_code,
            Code::Ok as i32
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for tcp in &mut idle {
        assert!(
            closed_within(tcp, Duration::from_secs(10)).await,
            "an idle connection stays open"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn a_stalled_http_request_is_closed_while_others_are_served() {
    use tokio::io::AsyncWriteExt;
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--http-idle-timeout", "1s"],
    )
    .await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut tcp = tokio::net::TcpStream::connect(s.server.http_addr)
            .await
            .expect("connect");
        tcp.write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        slow.push(tcp);
    }
    assert_eq!(s.http_get("/healthcheck").await.0, 200);
    for tcp in &mut slow {
        assert!(
            closed_within(tcp, Duration::from_secs(10)).await,
            "a stalled request stays open"
        );
    }
    assert_eq!(s.http_get("/healthcheck").await.0, 200);
    s.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--grpc-max-connections", "8", "--grpc-threads", "0"],
    )
    .await;
    // The test client holds one place; seven more fill the port.
    s.call(req_k(&["normal"]).to_proto()).await.expect("served");
    let mut held = Vec::new();
    for _ in 0..7 {
        held.push(
            tokio::net::TcpStream::connect(s.server.grpc_addr)
                .await
                .expect("connect"),
        );
    }
    for _ in 0..5 {
        let mut extra = tokio::net::TcpStream::connect(s.server.grpc_addr)
            .await
            .expect("connect");
        assert!(
            closed_within(&mut extra, Duration::from_secs(5)).await,
            "beyond the cap"
        );
        assert_eq!(
            s.call(req_k(&["normal"]).to_proto())
                .await
                .expect("served")
                .overall_code,
            Code::Ok as i32
        );
    }
    for tcp in &mut held {
        assert!(
            !closed_within(tcp, Duration::from_millis(50)).await,
            "within the cap"
        );
    }
    s.stop().await;
}

/// CPU seconds `pid` has used (user and system), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[tokio::test]
async fn out_of_file_descriptors_backs_off_logs_once_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let bin = Binary::start_limited(&config, &["--grpc-threads", "1"], Some(64));
    let mut client = sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(
        channel(bin.grpc_addr).await,
    );
    client
        .should_rate_limit(req_k(&["normal"]).to_proto())
        .await
        .expect("served");
    // Far more connections than descriptors: the listener runs out.
    let mut flood = Vec::new();
    for _ in 0..150 {
        if let Ok(Ok(tcp)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(bin.grpc_addr),
        )
        .await
        {
            flood.push(tcp);
        }
    }
    let pid = bin.child.id();
    let before = cpu_seconds(pid);
    // While out of descriptors, the open connection is still served.
    for _ in 0..10 {
        client
            .should_rate_limit(req_k(&["normal"]).to_proto())
            .await
            .expect("served while out of fds");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let used = cpu_seconds(pid) - before;
    // A spinning accept loop burns a whole core (about 2 CPU-s in these 2 s).
    assert!(used < 1.0, "accept loop spins: {used} CPU-s in 2 s");
    let warnings: Vec<String> = bin
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("accept failed"))
        .cloned()
        .collect();
    assert!(!warnings.is_empty(), "the failure is logged");
    assert!(
        warnings.len() <= 2,
        "logged once per interval: {warnings:?}"
    );
    // Descriptors freed, new connections are served again.
    drop(flood);
    let deadline = crate::support::poll::tokio_now() + Duration::from_secs(20);
    loop {
        let fresh = async {
            let channel =
                tonic::transport::Channel::from_shared(format!("http://{}", bin.grpc_addr))
                    .expect("uri")
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
            sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(channel)
                .should_rate_limit(req_k(&["normal"]).to_proto())
                .await
                .map_err(|e| e.to_string())
        };
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), fresh).await {
            break;
        }
        assert!(crate::support::poll::tokio_now() < deadline, "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// HTTP/2 rapid reset in raw frames, all in one write: the preface, SETTINGS, then `n` streams
/// each opened (HEADERS: POST, http, `/`) and cancelled at once (RST_STREAM CANCEL).
fn rapid_reset_frames(n: u32) -> Vec<u8> {
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    for i in 0..n {
        let stream = 2 * i + 1;
        // HPACK static table: :method POST, :scheme http, :path /.
        out.extend(frame(0x1, 0x4, stream, &[0x83, 0x86, 0x84]));
        out.extend(frame(0x3, 0, stream, &8u32.to_be_bytes()));
    }
    out
}

#[tokio::test]
async fn rapid_reset_reconnects_do_not_flood_the_log() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let bin = Binary::start(&config, &[]);
    let mut client = sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(
        channel(bin.grpc_addr).await,
    );
    // Each connection resets more streams than h2 lets pend (20), so the server answers
    // GOAWAY (ENHANCE_YOUR_CALM) and h2 warns, once per connection.
    let frames = rapid_reset_frames(50);
    for _ in 0..100 {
        let Ok(mut tcp) = tokio::net::TcpStream::connect(bin.grpc_addr).await else {
            continue;
        };
        if tcp.write_all(&frames).await.is_ok() {
            closed_within(&mut tcp, Duration::from_secs(2)).await;
        }
    }
    client
        .should_rate_limit(req_k(&["normal"]).to_proto())
        .await
        .expect("served after the flood");
    let log = |what: &str| -> Vec<String> {
        let lines = bin.log.lock().unwrap();
        lines.iter().filter(|l| l.contains(what)).cloned().collect()
    };
    // The warning came, so the attack ran; it was logged once, with the rest counted.
    let resets = log("reached limit");
    assert!(!resets.is_empty(), "no rapid reset was seen");
    let warnings: Vec<String> = bin
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
        .cloned()
        .collect();
    assert!(
        warnings.len() <= 5,
        "{} warnings: {:?}",
        warnings.len(),
        &warnings[..warnings.len().min(5)]
    );
}

#[tokio::test]
async fn hundreds_of_concurrent_streams_on_one_connection_are_served() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--grpc-threads", "0"]).await;
    let calls = (0..500).map(|_| s.call(req_k(&["normal"]).to_proto()));
    let answers = futures::future::join_all(calls).await;
    for a in answers {
        assert_eq!(a.expect("served").overall_code, Code::Ok as i32);
    }
    let (_, metrics) = s.http_get("/metrics").await;
    assert!(
        !metrics.contains("RESOURCE_EXHAUSTED"),
        "a refusal under Envoy-like multiplexing"
    );
    s.stop().await;
}
