//! Command-line settings of the hardening features: request limits, overload protection,
//! HTTP/2 connection settings and TLS of the gRPC listener (flattened into `sluice serve`).
//! SECURITY.md explains every default.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::rules::duration::parse as parse_duration;
use crate::secret::Secret;

#[derive(Debug, Clone, Args)]
pub struct HardeningArgs {
    /// Largest encoded RateLimitRequest accepted, in bytes; a larger one is refused before it is
    /// decoded (INVALID_ARGUMENT).
    #[arg(long, env = "SLUICE_MAX_REQUEST_BYTES", default_value_t = 262_144)]
    pub max_request_bytes: usize,

    /// Most descriptors in one request.
    #[arg(long, env = "SLUICE_MAX_DESCRIPTORS", default_value_t = 64)]
    pub max_descriptors: usize,

    /// Most entries in one descriptor.
    #[arg(long, env = "SLUICE_MAX_ENTRIES", default_value_t = 32)]
    pub max_entries: usize,

    /// Longest descriptor entry key, in bytes.
    #[arg(long, env = "SLUICE_MAX_KEY_BYTES", default_value_t = 256)]
    pub max_key_bytes: usize,

    /// Longest descriptor entry value, in bytes (above Envoy's default 60 KiB header limit,
    /// so no header value Envoy forwards is refused).
    #[arg(long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = 65_536)]
    pub max_value_bytes: usize,

    /// Longest domain, in bytes.
    #[arg(long, env = "SLUICE_MAX_DOMAIN_BYTES", default_value_t = 256)]
    pub max_domain_bytes: usize,

    /// Most RLS requests being decided at once; beyond it a request gets RESOURCE_EXHAUSTED at
    /// once instead of waiting in a queue.
    #[arg(long, env = "SLUICE_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub max_in_flight: usize,

    /// Time for a gRPC request to arrive whole after its headers; a stream still unfinished
    /// then ends with DEADLINE_EXCEEDED. A request takes an in-flight slot only once whole.
    #[arg(long, env = "SLUICE_GRPC_REQUEST_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub grpc_request_read_timeout: Duration,

    /// Most concurrent HTTP/2 streams per gRPC connection.
    #[arg(
        long,
        env = "SLUICE_GRPC_MAX_CONCURRENT_STREAMS",
        default_value_t = 1024
    )]
    pub grpc_max_concurrent_streams: u32,

    /// Interval of HTTP/2 keep-alive pings on idle gRPC connections (`0` turns them off).
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub grpc_keepalive_interval: Duration,

    /// How long a keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub grpc_keepalive_timeout: Duration,

    /// Age after which a gRPC connection is asked to close (GOAWAY), so long-lived Envoy
    /// connections rebalance over instances (`0`: never).
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTION_AGE", default_value = "24h", value_parser = parse_duration)]
    pub grpc_max_connection_age: Duration,

    /// How long a connection past its age may finish its requests before it is closed.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE", default_value = "1h", value_parser = parse_duration)]
    pub grpc_max_connection_age_grace: Duration,

    /// Most open connections on the gRPC port (over every `--grpc-threads` listener); a
    /// connection beyond it is closed at once.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTIONS", default_value_t = 4096)]
    pub grpc_max_connections: usize,

    /// A gRPC connection on which no stream has been open for this long is closed (`0`:
    /// never), whatever else it sends (pings, WINDOW_UPDATEs); connections carrying requests
    /// stay.
    #[arg(long, env = "SLUICE_GRPC_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub grpc_idle_timeout: Duration,

    /// Time for a plain gRPC connection's HTTP/2 preface and first SETTINGS frame to arrive;
    /// a client that connects and sends nothing is disconnected then (`0`: no limit).
    #[arg(long, env = "SLUICE_GRPC_PREFACE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub grpc_preface_timeout: Duration,

    /// Most open connections on the HTTP port (and on `--prometheus-addr`).
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    pub http_max_connections: usize,

    /// An HTTP connection on which no request has been open for this long is closed (`0`:
    /// never): idle keep-alive connections, and clients that connect and send no request.
    #[arg(long, env = "SLUICE_HTTP_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,

    /// Time for an HTTP/1 request's headers to arrive whole on the HTTP ports; a client still
    /// sending them then (slowloris) is disconnected (`0`: no limit).
    #[arg(long, env = "SLUICE_HTTP_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_header_read_timeout: Duration,

    /// Time for a request body to arrive whole on the HTTP port after its headers; a body
    /// still incomplete then (dribbled, or never sent) gets 408 and the connection is closed
    /// (`0`: no limit).
    #[arg(long, env = "SLUICE_HTTP_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_body_timeout: Duration,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS of the gRPC listener.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// PEM certificate chain of the gRPC listener: with --grpc-tls-key, gRPC speaks TLS only.
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CERT",
        value_name = "PATH",
        requires = "grpc_tls_key"
    )]
    pub grpc_tls_cert: Option<PathBuf>,

    /// PEM private key of --grpc-tls-cert.
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_KEY",
        value_name = "PATH",
        requires = "grpc_tls_cert"
    )]
    pub grpc_tls_key: Option<PathBuf>,

    /// PEM CA certificates that sign client certificates: with it, every client must present
    /// a certificate (mutual TLS).
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CLIENT_CA",
        value_name = "PATH",
        requires = "grpc_tls_cert"
    )]
    pub grpc_tls_client_ca: Option<PathBuf>,

    /// A DNS name or IP address a client certificate must be valid for (repeat, or
    /// comma-separated in the environment); without it any certificate of the client CA passes.
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_ALLOWED_SAN",
        value_name = "NAME",
        value_delimiter = ',',
        requires = "grpc_tls_client_ca"
    )]
    pub grpc_tls_allowed_san: Vec<String>,

    /// How often the certificate, key and client CA files are checked for changes (a change
    /// applies to new connections; open ones are kept).
    #[arg(long, env = "SLUICE_GRPC_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub grpc_tls_reload_interval: Duration,
}

/// clap parser of a [`Secret`].
pub(crate) fn parse_secret(s: &str) -> Result<Secret, String> {
    Ok(Secret::new(s))
}
