//! The gRPC port's connection edges: a client that connects and never sends its HTTP/2
//! preface is closed after `--grpc-preface-timeout` (not the idle timeout's minutes) while a
//! normal client is served; a client that goes away mid-request is counted as CANCELLED, not
//! UNKNOWN; and the soft open-file limit is raised at start-up to what the connection caps need
//! (or a warning names both numbers).

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use support::poll::eventually;
use support::prom_text::{parse_prometheus, sample};
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::connections::{CONFIG, PATH};
use crate::support::req_k;

/// Whether the server closes `tcp` (EOF or an error) within 20 s, a failure bound; what it
/// sends first (its own SETTINGS) is read past.
async fn closed(mut tcp: TcpStream) -> bool {
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    });
    read.await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_after_the_preface_deadline() {
    let flags = [
        "--grpc-preface-timeout",
        "1s",
        // Idle reaping off: only the preface deadline can close them.
        "--grpc-idle-timeout",
        "0",
        // 20 silent ones and the normal client's connection.
        "--grpc-max-connections",
        "21",
        "--grpc-threads",
        "0",
    ];
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &flags).await;
    let addr = s.server.grpc_addr;
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let served = async {
        for _ in 0..10 {
            s.call(req_k(&["normal"]).to_proto())
                .await
                .expect("the normal client is served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (gone, ()) = tokio::join!(
        futures::future::join_all(silent.into_iter().map(closed)),
        served
    );
    assert!(
        gone.iter().all(|g| *g),
        "a silent connection stays: {gone:?}"
    );
    // Their places are free again: a new client gets in.
    let mut fresh =
        sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(channel(addr).await);
    fresh
        .should_rate_limit(req_k(&["normal"]).to_proto())
        .await
        .expect("a new client is served");
    s.stop().await;
}

#[tokio::test]
async fn a_client_gone_mid_request_is_counted_as_cancelled() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let tcp = TcpStream::connect(s.server.grpc_addr)
        .await
        .expect("connect");
    let (mut send, mut conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let mut ping = conn.ping_pong().expect("ping handle");
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let msg = req_k(&["normal"]).to_proto().encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    let req = ::http::Request::post(format!("http://{}{PATH}", s.server.grpc_addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (_answer, mut body) = send.send_request(req, false).expect("stream");
    // Half the message, then the client goes away: its connection closes (no RST_STREAM,
    // which h2 would name CANCEL itself).
    body.send_data(Bytes::copy_from_slice(&framed[..framed.len() / 2]), false)
        .expect("data");
    // The server answers a PING after the frames before it: the half request has arrived.
    ping.ping(h2::Ping::opaque()).await.expect("pong");
    driver.abort();
    let counted = |code: &'static str| {
        let s = &s;
        async move {
            let (_, text) = s.http_get("/metrics").await;
            let m = parse_prometheus(&text);
            let labels = [("code", code), ("method", "ShouldRateLimit")];
            sample(&m, "sluice_rpc_requests_total", &labels)
        }
    };
    eventually("the abandoned call counted", || async {
        counted("CANCELLED").await.filter(|n| *n >= 1.0)
    })
    .await;
    assert_eq!(counted("UNKNOWN").await, None);
    s.stop().await;
}

/// Soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut numbers = line
        .split_whitespace()
        .skip(3)
        .map(|n| n.parse().unwrap_or(u64::MAX));
    (numbers.next().expect("soft"), numbers.next().expect("hard"))
}

#[tokio::test]
async fn the_open_file_limit_is_raised_to_what_the_caps_need() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let flags = [
        "--grpc-max-connections",
        "1000",
        "--http-max-connections",
        "500",
    ];
    // 1000 + 500 + the 8 health-check places + the margin of 256.
    let need = 1_764;
    let bin = Binary::start_soft_limited(&config, &flags, 128);
    let (soft, hard) = open_file_limits(bin.child.id());
    let warned = || {
        bin.log.lock().unwrap().iter().any(|l| {
            l.contains("open-file limit") && l.contains(&format!("({need}")) && l.contains("WARN")
        })
    };
    if hard >= need {
        assert!(soft >= need, "soft limit {soft} below {need}");
        assert!(!warned(), "{:?}", bin.log.lock().unwrap());
    } else {
        assert_eq!(soft, hard, "raised as far as the hard limit");
        assert!(warned(), "{:?}", bin.log.lock().unwrap());
    }
    drop(bin);
    // A hard limit below the need: raised to it, and a warning names both numbers.
    let bin = Binary::start_limited(&config, &flags, Some(512));
    assert_eq!(open_file_limits(bin.child.id()), (512, 512));
    let log = bin.log.lock().unwrap().clone();
    let line = log
        .iter()
        .find(|l| l.contains("open-file limit"))
        .unwrap_or_else(|| panic!("no warning: {log:?}"));
    assert!(
        line.contains("(512)") && line.contains(&format!("({need}")),
        "{line}"
    );
}
