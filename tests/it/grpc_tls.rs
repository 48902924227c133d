//! TLS and mutual TLS of the gRPC listener, with certificates generated in the test: accepted
//! handshakes, refused ones (plain text, wrong CA, expired, missing or unlisted client
//! certificate), and certificates reloaded from their files while open connections stay.

use crate::support;
use crate::support::certs;
use crate::support::req_k;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use certs::{tls_channel, Ca, Leaf, Usage};
use sluice::clock::ManualClock;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use support::poll::wait_until_async;
use support::T0;
use tonic::transport::Channel;

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

async fn start(dir: &Path, flags: &[&str]) -> sluice::app::Server {
    let config = dir.join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let args = support::parse_serve(&config, flags);
    sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("starts")
}

async fn call(channel: Channel) -> Result<(), String> {
    let r = RateLimitServiceClient::new(channel)
        .should_rate_limit(req_k(&["v"]).to_proto())
        .await
        .map_err(|e| format!("{e:?}"))?;
    assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
    Ok(())
}

/// Connects and makes one call (with TLS 1.3 a refused client certificate shows on the first
/// call, not at connect).
async fn over_tls(addr: SocketAddr, ca: &str, identity: Option<&Leaf>) -> Result<(), String> {
    call(tls_channel(addr, ca, identity).await?).await
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test]
async fn tls_accepts_its_clients_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server CA");
    let (cert, key) = ca
        .issue(&["localhost", "127.0.0.1"], Usage::Server, false)
        .write(dir.path(), "server");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
        ],
    )
    .await;
    over_tls(server.grpc_addr, &ca.pem, None)
        .await
        .expect("a client trusting the CA");

    // Plain text gets no answer from a TLS listener.
    let plain = Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await;
    if let Ok(ch) = plain {
        assert!(call(ch).await.is_err(), "plain text must not be served");
    }
    // A client trusting another CA refuses the server.
    let other = Ca::new("other CA");
    assert!(over_tls(server.grpc_addr, &other.pem, None).await.is_err());
    server.shutdown();
    server.wait().await.unwrap();

    // An expired server certificate is refused by the client.
    let (cert, key) = ca
        .issue(&["localhost"], Usage::Server, true)
        .write(dir.path(), "expired");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
        ],
    )
    .await;
    let e = over_tls(server.grpc_addr, &ca.pem, None).await.unwrap_err();
    assert!(e.contains("Expired") || e.contains("expired"), "{e}");
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test]
async fn mutual_tls_needs_a_valid_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let (cert, key) = server_ca
        .issue(&["localhost"], Usage::Server, false)
        .write(dir.path(), "server");
    let client_ca_path = client_ca.write(dir.path(), "client-ca");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
            "--grpc-tls-client-ca",
            &path(&client_ca_path),
        ],
    )
    .await;
    let addr = server.grpc_addr;
    let good = client_ca.issue(&["envoy.internal"], Usage::Client, false);
    over_tls(addr, &server_ca.pem, Some(&good))
        .await
        .expect("a client certificate of the client CA");
    assert!(
        over_tls(addr, &server_ca.pem, None).await.is_err(),
        "no client certificate"
    );
    let stranger = Ca::new("stranger CA").issue(&["envoy.internal"], Usage::Client, false);
    assert!(
        over_tls(addr, &server_ca.pem, Some(&stranger))
            .await
            .is_err(),
        "a client certificate of another CA"
    );
    let expired = client_ca.issue(&["envoy.internal"], Usage::Client, true);
    assert!(
        over_tls(addr, &server_ca.pem, Some(&expired))
            .await
            .is_err(),
        "an expired client certificate"
    );
    // After all these refusals, good clients are still served.
    over_tls(addr, &server_ca.pem, Some(&good)).await.unwrap();
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test]
async fn allowed_sans_narrow_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("CA");
    let (cert, key) = ca
        .issue(&["localhost"], Usage::Server, false)
        .write(dir.path(), "server");
    let ca_path = ca.write(dir.path(), "ca");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
            "--grpc-tls-client-ca",
            &path(&ca_path),
            "--grpc-tls-allowed-san",
            "envoy.mesh.local,10.0.0.7",
        ],
    )
    .await;
    let addr = server.grpc_addr;
    let by_name = ca.issue(&["envoy.mesh.local"], Usage::Client, false);
    over_tls(addr, &ca.pem, Some(&by_name))
        .await
        .expect("allowed DNS SAN");
    let by_ip = ca.issue(&["10.0.0.7"], Usage::Client, false);
    over_tls(addr, &ca.pem, Some(&by_ip))
        .await
        .expect("allowed IP SAN");
    let other = ca.issue(&["intruder.mesh.local"], Usage::Client, false);
    assert!(over_tls(addr, &ca.pem, Some(&other)).await.is_err());
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test]
async fn certificates_reload_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let first = Ca::new("first CA");
    let (cert, key) = first
        .issue(&["localhost"], Usage::Server, false)
        .write(dir.path(), "server");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
            "--grpc-tls-reload-interval",
            "100ms",
        ],
    )
    .await;
    let addr = server.grpc_addr;
    let open = tls_channel(addr, &first.pem, None).await.unwrap();
    call(open.clone()).await.unwrap();
    assert!(!server.reload_tls().unwrap(), "nothing changed yet");

    let second = Ca::new("second CA");
    second
        .issue(&["localhost"], Usage::Server, false)
        .write(dir.path(), "server");
    // The poller (every 100 ms) may have been first: either way the new files are in use.
    server.reload_tls().expect("valid files");
    over_tls(addr, &second.pem, None)
        .await
        .expect("new connections get the new certificate");
    assert!(over_tls(addr, &first.pem, None).await.is_err());
    call(open.clone())
        .await
        .expect("the connection opened before the reload is still served");

    // A broken file is refused; the running certificate stays.
    std::fs::write(&cert, "not a certificate").unwrap();
    assert!(server.reload_tls().is_err());
    over_tls(addr, &second.pem, None).await.unwrap();

    // The poller picks up a change by itself.
    let third = Ca::new("third CA");
    third
        .issue(&["localhost"], Usage::Server, false)
        .write(dir.path(), "server");
    let pem = third.pem.clone();
    wait_until_async("the poller to load the third certificate", || {
        let pem = pem.clone();
        async move { over_tls(addr, &pem, None).await.is_ok() }
    })
    .await;
    call(open).await.expect("still the same open connection");
    server.shutdown();
    server.wait().await.unwrap();
}

/// A TLS connection carrying a request is not idle: a health Watch stream open on it outlives
/// several `--grpc-idle-timeout`s (the server reports its streams through tonic's TLS connect
/// info, as on plain connections).
#[tokio::test]
async fn a_tls_connection_with_an_open_stream_is_not_reaped() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server CA");
    let (cert, key) = ca
        .issue(&["localhost", "127.0.0.1"], Usage::Server, false)
        .write(dir.path(), "server");
    let server = start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &path(&cert),
            "--grpc-tls-key",
            &path(&key),
            "--grpc-idle-timeout",
            "500ms",
        ],
    )
    .await;
    let channel = tls_channel(server.grpc_addr, &ca.pem, None)
        .await
        .expect("TLS channel");
    let mut watch = HealthClient::new(channel)
        .watch(HealthCheckRequest::default())
        .await
        .expect("watch")
        .into_inner();
    watch
        .message()
        .await
        .expect("first status")
        .expect("a status");
    // Six idle timeouts: a reaped connection ends the stream with an error before then.
    let more = tokio::time::timeout(std::time::Duration::from_secs(3), watch.message()).await;
    assert!(more.is_err(), "the stream ended: {more:?}");
    server.shutdown();
    drop(watch);
    server.wait().await.unwrap();
}
