//! The xDS config source against a real ADS control plane started here ([`control_plane`]):
//! sluice run with Envoy Gateway's exact environment over mutual TLS 1.3 (ACK with the
//! version, rules enforced, an update applied, a broken snapshot NACKed with the old rules
//! kept, the control plane gone and back with the client certificate rotated meanwhile), Envoy AI Gateway's QuotaPolicy shape over
//! plaintext, health waiting for the first snapshot unless told to start without it, a snapshot
//! over 4 MiB, and a real Envoy with Envoy Gateway's routes in front ([`envoy`]).

mod control_plane;
mod envoy;

use std::net::SocketAddr;

use control_plane::{ControlPlane, ServerTls};
use sluice::proto::discovery::DiscoveryRequest;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tonic::transport::Channel;

use crate::support;
use support::certs::{Ca, MutualTls, Usage};
use support::poll::eventually;
use support::process::{spawn_sluice, Spawned};
use support::prom_text::{parse_prometheus, sample};
use support::*;

/// A descriptor chain `entries`, the last one limited to `rpu` per `unit`.
fn chain(entries: &[(&str, &str)], rpu: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    let (last, rest) = entries.split_last().expect("one entry at least");
    let mut d = RateLimitDescriptor {
        key: last.0.into(),
        value: last.1.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: rpu,
            ..Default::default()
        }),
        ..Default::default()
    };
    for (k, v) in rest.iter().rev() {
        d = RateLimitDescriptor {
            key: (*k).into(),
            value: (*v).into(),
            descriptors: vec![d],
            ..Default::default()
        };
    }
    d
}

/// One domain's resource, named after it as Envoy Gateway names them.
fn domain(name: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: name.into(),
        descriptors,
    }
}

