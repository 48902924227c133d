//! The config-source variables, through clap as `main` reads them.

use std::path::PathBuf;
use std::time::Duration;

use crate::settings::ratelimit_env::tests::run;

/// Envoy Gateway's ratelimit container, as internal/infrastructure/kubernetes/ratelimit/
/// sets it up.
const ENVOY_GATEWAY: [(&str, &str); 9] = [
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "33554432"),
];

#[test]
fn envoy_gateway_environment_configures_the_xds_source() {
    let (a, notes) = run(&[], &ENVOY_GATEWAY).unwrap();
    let x = &a.xds;
    assert_eq!(x.config_xds.as_deref(), Some("envoy-gateway:18001"));
    assert_eq!(x.xds_node_id, "envoy-ratelimit");
    assert!(x.start_without_config && x.xds_tls);
    assert_eq!(x.xds_tls_cert, Some(PathBuf::from("/certs/tls.crt")));
    assert_eq!(x.xds_tls_key, Some(PathBuf::from("/certs/tls.key")));
    assert_eq!(x.xds_tls_ca, Some(PathBuf::from("/certs/ca.crt")));
    assert_eq!(x.xds_max_message_bytes, 32 << 20);
    assert!(a.config.is_empty());
    assert!(
        notes
            .iter()
            .any(|n| n.contains("xDS from envoy-gateway:18001")),
        "{notes:?}"
    );
}

#[test]
fn xds_variables_keep_their_meaning_or_fail() {
    let xds = ("CONFIG_TYPE", "grpc_xds_sotw");
    // envoyproxy/ratelimit's defaults: localhost:18000, node "default".
    let (a, _) = run(&[], &[xds]).unwrap();
    assert_eq!(a.xds.config_xds.as_deref(), Some("localhost:18000"));
    assert_eq!(a.xds.xds_node_id, "default");
    assert!(!a.xds.start_without_config);

    let (a, notes) = run(
        &[],
        &[
            xds,
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=edge"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:abc"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "cp.internal"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1m"),
            ("XDS_CLIENT_BACKOFF_JITTER", "true"),
        ],
    )
    .unwrap();
    let x = &a.xds;
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        x.xds_node_metadata,
        vec![pair("zone", "a"), pair("team", "edge")]
    );
    assert_eq!(x.xds_headers, vec![pair("x-token", "abc")]);
    assert_eq!(x.xds_tls_server_name.as_deref(), Some("cp.internal"));
    assert_eq!(x.xds_backoff_initial, Duration::from_secs(2));
    assert_eq!(x.xds_backoff_max, Duration::from_secs(60));
    assert!(notes
        .iter()
        .any(|n| n.starts_with("XDS_CLIENT_BACKOFF_JITTER: ignored")));

    // sluice's own flags win.
    let (a, _) = run(
        &["--config-xds", "cp:1", "--xds-node-id", "mine"],
        &ENVOY_GATEWAY,
    )
    .unwrap();
    assert_eq!(a.xds.config_xds.as_deref(), Some("cp:1"));
    assert_eq!(a.xds.xds_node_id, "mine");

    for bad in [
        vec![("CONFIG_TYPE", "GRPC_XDS_DELTA")],
        vec![xds, ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem")],
        vec![xds, ("CONFIG_GRPC_XDS_NODE_METADATA", "novalue")],
        vec![xds, ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "big")],
        vec![xds, ("FORCE_START_WITHOUT_INITIAL_CONFIG", "perhaps")],
    ] {
        assert!(run(&[], &bad).is_err(), "{bad:?}");
    }
    // FILE keeps the file config; FORCE_START applies to it too.
    let (a, _) = run(
        &["--config", "/c"],
        &[
            ("CONFIG_TYPE", "FILE"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "1"),
        ],
    )
    .unwrap();
    assert!(a.xds.config_xds.is_none() && a.xds.start_without_config);
}
