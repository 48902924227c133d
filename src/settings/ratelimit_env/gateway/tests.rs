//! Envoy Gateway's variables, through clap and [`super::super::apply`] as `main` runs them.

use super::command_line;
use crate::settings::ratelimit_env::tests::run;
use std::ffi::OsString;
use std::path::PathBuf;

/// What Envoy Gateway v1.9 sets (resource.go), minus the xDS source.
const EG: [(&str, &str); 10] = [
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
];

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn invoked_as_ratelimit_without_arguments_serves() {
    assert_eq!(
        command_line(os(&["/bin/ratelimit"])),
        os(&["/bin/ratelimit", "serve", "--ratelimit-defaults"])
    );
    assert_eq!(
        command_line(os(&["ratelimit"])),
        os(&["ratelimit", "serve", "--ratelimit-defaults"])
    );
    for argv in [
        &["/bin/ratelimit", "check", "x"][..],
        &["/usr/bin/sluice"],
        &["/bin/ratelimitd"],
    ] {
        assert_eq!(command_line(os(argv)), os(argv), "{argv:?}");
    }
    // With no variable at all, envoyproxy/ratelimit's own config location.
    let (a, _) = run(&["--ratelimit-defaults"], &[]).unwrap();
    assert_eq!(
        a.config,
        vec![PathBuf::from("/srv/runtime_data/current/config")]
    );
    assert!(a.charge_rejected);
    assert_eq!(a.debug_addr, Some("0.0.0.0:6070".parse().unwrap()));
}

#[test]
fn envoy_gateway_environment_maps_whole() {
    let (a, notes) = run(&[], &EG).unwrap();
    assert_eq!(a.config, vec![PathBuf::from("/data/ratelimit/config")]);
    let tls = &a.hardening.tls;
    assert_eq!(tls.grpc_tls_cert, Some(PathBuf::from("/certs/tls.crt")));
    assert_eq!(tls.grpc_tls_key, Some(PathBuf::from("/certs/tls.key")));
    assert_eq!(tls.grpc_tls_client_ca, Some(PathBuf::from("/certs/ca.crt")));
    // Standing in for envoyproxy/ratelimit: its charging and its debug port.
    assert!(a.ratelimit_defaults && a.charge_rejected);
    assert_eq!(a.debug_addr, Some("0.0.0.0:6070".parse().unwrap()));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("client certificates required")),
        "{notes:?}"
    );
    // With Envoy Gateway's Redis backend over TLS with a client certificate.
    let mut redis = EG.to_vec();
    redis.extend([
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.redis-system.svc.cluster.local:6379"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CLIENT_CERT", "/redis-certs/tls.crt"),
        ("REDIS_TLS_CLIENT_KEY", "/redis-certs/tls.key"),
    ]);
    let (a, _) = run(&[], &redis).unwrap();
    assert_eq!(a.backend, crate::settings::Backend::Redis);
    assert_eq!(
        a.redis.redis_url,
        "rediss://redis.redis-system.svc.cluster.local:6379"
    );
    assert_eq!(
        a.redis.redis_tls_cert,
        Some(PathBuf::from("/redis-certs/tls.crt"))
    );
    assert_eq!(
        a.redis.redis_tls_key,
        Some(PathBuf::from("/redis-certs/tls.key"))
    );
}