/// Starts sluice as a child with `envs` (plus loopback ports and JSON logs).
async fn sluice(envs: &[(&str, &str)], args: &[&str]) -> Spawned {
    let all: Vec<(String, String)> = [
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        // The debug listener (0.0.0.0:6070 by default) on a free port: tests run at once.
        ("DEBUG_PORT", "0"),
        ("LOG_FORMAT", "json"),
    ]
    .iter()
    .chain(envs)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut argv = vec!["serve".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    // spawn_sluice blocks until the child logs that it serves.
    tokio::task::spawn_blocking(move || {
        let envs: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        spawn_sluice(&args, &envs)
    })
    .await
    .expect("spawn sluice")
}

/// The overall code of one RLS call.
async fn code(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
    hits: u32,
) -> Code {
    let r = req(domain, vec![d(entries)]).addend(hits).to_proto();
    let answer = client.should_rate_limit(r).await.expect("RLS answer");
    Code::try_from(answer.into_inner().overall_code).expect("a known code")
}

/// A metric of sluice's `/metrics` (0 when absent).
async fn metric(http: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (status, text) = http_get(http, "/metrics").await;
    assert_eq!(status, 200);
    sample(&parse_prometheus(&text), name, labels).unwrap_or(0.0)
}

fn is_ack(r: &DiscoveryRequest, version: &str) -> bool {
    r.error_detail.is_none() && r.version_info == version
}

const ROUTE: [(&str, &str); 2] = [
    ("first-route", "first-route"),
    ("masked_remote_address", "192.168.0.0/16"),
];
const SECOND: [(&str, &str); 2] = [
    ("second-route", "second-route"),
    ("rule-0-match-0", "rule-0-match-0"),
];
const THIRD: [(&str, &str); 1] = [("third-route", "third-route")];
const LISTENER: &str = "default/eg/http";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_environment_takes_rules_over_mutual_tls_ads() {
    let dir = tempfile::tempdir().unwrap();
    let MutualTls {
        ca_file,
        server_cert,
        server_key,
        client_cert,
        client_key,
        ..
    } = MutualTls::write(
        dir.path(),
        "envoy-gateway CA",
        ("server", &["127.0.0.1"]),
        ("tls", &["envoy-ratelimit"]),
    );
    let tls = || ServerTls {
        cert: &server_cert,
        key: &server_key,
        client_ca: &ca_file,
    };
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let cp = ControlPlane::start(any_port, Some(tls())).await;
    let url = cp.addr.to_string();
    let (cert, key, ca_path) = (
        client_cert.display().to_string(),
        client_key.display().to_string(),
        ca_file.display().to_string(),
    );
    // Envoy Gateway's environment for its ratelimit container, exactly.
    let sluice = sluice(
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &url),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &cert),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &key),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &ca_path),
        ],
        &[],
    )
    .await;
    let http = sluice.http;
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);

    // Started without a config: healthy before any snapshot, and answering as
    // envoyproxy/ratelimit does then (an error, which Envoy's failure mode decides).
    assert_eq!(http_get(http, "/healthcheck").await.0, 200);
    let early = req(LISTENER, vec![d(&ROUTE)]).to_proto();
    let status = client.should_rate_limit(early).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "no rate limit configuration loaded");
    // The subscription: wildcard, the node id, the RateLimitConfig type, over mTLS.
    let first = eventually("sluice's subscription", || async {
        cp.requests().into_iter().next()
    })
    .await;
    assert_eq!(
        first.node.as_ref().map(|n| n.id.as_str()),
        Some("envoy-ratelimit")
    );
    assert_eq!(first.type_url, sluice::config::xds::TYPE_URL);
    assert!(first.resource_names.is_empty() && first.response_nonce.is_empty());

    // v1: ACKed with its version, enforced: 3 per minute.
    cp.set(
        "v1",
        vec![domain(
            LISTENER,
            vec![chain(&ROUTE, 3, RateLimitUnit::Minute)],
        )],
    );
    let ack = cp.reply("v1").await;
    assert!(is_ack(&ack, "v1"), "{ack:?}");
    let codes = [
        code(&mut client, LISTENER, &ROUTE, 1).await,
        code(&mut client, LISTENER, &ROUTE, 1).await,
        code(&mut client, LISTENER, &ROUTE, 1).await,
        code(&mut client, LISTENER, &ROUTE, 1).await,
    ];
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);

    // v2 adds a route: takes effect; the first route's count goes on.
    let v2 = vec![domain(
        LISTENER,
        vec![
            chain(&ROUTE, 3, RateLimitUnit::Minute),
            chain(&SECOND, 1, RateLimitUnit::Hour),
        ],
    )];
    cp.set("v2", v2.clone());
    assert!(is_ack(&cp.reply("v2").await, "v2"));
    assert_eq!(code(&mut client, LISTENER, &SECOND, 1).await, Code::Ok);
    assert_eq!(
        code(&mut client, LISTENER, &SECOND, 1).await,
        Code::OverLimit
    );
    assert_eq!(
        code(&mut client, LISTENER, &ROUTE, 1).await,
        Code::OverLimit
    );

    // v3 does not validate (one descriptor twice): NACKed with the reason and the version
    // still in use; v2's rules keep working.
    let mut broken = v2.clone();
    broken[0]
        .descriptors
        .push(chain(&SECOND, 50, RateLimitUnit::Hour));
    broken[0]
        .descriptors
        .push(chain(&THIRD, 1, RateLimitUnit::Hour));
    cp.set("v3", broken);
    let nack = cp.reply("v3").await;
    let detail = nack
        .error_detail
        .as_ref()
        .expect("a NACK carries error_detail");
    assert_eq!(nack.version_info, "v2");
    assert!(
        detail.message.contains("duplicate descriptor"),
        "{detail:?}"
    );
    assert_eq!(
        code(&mut client, LISTENER, &SECOND, 1).await,
        Code::OverLimit
    );
    assert_eq!(code(&mut client, LISTENER, &THIRD, 1).await, Code::Ok);
    assert_eq!(code(&mut client, LISTENER, &THIRD, 1).await, Code::Ok);
    let rejected = [("result", "rejected")];
    assert_eq!(
        metric(http, "sluice_xds_updates_total", &rejected).await,
        1.0
    );

    // The control plane goes away: the stream is down, the rules stay.
    let addr = cp.addr;
    cp.stop().await;
    eventually("sluice to see the stream down", || async {
        (metric(http, "sluice_xds_connected", &[]).await == 0.0).then_some(())
    })
    .await;
    assert_eq!(
        code(&mut client, LISTENER, &SECOND, 1).await,
        Code::OverLimit
    );
    assert_eq!(
        code(&mut client, LISTENER, &ROUTE, 1).await,
        Code::OverLimit
    );

    // Meanwhile the client certificate rotates, and the control plane comes back on the same
    // address trusting only the new client CA: sluice reads the files again, reconnects and
    // applies the new snapshot.
    let ca2 = Ca::new("rotated client CA");
    let ca2_file = ca2.write(dir.path(), "ca2");
    ca2.issue(&["envoy-ratelimit"], Usage::Client, false)
        .write(dir.path(), "tls");
    let rotated = ServerTls {
        client_ca: &ca2_file,
        ..tls()
    };
    let cp = ControlPlane::start(addr, Some(rotated)).await;
    // Its first snapshot is broken: the NACK names v2, applied on the previous stream.
    let mut broken = v2.clone();
    broken[0]
        .descriptors
        .push(chain(&ROUTE, 9, RateLimitUnit::Hour));
    cp.set("v4-broken", broken);
    let nack = cp.reply("v4-broken").await;
    assert!(nack.error_detail.is_some(), "{nack:?}");
    assert_eq!(nack.version_info, "v2");
    let mut v4 = v2;
    v4[0]
        .descriptors
        .push(chain(&THIRD, 2, RateLimitUnit::Minute));
    cp.set("v4", v4);
    assert!(is_ack(&cp.reply("v4").await, "v4"));
    assert_eq!(metric(http, "sluice_xds_connected", &[]).await, 1.0);
    let codes = [
        code(&mut client, LISTENER, &THIRD, 1).await,
        code(&mut client, LISTENER, &THIRD, 1).await,
        code(&mut client, LISTENER, &THIRD, 1).await,
    ];
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(
        code(&mut client, LISTENER, &ROUTE, 1).await,
        Code::OverLimit
    );
    let applied = [("result", "applied")];
    assert_eq!(
        metric(http, "sluice_xds_updates_total", &applied).await,
        3.0
    );

    let log = sluice.log.lock().unwrap().clone();
    let logged = |what: &str| log.iter().any(|l| l.contains(what));
    assert!(logged("xDS snapshot applied (ACK)"), "{log:#?}");
    assert!(logged("xDS snapshot rejected (NACK)"), "{log:#?}");
    cp.stop().await;
}

