//! Command-line settings of the xDS config source (flattened into `sluice serve`): rules from
//! a control plane over ADS instead of `--config`, as envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` (whose variables [`super::ratelimit_env`] maps onto these).
//! README.md ("Envoy Gateway") explains them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use crate::rules::duration::parse as parse_duration;

#[derive(Debug, Clone, Args)]
pub struct XdsArgs {
    /// Take the rules from this xDS control plane (state-of-the-world ADS, resources of type
    /// ratelimit.config.ratelimit.v3.RateLimitConfig) instead of --config: host:port, or an
    /// http:// or https:// URL. Every snapshot accepted replaces the rules whole; one that
    /// does not validate is NACKed and the running rules stay.
    #[arg(
        long,
        env = "SLUICE_CONFIG_XDS",
        value_name = "URL",
        conflicts_with = "config"
    )]
    pub config_xds: Option<String>,

    /// The node id sent to the control plane (Envoy Gateway: envoy-ratelimit; Envoy AI
    /// Gateway: envoy-ai-gateway-ratelimit).
    #[arg(long, env = "SLUICE_XDS_NODE_ID", default_value = "default")]
    pub xds_node_id: String,

    /// Node metadata, as key=value pairs (comma-separated).
    #[arg(long, env = "SLUICE_XDS_NODE_METADATA", value_name = "KEY=VALUE", value_delimiter = ',', value_parser = parse_pair)]
    pub xds_node_metadata: Vec<(String, String)>,

    /// gRPC headers sent with the stream, as key=value pairs (comma-separated).
    #[arg(long, env = "SLUICE_XDS_HEADERS", value_name = "KEY=VALUE", value_delimiter = ',', value_parser = parse_pair)]
    pub xds_headers: Vec<(String, String)>,

    /// Connect to the control plane over TLS (implied by an https:// URL); needs --xds-tls-ca.
    #[arg(long, env = "SLUICE_XDS_TLS", default_value_t = false, action = ArgAction::Set, value_name = "BOOL")]
    pub xds_tls: bool,

    /// PEM CA certificates that sign the control plane's certificate. Read at every connect.
    #[arg(long, env = "SLUICE_XDS_TLS_CA", value_name = "PATH")]
    pub xds_tls_ca: Option<PathBuf>,

    /// PEM client certificate for a control plane that requires one (with --xds-tls-key).
    /// Read at every connect, so a rotated certificate is used from the next connection on.
    #[arg(
        long,
        env = "SLUICE_XDS_TLS_CERT",
        value_name = "PATH",
        requires = "xds_tls_key"
    )]
    pub xds_tls_cert: Option<PathBuf>,

    /// PEM private key of --xds-tls-cert.
    #[arg(
        long,
        env = "SLUICE_XDS_TLS_KEY",
        value_name = "PATH",
        requires = "xds_tls_cert"
    )]
    pub xds_tls_key: Option<PathBuf>,

    /// The name the control plane's certificate must carry (default: the URL's host).
    #[arg(long, env = "SLUICE_XDS_TLS_SERVER_NAME", value_name = "NAME")]
    pub xds_tls_server_name: Option<String>,

    /// Largest xDS response accepted, in bytes (a snapshot is one response; Envoy Gateway's
    /// exceed gRPC's default 4 MiB).
    #[arg(
        long,
        env = "SLUICE_XDS_MAX_MESSAGE_BYTES",
        default_value_t = 16 << 20,
        value_name = "BYTES"
    )]
    pub xds_max_message_bytes: usize,

    /// Timeout of connecting (TCP and TLS) to the control plane.
    #[arg(long, env = "SLUICE_XDS_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub xds_connect_timeout: Duration,

    /// First delay before reconnecting to the control plane; doubled after each failure up to
    /// --xds-backoff-max, each jittered by ±50%. The running rules stay meanwhile.
    #[arg(long, env = "SLUICE_XDS_BACKOFF_INITIAL", default_value = "500ms", value_parser = parse_duration)]
    pub xds_backoff_initial: Duration,

    /// Longest delay between reconnect attempts.
    #[arg(long, env = "SLUICE_XDS_BACKOFF_MAX", default_value = "30s", value_parser = parse_duration)]
    pub xds_backoff_max: Duration,

    /// Report SERVING before the first config is loaded (answering with no rules
    /// meanwhile), as envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG. Without it,
    /// health stays NOT_SERVING until a config (file or xDS snapshot) is loaded.
    #[arg(long, env = "SLUICE_START_WITHOUT_CONFIG")]
    pub start_without_config: bool,
}

/// `key=value`.
pub(crate) fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("'{s}': expected key=value")),
    }
}
