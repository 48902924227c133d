//! Settings: the command line, where every flag also reads an environment variable (`SLUICE_*`).
//! The hardening flags live in [`hardening`]; the environment variables of envoyproxy/ratelimit
//! are mapped onto these flags by [`ratelimit_env`]; the xDS config source's flags live in [`xds`]. Nothing here imports another layer.

pub(crate) mod hardening;
pub mod ratelimit_env;
pub(crate) mod rlqs;
pub(crate) mod xds;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

pub use crate::rules::duration::parse as parse_duration;
use crate::rules::{ClockSource, FailurePolicy};

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "A rate-limit service for Envoy: speaks the Envoy Rate Limit Service (RLS) v3 gRPC API \
             and reads envoyproxy/ratelimit's YAML configuration.",
    long_about = None,
    after_help = "Examples:\n  sluice serve --config config/\n  sluice check config/\n\nEvery flag can also be set \
                  through the environment variable shown in its help, e.g. SLUICE_GRPC_ADDR=0.0.0.0:9000."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start-up: the size of the serve variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the RLS gRPC API (and the HTTP side port) with the rules in --config.
    Serve(ServeArgs),
    /// Validate config files without serving: prints every error as file:line:column: message
    /// and exits 1, or a one-line summary per domain and exits 0.
    Check(CheckArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Embedded in-memory store: one instance enforces the whole limit.
    Memory,
    /// Redis (standalone, Sentinel or Cluster, per --redis-url): instances share the limit.
    Redis,
}