/// Envoy AI Gateway's QuotaPolicy: domain ai-gateway-quota, backend_name -> model_name_override
/// leaves in quota mode; its own control plane on plaintext, node envoy-ai-gateway-ratelimit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_gateway_quota_policy_is_accepted_and_enforced() {
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), None).await;
    let url = cp.addr.to_string();
    let sluice = sluice(
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &url),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ai-gateway-ratelimit"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ],
        &[],
    )
    .await;
    let quota = |backend: &str, model: &str, tokens: u32| {
        let mut d = chain(
            &[("backend_name", backend), ("model_name_override", model)],
            tokens,
            RateLimitUnit::Minute,
        );
        d.descriptors[0].quota_mode = true;
        d
    };
    cp.set(
        "1",
        vec![domain(
            "ai-gateway-quota",
            vec![
                quota("default/openai", "gpt-4", 10),
                quota("default/azure", "gpt-4", 10),
            ],
        )],
    );
    let ack = cp.reply("1").await;
    assert!(is_ack(&ack, "1"), "{ack:?}");
    assert_eq!(
        ack.node.as_ref().map(|n| n.id.as_str()),
        Some("envoy-ai-gateway-ratelimit")
    );
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);
    let openai = [
        ("backend_name", "default/openai"),
        ("model_name_override", "gpt-4"),
    ];
    let azure = [
        ("backend_name", "default/azure"),
        ("model_name_override", "gpt-4"),
    ];
    // 6 then 6 tokens of a 10-token quota: the second goes over.
    assert_eq!(
        code(&mut client, "ai-gateway-quota", &openai, 6).await,
        Code::Ok
    );
    assert_eq!(
        code(&mut client, "ai-gateway-quota", &openai, 6).await,
        Code::OverLimit
    );
    // Quota mode: a request over one quota but within another of the same request passes.
    let both = req("ai-gateway-quota", vec![d(&openai), d(&azure)])
        .addend(6)
        .to_proto();
    let answer = client.should_rate_limit(both).await.unwrap().into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    drop(sluice);
    cp.stop().await;
}

/// sluice's own flags; without --start-without-config, health waits for the first snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_waits_for_the_first_snapshot_without_force_start() {
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), None).await;
    let url = format!("http://{}", cp.addr);
    let sluice = sluice(
        &[],
        &[
            "--config-xds",
            &url,
            "--xds-node-id",
            "edge",
            "--log-format",
            "json",
        ],
    )
    .await;
    eventually("the subscription", || async {
        cp.requests().into_iter().next()
    })
    .await;
    assert_eq!(http_get(sluice.http, "/healthcheck").await.0, 503);
    cp.set(
        "a",
        vec![domain("edge", vec![chain(&THIRD, 1, RateLimitUnit::Hour)])],
    );
    assert!(is_ack(&cp.reply("a").await, "a"));
    eventually("SERVING after the first snapshot", || async {
        (http_get(sluice.http, "/healthcheck").await.0 == 200).then_some(())
    })
    .await;
    drop(sluice);
    cp.stop().await;
}

/// Envoy Gateway's snapshots outgrow gRPC's default 4 MiB: the default cap (16 MiB) takes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_over_4_mib_is_applied() {
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), None).await;
    let url = cp.addr.to_string();
    let sluice = sluice(&[], &["--config-xds", &url, "--log-format", "json"]).await;
    let pad = "x".repeat(120);
    let routes: Vec<RateLimitDescriptor> = (0..40_000)
        .map(|i| {
            let value = format!("route-{i}-{pad}");
            chain(&[("route", value.as_str())], 1, RateLimitUnit::Hour)
        })
        .collect();
    let big = domain("big", routes);
    let bytes = prost::Message::encoded_len(&big);
    assert!(bytes > 5 << 20, "{bytes} bytes");
    cp.set("big", vec![big]);
    let ack = cp.reply("big").await;
    assert!(is_ack(&ack, "big"), "{ack:?}");
    let mut client = RateLimitServiceClient::new(channel(sluice.grpc).await);
    let last = format!("route-39999-{pad}");
    let entries = [("route", last.as_str())];
    assert_eq!(code(&mut client, "big", &entries, 1).await, Code::Ok);
    assert_eq!(code(&mut client, "big", &entries, 1).await, Code::OverLimit);
    drop(sluice);
    cp.stop().await;
}