#[test]
fn charging_follows_who_sluice_stands_in_for() {
    // sluice's own --config: sluice's default, nothing charged for a rejected request.
    let (a, _) = run(&["--config", "/c"], &[("GRPC_PORT", "1")]).unwrap();
    assert!(!a.charge_rejected && !a.ratelimit_defaults && a.debug_addr.is_none());
    // Explicitly set, the variable wins either way.
    let stop = [
        ("RUNTIME_ROOT", "/data"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
    ];
    assert!(!run(&[], &stop).unwrap().0.charge_rejected);
    // And sluice's flag wins over the variable.
    let (a, _) = run(&["--charge-rejected"], &stop).unwrap();
    assert!(a.charge_rejected);
    // DEBUG_PORT alone opens the debug port.
    let (a, _) = run(&["--config", "/c"], &[("DEBUG_PORT", "7070")]).unwrap();
    assert_eq!(a.debug_addr, Some("0.0.0.0:7070".parse().unwrap()));
    let (a, _) = run(&["--debug-addr", "127.0.0.1:1"], &EG).unwrap();
    assert_eq!(a.debug_addr, Some("127.0.0.1:1".parse().unwrap()));
}

#[test]
fn grpc_tls_variables_that_cannot_be_honoured_fail() {
    let cfg = ["--config", "/c"];
    let e = run(&cfg, &[("GRPC_SERVER_USE_TLS", "true")]).unwrap_err();
    assert!(e.contains("needs GRPC_SERVER_TLS_CERT"), "{e}");
    let mut two_cas = EG.to_vec();
    two_cas.push(("GRPC_CLIENT_TLS_CACERT", "/other/ca.crt"));
    let e = run(&cfg, &two_cas).unwrap_err();
    assert!(e.contains("set one"), "{e}");
    // Without GRPC_SERVER_USE_TLS the files are unused, as upstream: said, not applied.
    let (a, notes) = run(&cfg, &[("GRPC_SERVER_TLS_CERT", "/x")]).unwrap();
    assert!(a.hardening.tls.grpc_tls_cert.is_none());
    assert!(notes
        .iter()
        .any(|n| n.contains("GRPC_SERVER_TLS_CERT: ignored")));
    // envoyproxy/ratelimit's own names: client CA and SAN.
    let (a, _) = run(
        &cfg,
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/c.pem"),
            ("GRPC_SERVER_TLS_KEY", "/k.pem"),
            ("GRPC_CLIENT_TLS_CACERT", "/ca.pem"),
            ("GRPC_CLIENT_TLS_SAN", "envoy"),
        ],
    )
    .unwrap();
    assert_eq!(
        a.hardening.tls.grpc_tls_client_ca,
        Some(PathBuf::from("/ca.pem"))
    );
    assert_eq!(
        a.hardening.tls.grpc_tls_allowed_san,
        vec!["envoy".to_string()]
    );
}

#[test]
fn tracing_variables_map_or_stop_start_up() {
    let cfg = ["--config", "/c"];
    let on = [
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
        ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
        ("TRACING_SAMPLING_RATE", "0.5"),
    ];
    let (a, _) = run(&cfg, &on).unwrap();
    assert_eq!(a.otlp_endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(a.trace_sampling_rate, Some(0.5));
    assert_eq!(
        a.trace_resource,
        vec![
            ("service.name".to_string(), "envoy-ratelimit".to_string()),
            ("service.namespace".into(), "envoy-gateway-system".into()),
            ("service.instance.id".into(), "pod-1".into()),
        ]
    );
    // Envoy Gateway leaves the protocol at envoyproxy/ratelimit's default, http: refused, with
    // what to set instead.
    let eg = [
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
    ];
    let e = run(&cfg, &eg).unwrap_err();
    assert!(e.contains("TRACING_EXPORTER_PROTOCOL=grpc"), "{e}");
    let e = run(
        &cfg,
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ],
    )
    .unwrap_err();
    assert!(e.contains("needs OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
    let mut bad = on.to_vec();
    bad.push(("TRACING_SAMPLING_RATE", "2"));
    bad.remove(6);
    assert!(run(&cfg, &bad)
        .unwrap_err()
        .contains("TRACING_SAMPLING_RATE=2"));
    // Off: the names are said to be unused.
    let (a, notes) = run(&cfg, &[("TRACING_SERVICE_NAME", "x")]).unwrap();
    assert!(a.trace_resource.is_empty());
    assert!(notes
        .iter()
        .any(|n| n.contains("TRACING_SERVICE_NAME: ignored")));
}