/// Which rate-limit headers `--response-headers` adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HeaderFormat {
    /// RateLimit-Limit / -Remaining / -Reset of the tightest descriptor (draft 03, as
    /// envoyproxy/ratelimit; names per --header-limit, --header-remaining, --header-reset).
    Legacy,
    /// The RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-10,
    /// one item per limit.
    Ietf,
    /// Both sets.
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// A YAML config file, or a directory whose *.yaml / *.yml files are loaded (dot-files and
    /// Kubernetes `..data` entries skipped). Repeat for several; SLUICE_CONFIG takes a
    /// comma-separated list. Required, unless envoyproxy/ratelimit's RUNTIME_ROOT /
    /// RUNTIME_SUBDIRECTORY / RUNTIME_APPDIRECTORY name the directory, or the rules come over
    /// xDS (--config-xds).
    #[arg(
        long = "config",
        value_name = "PATH",
        env = "SLUICE_CONFIG",
        value_delimiter = ','
    )]
    pub config: Vec<PathBuf>,

    /// Reload when a config file or directory changes (Kubernetes ConfigMap updates
    /// included). SIGHUP reloads either way.
    #[arg(long, env = "SLUICE_WATCH_CONFIG", default_value_t = true, action = ArgAction::Set, value_name = "BOOL")]
    pub watch_config: bool,

    /// Address of the gRPC listener (RLS and grpc.health.v1).
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    pub grpc_addr: SocketAddr,

    /// Threads serving gRPC, each a single-threaded runtime with its own SO_REUSEPORT listener
    /// on --grpc-addr (the kernel spreads connections over them). `0` serves gRPC on the main
    /// multi-threaded runtime instead. Default: the cores available (CPU quota included).
    #[arg(long, env = "SLUICE_GRPC_THREADS", value_name = "N")]
    pub grpc_threads: Option<usize>,

    /// Address of the HTTP side port (/healthcheck, /rlconfig).
    #[arg(long, env = "SLUICE_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,

    /// Where counters live.
    #[arg(long, env = "SLUICE_BACKEND", value_enum, default_value_t = Backend::Memory)]
    pub backend: Backend,

    /// Merge config files that name the same domain instead of rejecting them.
    #[arg(long, env = "SLUICE_MERGE_DOMAINS")]
    pub merge_domains: bool,

    /// Accept a --config that holds no config file (serve no rules) instead of failing the
    /// load, which keeps the rules already running.
    #[arg(long, env = "SLUICE_ALLOW_EMPTY_CONFIG")]
    pub allow_empty_config: bool,

    /// Global shadow mode: an OVER_LIMIT overall answer becomes OK (descriptor statuses keep
    /// their codes, counting goes on).
    #[arg(long, env = "SLUICE_SHADOW_MODE")]
    pub shadow_mode: bool,

    /// Global quota mode: every limited descriptor is in quota mode, as envoyproxy/ratelimit's
    /// QUOTA_MODE (the request is rejected only when a descriptor not in quota mode is over its
    /// limit, or all quota-mode descriptors are).
    #[arg(long, env = "SLUICE_QUOTA_MODE")]
    pub quota_mode: bool,

    /// Charge rejected requests too, as envoyproxy/ratelimit does (the default for rules
    /// without `charge:`). Without it a rejected request consumes nothing.
    #[arg(long, env = "SLUICE_CHARGE_REJECTED")]
    pub charge_rejected: bool,

    /// Take envoyproxy/ratelimit's defaults where sluice's differ: the config directory
    /// `/srv/runtime_data/current/config`, rejected requests charged (unless
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true), the debug port 6070. On when sluice is
    /// invoked as `ratelimit` with no arguments, or takes its config location from RUNTIME_ROOT
    /// / RUNTIME_SUBDIRECTORY / RUNTIME_APPDIRECTORY / CONFIG_TYPE.
    #[arg(long, env = "SLUICE_RATELIMIT_DEFAULTS")]
    pub ratelimit_defaults: bool,

    /// Add rate-limit headers for Envoy to add to the response: RateLimit-Limit / -Remaining /
    /// -Reset from the tightest descriptor unless --response-headers-format says otherwise.
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS")]
    pub response_headers: bool,

    /// Which headers to add: legacy (RateLimit-Limit / -Remaining / -Reset), ietf (the draft-10
    /// RateLimit-Policy and RateLimit fields) or both. Giving it turns headers on, with or
    /// without --response-headers.
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS_FORMAT", value_name = "FORMAT")]
    pub response_headers_format: Option<HeaderFormat>,

    /// Name of the limit header (legacy format).
    #[arg(long, env = "SLUICE_HEADER_LIMIT", default_value = "RateLimit-Limit")]
    pub header_limit: String,

    /// Name of the remaining header (legacy format).
    #[arg(
        long,
        env = "SLUICE_HEADER_REMAINING",
        default_value = "RateLimit-Remaining"
    )]
    pub header_remaining: String,

    /// Name of the reset header (seconds until reset; legacy format).
    #[arg(long, env = "SLUICE_HEADER_RESET", default_value = "RateLimit-Reset")]
    pub header_reset: String,

    /// Prefix of every storage key, so several installations can share one store.
    #[arg(long, env = "SLUICE_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,

    /// Most keys the in-memory store holds; past it, expired keys are reclaimed first and
    /// evictions are logged and counted.
    #[arg(long, env = "SLUICE_MEMORY_MAX_ENTRIES", default_value_t = 1_000_000)]
    pub memory_max_entries: usize,

    /// Most bytes of keys and states the in-memory store holds (estimated); past it, keys are
    /// evicted as past --memory-max-entries.
    #[arg(long, env = "SLUICE_MEMORY_MAX_BYTES", default_value_t = 512 * 1024 * 1024)]
    pub memory_max_bytes: usize,

    /// Largest reservation record of the native API (what Reserve charged, encoded), in bytes,
    /// on every store; a Reserve needing a larger one is refused (RESOURCE_EXHAUSTED) and its
    /// hits given back.
    #[arg(long, env = "SLUICE_MAX_RESERVATION_BYTES", default_value_t = 262_144)]
    pub max_reservation_bytes: usize,

    #[command(flatten)]
    pub hardening: hardening::HardeningArgs,

    #[command(flatten)]
    pub rlqs: rlqs::RlqsArgs,

    #[command(flatten)]
    pub xds: xds::XdsArgs,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// `near_limit` counts hits above this share of a limit (envoyproxy/ratelimit's
    /// NEAR_LIMIT_RATIO).
    #[arg(long, env = "SLUICE_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = parse_ratio)]
    pub near_limit_ratio: f32,

    /// Most per-rule stats keys built from request values (`detailed_metric`,
    /// `value_to_metric`, limit overrides); past it, hits count on the rule's own key.
    #[arg(long, env = "SLUICE_METRICS_MAX_KEYS", default_value_t = 10_000)]
    pub metrics_max_keys: usize,

    /// Push metrics and traces over OTLP/gRPC to this endpoint (e.g. http://collector:4317);
    /// the standard OTEL_* variables apply (OTEL_EXPORTER_OTLP_ENDPOINT alone also turns it on).
    #[arg(long, env = "SLUICE_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// Resource attributes of exported traces beyond `service.name` (from envoyproxy/
    /// ratelimit's TRACING_SERVICE_*; sluice's own are the OTEL_* variables).
    #[arg(skip)]
    pub trace_resource: Vec<(String, String)>,

    /// Share of traces sampled (envoyproxy/ratelimit's TRACING_SAMPLING_RATE); `None`: the
    /// OTEL_TRACES_SAMPLER* variables decide.
    #[arg(skip)]
    pub trace_sampling_rate: Option<f64>,

    /// Also serve /metrics on this address (envoyproxy/ratelimit's PROMETHEUS_ADDR); it is
    /// always on the HTTP port.
    #[arg(long, env = "SLUICE_PROMETHEUS_ADDR", value_name = "ADDR")]
    pub prometheus_addr: Option<SocketAddr>,

    /// Serve --prometheus-addr in envoyproxy/ratelimit's metric names: its statsd names mapped
    /// by this statsd_exporter mapping file (PROMETHEUS_MAPPER_YAML), or `builtin` for its
    /// built-in mapping. The HTTP port's /metrics keeps sluice's names.
    #[arg(
        long,
        env = "SLUICE_PROMETHEUS_STATSD_MAPPER",
        value_name = "PATH",
        requires = "prometheus_addr"
    )]
    pub prometheus_statsd_mapper: Option<String>,

    /// Serve `GET /rlconfig` on this address too, as envoyproxy/ratelimit's debug port
    /// (DEBUG_HOST / DEBUG_PORT, 6070 with --ratelimit-defaults); it is always on the HTTP
    /// port.
    #[arg(long, env = "SLUICE_DEBUG_ADDR", value_name = "ADDR")]
    pub debug_addr: Option<SocketAddr>,

    /// Enable `POST /json` on the HTTP port (the RLS API in JSON, with ?explain=true). Off by
    /// default: whoever reaches it can spend quota.
    #[arg(long, env = "SLUICE_JSON_API")]
    pub json_api: bool,

    /// Report NOT_SERVING while the Redis store is disconnected or its breaker is open. Off by
    /// default: a store outage is the failure policy's business, and failing health would
    /// restart or unready every replica at once.
    #[arg(long, env = "SLUICE_HEALTH_REQUIRES_STORE")]
    pub health_requires_store: bool,

    /// Report SERVING as soon as a config is loaded, before the Redis store can answer (its
    /// connection up and script loaded). Off by default: requests sent at SERVING would meet a
    /// store still connecting and get the failure policy's answer.
    #[arg(long, env = "SLUICE_READY_BEFORE_STORE")]
    pub ready_before_store: bool,

    /// How long SIGTERM waits for in-flight requests before exiting anyway.
    #[arg(long, env = "SLUICE_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    #[command(flatten)]
    pub log: LogArgs,
}

