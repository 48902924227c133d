//! Hostile request bodies on the HTTP port, over raw HTTP/1.1, each with a normal client's
//! requests checked while it runs: a body dribbled or never sent is cut off by
//! `--http-body-timeout`; a body past `--max-request-bytes` gets 413 before it is complete (so
//! nothing buffers it), naming the flag and counted; `/json` takes `application/json` only; and
//! `/healthcheck` answers while hostile clients hold every `--http-max-connections` place.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::http::{http_post, request};
use support::poll::eventually;
use support::prom_text::{parse_prometheus, sample};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::connections::CONFIG;

const JSON: &str = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;

/// The bound on any wait for the server to answer or close (a failure bound, not a timing).
const WITHIN: Duration = Duration::from_secs(20);

/// Request headers of `POST path` announcing a JSON body (`Content-Length`, or chunked).
fn post_head(path: &str, length: Option<usize>) -> String {
    let framing = match length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".into(),
    };
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    )
}

/// Sends `head`, then one byte of body per 100 ms (none when `drip` is false); the server's
/// answer once it closes the connection, `None` if it has not within [`WITHIN`].
async fn stall_body(addr: SocketAddr, head: String, drip: bool) -> Option<String> {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("headers");
    let deadline = crate::support::poll::tokio_now() + WITHIN;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while crate::support::poll::tokio_now() < deadline {
        if drip && tcp.write_all(b" ").await.is_err() {
            return Some(String::from_utf8_lossy(&buf).into_owned());
        }
        match tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&buf).into_owned()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    None
}

/// `sluice_rpc_requests_total{method, code}` as `/metrics` shows it now (0 when absent).
async fn counted(s: &Sluice, method: &str, code: &str) -> f64 {
    let (_, text) = s.http_get("/metrics").await;
    let m = parse_prometheus(&text);
    sample(
        &m,
        "sluice_rpc_requests_total",
        &[("code", code), ("method", method)],
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_or_missing_body_is_cut_off_while_others_are_served() {
    for json_api in [true, false] {
        let mut flags = vec!["--http-body-timeout", "1s", "--http-idle-timeout", "0"];
        if json_api {
            flags.push("--json-api");
        }
        let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &flags).await;
        let addr = s.server.http_addr;
        let stalls = (0..10).map(|i| stall_body(addr, post_head("/json", Some(1_000)), i % 2 == 0));
        let served = async {
            for _ in 0..10 {
                assert_eq!(s.http_get("/healthcheck").await.0, 200);
                let want = if json_api { 200 } else { 404 };
                assert_eq!(http_post(addr, "/json", JSON).await.0, want);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let (answers, ()) = tokio::join!(futures::future::join_all(stalls), served);
        for a in &answers {
            let a = a.as_deref().expect("a stalled body is cut off");
            assert!(a.starts_with("HTTP/1.1 408"), "{a}");
            assert!(a.contains("--http-body-timeout"), "{a}");
        }
        assert_eq!(counted(&s, "json", "DEADLINE_EXCEEDED").await, 10.0);
        s.stop().await;
    }
}

/// Sends `head` and `body_len - 1` bytes of body (chunked when `head` says so), withholding
/// the last; the answer the server gives meanwhile, `None` if none within [`WITHIN`].
async fn withhold_last_byte(addr: SocketAddr, chunked: bool, body_len: usize) -> Option<String> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = tcp.into_split();
    let head = post_head("/json", (!chunked).then_some(body_len));
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        let piece = vec![b' '; 16 * 1024];
        let mut left = body_len - 1;
        while left > 0 {
            let n = left.min(piece.len());
            if chunked {
                wr.write_all(format!("{n:x}\r\n").as_bytes()).await?;
            }
            wr.write_all(&piece[..n]).await?;
            if chunked {
                wr.write_all(b"\r\n").await?;
            }
            left -= n;
        }
        // The body's last byte (and the chunked terminator) never comes; hold the connection.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(wr)
    });
    let mut buf = Vec::new();
    let got = tokio::time::timeout(WITHIN, rd.read_to_end(&mut buf)).await;
    writer.abort();
    got.ok().map(|_| String::from_utf8_lossy(&buf).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_limit_get_413_before_they_end() {
    // `--json-api` off: the route answers 404 to a body within the limit, yet reads none past it.
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--http-idle-timeout", "0"],
    )
    .await;
    let addr = s.server.http_addr;
    let near_2_mib = 2 * 1024 * 1024 - 16;
    let bodies = (0..200).map(|i| withhold_last_byte(addr, i % 2 == 0, near_2_mib));
    let served = async {
        for _ in 0..5 {
            assert_eq!(s.http_get("/healthcheck").await.0, 200);
        }
    };
    let (answers, ()) = tokio::join!(futures::future::join_all(bodies), served);
    for a in &answers {
        let a = a.as_deref().expect("an answer before the body is complete");
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        assert!(a.contains("--max-request-bytes"), "{a}");
    }
    // A body to a route that takes none is refused at once too.
    let r = request(addr, "x", "POST", "/healthcheck", &[], "x")
        .await
        .expect("answer");
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.body.contains("takes no request body"), "{r:?}");
    assert_eq!(counted(&s, "json", "PAYLOAD_TOO_LARGE").await, 200.0);
    assert_eq!(counted(&s, "http", "PAYLOAD_TOO_LARGE").await, 1.0);
    s.stop().await;
}

#[tokio::test]
async fn json_takes_application_json_only_and_charges_nothing_else() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &["--json-api"]).await;
    let addr = s.server.http_addr;
    let others: [&[(&str, &str)]; 4] = [
        &[("Content-Type", "text/plain")],
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &[("Content-Type", "multipart/form-data; boundary=b")],
        &[],
    ];
    for headers in others {
        let r = request(addr, "x", "POST", "/json", headers, JSON)
            .await
            .expect("answer");
        assert_eq!(r.status, 415, "{headers:?}: {r:?}");
        assert!(r.body.contains("application/json"), "{r:?}");
    }
    assert_eq!(counted(&s, "json", "UNSUPPORTED_MEDIA_TYPE").await, 4.0);
    // Parameters and any case pass; the 415s charged nothing (1000 an hour, this the first).
    let json = [("Content-Type", "Application/JSON; charset=utf-8")];
    let r = request(addr, "x", "POST", "/json", &json, JSON)
        .await
        .expect("answer");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains(r#""limitRemaining":999"#), "{r:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_answers_while_every_connection_is_held() {
    let flags = [
        "--http-max-connections",
        "20",
        "--http-body-timeout",
        "60s",
        "--http-idle-timeout",
        "0",
    ];
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &flags).await;
    let addr = s.server.http_addr;
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = post_head("/json", Some(100));
        tcp.write_all(head.as_bytes()).await.expect("headers");
        held.push(tcp);
    }
    // Once all 20 are taken, a new connection lands on a reserved place: 503 for anything but
    // the health check.
    eventually("every regular place taken", || async {
        let r = request(addr, "x", "GET", "/version", &[], "").await.ok()?;
        (r.status == 503).then_some(())
    })
    .await;
    for _ in 0..20 {
        let r = request(addr, "x", "GET", "/healthcheck", &[], "").await;
        let r = r.expect("the health check is answered");
        assert_eq!((r.status, r.body.as_str()), (200, "OK"), "{r:?}");
    }
    let r = request(addr, "x", "GET", "/version", &[], "")
        .await
        .expect("answer");
    assert!(r.body.contains("--http-max-connections"), "{r:?}");
    drop(held);
    // The held places free up: every route answers again.
    eventually("a regular place again", || async {
        let r = request(addr, "x", "GET", "/version", &[], "").await.ok()?;
        (r.status == 200).then_some(())
    })
    .await;
    s.stop().await;
}