/// Settings of `--backend redis`.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Where Redis is; the scheme chooses the topology: redis:// or rediss:// (TLS) for one
    /// server, redis-sentinel://h:p,h:p?sentinelServiceName=NAME for Sentinel,
    /// redis-cluster://h:p,h:p for Cluster (rediss-sentinel://, rediss-cluster:// with TLS).
    /// user:password@ before the host authenticates (ACL).
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        value_name = "URL"
    )]
    pub redis_url: String,

    /// PEM file of CA certificates to trust for TLS instead of the system's.
    #[arg(long, env = "SLUICE_REDIS_TLS_CA", value_name = "PATH")]
    pub redis_tls_ca: Option<PathBuf>,

    /// PEM client certificate for Redis TLS with client authentication (with --redis-tls-key).
    #[arg(
        long,
        env = "SLUICE_REDIS_TLS_CERT",
        value_name = "PATH",
        requires = "redis_tls_key"
    )]
    pub redis_tls_cert: Option<PathBuf>,

    /// PEM private key of --redis-tls-cert.
    #[arg(
        long,
        env = "SLUICE_REDIS_TLS_KEY",
        value_name = "PATH",
        requires = "redis_tls_cert"
    )]
    pub redis_tls_key: Option<PathBuf>,

    /// ACL user name (instead of one in the URL).
    #[arg(long, env = "SLUICE_REDIS_USERNAME", value_name = "NAME")]
    pub redis_username: Option<String>,

    /// Redis password; prefer the environment variable or --redis-password-file, since a
    /// command line is visible to other local users. Never logged.
    #[arg(
        long,
        env = "SLUICE_REDIS_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        value_parser = hardening::parse_secret,
        conflicts_with = "redis_password_file"
    )]
    pub redis_password: Option<crate::secret::Secret>,

    /// File holding the Redis password (one line; a trailing newline is ignored).
    #[arg(long, env = "SLUICE_REDIS_PASSWORD_FILE", value_name = "PATH")]
    pub redis_password_file: Option<PathBuf>,

    /// Connections to Redis (commands are pipelined on each).
    #[arg(long, env = "SLUICE_REDIS_POOL_SIZE", default_value_t = 4)]
    pub redis_pool_size: usize,

    /// Timeout of connecting (TCP and TLS) to a Redis node.
    #[arg(long, env = "SLUICE_REDIS_CONNECT_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub redis_connect_timeout: Duration,

    /// Timeout of one decision round trip; keep it below Envoy's rate-limit filter timeout
    /// (20ms by default). A request's gRPC deadline, when shorter, wins.
    #[arg(long, env = "SLUICE_REDIS_COMMAND_TIMEOUT", default_value = "15ms", value_parser = parse_duration)]
    pub redis_command_timeout: Duration,

    /// Consecutive Redis failures that open the circuit breaker (calls then fail at once).
    #[arg(long, env = "SLUICE_REDIS_BREAKER_FAILURES", default_value_t = 5)]
    pub redis_breaker_failures: u32,

    /// How often the open breaker PINGs Redis (each primary's, in Cluster); the first answer
    /// closes it, so traffic resumes within this long of Redis answering again.
    #[arg(long, env = "SLUICE_REDIS_BREAKER_BACKOFF", default_value = "20ms", value_parser = parse_duration)]
    pub redis_breaker_backoff: Duration,

    /// Whose clock decides windows.
    #[arg(long, env = "SLUICE_CLOCK", value_enum, default_value_t = ClockSource::Redis)]
    pub clock: ClockSource,

    /// What a request gets when Redis fails or does not answer in time.
    #[arg(long, env = "SLUICE_ON_STORE_ERROR", value_enum, default_value_t = FailurePolicy::Unavailable)]
    pub on_store_error: FailurePolicy,

    /// Keys known to be over their limit are answered without Redis until their retry time:
    /// at most this many keys (0: off). See README "Local over-limit cache".
    #[arg(
        long,
        env = "SLUICE_LOCAL_CACHE",
        default_value_t = 0,
        value_name = "ENTRIES"
    )]
    pub local_cache: usize,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Config files or directories, as for `serve --config`.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Merge files that name the same domain.
    #[arg(long, env = "SLUICE_MERGE_DOMAINS")]
    pub merge_domains: bool,

    /// Accept paths that hold no config file (as for `serve --allow-empty-config`).
    #[arg(long, env = "SLUICE_ALLOW_EMPTY_CONFIG")]
    pub allow_empty_config: bool,

    /// Run the requests in FILE (JSON, as `POST /json` takes them: one per line, or a JSON
    /// array) against the config on a fresh in-memory store, and print each decision.
    #[arg(long, value_name = "FILE")]
    pub requests: Option<PathBuf>,

    /// With --requests: answer as JSON lines instead of text.
    #[arg(long, requires = "requests")]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log filter, e.g. `info` or `sluice=debug`.
    #[arg(long, env = "SLUICE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Log line format.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--prometheus-statsd-mapper` value naming envoyproxy/ratelimit's built-in mapping.
pub const BUILTIN_MAPPER: &str = "builtin";

/// A ratio between 0 and 1.
pub fn parse_ratio(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "invalid ratio '{}' (expected a number from 0 to 1)",
            crate::excerpt::excerpt(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
