//! envoyproxy/ratelimit's environment variables, read with their meaning there, so moving to
//! sluice is a change of image. A setting given to sluice itself (flag or `SLUICE_*`
//! variable) wins. Variables that cannot keep their meaning either fail start-up (when
//! ignoring them would change decisions, e.g. `BACKEND_TYPE=memcache`) or are reported as
//! ignored. README.md ("Moving from envoyproxy/ratelimit") has the table.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::{Backend, LogFormat, ServeArgs, BUILTIN_MAPPER};

/// envoyproxy/ratelimit's defaults for the config location.
const RUNTIME_ROOT_DEFAULT: &str = "/srv/runtime_data/current";
const RUNTIME_APPDIRECTORY_DEFAULT: &str = "config";

/// Variables read only to say they are ignored, and why.
const IGNORED: [(&str, &str); 12] = [
    (
        "RUNTIME_WATCH_ROOT",
        "sluice watches the config directory and its parent",
    ),
    ("RUNTIME_IGNOREDOTFILES", "sluice always skips dot-files"),
    (
        "REDIS_PIPELINE_WINDOW",
        "commands are pipelined automatically",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "commands are pipelined automatically",
    ),
    ("REDIS_PERSECOND", "one Redis holds every limit"),
    (
        "REDIS_SENTINEL_AUTH",
        "REDIS_AUTH authenticates with the sentinels too",
    ),
    (
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "certificates are always verified",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "the local over-limit cache is sized in keys: set --local-cache (SLUICE_LOCAL_CACHE)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire when their state no longer matters",
    ),
    (
        "RESPONSE_DYNAMIC_METADATA",
        "metadata is always returned when there is any",
    ),
    (
        "USE_CALENDAR_MONTH_RATE_LIMIT",
        "use `align: calendar` on the month limits instead",
    ),
    ("PROMETHEUS_PATH", "the path is always /metrics"),
];

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{name}={v}: expected true or false")),
    }
}

/// `host:port` to an address (`:9090` and an empty host mean every interface).
fn addr(name: &str, host: &str, port: &str) -> Result<SocketAddr, String> {
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("{host}:{port}")
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{name}: cannot resolve {host}:{port}"))
}

/// Percent-encodes URL userinfo.
fn userinfo(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// sluice's `--redis-url` from REDIS_TYPE, REDIS_URL, REDIS_AUTH and REDIS_TLS.
fn redis_url(kind: &str, hosts: &str, auth: Option<&str>, tls: bool) -> Result<String, String> {
    let s = if tls { "s" } else { "" };
    let cred = match auth {
        None | Some("") => String::new(),
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", userinfo(user), userinfo(pass)),
            None => format!(":{}@", userinfo(a)),
        },
    };
    match kind.to_ascii_uppercase().as_str() {
        "" | "SINGLE" => Ok(format!("redis{s}://{cred}{hosts}")),
        "CLUSTER" => Ok(format!("redis{s}-cluster://{cred}{hosts}")),
        "SENTINEL" => {
            // REDIS_URL is `master-name,host:port,host:port` there.
            let (master, nodes) = hosts.split_once(',').ok_or_else(|| {
                format!("REDIS_URL={hosts}: with REDIS_TYPE=sentinel, expected master-name,host:port[,host:port...]")
            })?;
            Ok(format!(
                "redis{s}-sentinel://{cred}{nodes}?sentinelServiceName={master}"
            ))
        }
        other => Err(format!(
            "REDIS_TYPE={other}: expected single, sentinel or cluster"
        )),
    }
}

/// Applies the envoyproxy/ratelimit variables `env` holds to `args` wherever sluice's own
/// setting is not given (per `m`, the matches `args` came from). Returns what to log about
/// them; an error when one cannot be honoured or no config location is known.
pub fn apply(
    args: &mut ServeArgs,
    m: &ArgMatches,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, String> {
    let unset = |id: &str| matches!(m.value_source(id), None | Some(ValueSource::DefaultValue));
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let flag = |name: &str| var(name).map(|v| parse_bool(name, &v)).transpose();
    let mut notes = Vec::new();
    let mut used = |name: &str, what: String| notes.push(format!("{name}: {what}"));

    // Listeners.
    if unset("grpc_addr") && (var("GRPC_PORT").is_some() || var("GRPC_HOST").is_some()) {
        let host = var("GRPC_HOST").unwrap_or_default();
        let port = var("GRPC_PORT").unwrap_or_else(|| "8081".into());
        args.grpc_addr = addr("GRPC_HOST/GRPC_PORT", &host, &port)?;
        used("GRPC_PORT", format!("gRPC on {}", args.grpc_addr));
    }
    if unset("http_addr") && (var("PORT").is_some() || var("HOST").is_some()) {
        let host = var("HOST").unwrap_or_default();
        let port = var("PORT").unwrap_or_else(|| "8080".into());
        args.http_addr = addr("HOST/PORT", &host, &port)?;
        used("PORT", format!("HTTP on {}", args.http_addr));
    }

    // Config source: CONFIG_TYPE and the xDS client's variables (their own module).
    let xds_notes = xds::apply(args, m, env)?;

    let as_ratelimit = gateway::runs_as_ratelimit(args, &var);
    // Config location: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY.
    if args.config.is_empty() && args.xds.config_xds.is_none() {
        let root = var("RUNTIME_ROOT");
        let sub = var("RUNTIME_SUBDIRECTORY");
        let app = var("RUNTIME_APPDIRECTORY");
        if root.is_none() && sub.is_none() && app.is_none() && !args.ratelimit_defaults {
            return Err("no config: pass --config PATH (or SLUICE_CONFIG) or --config-xds URL, or set RUNTIME_ROOT and RUNTIME_SUBDIRECTORY (or CONFIG_TYPE=GRPC_XDS_SOTW) as for envoyproxy/ratelimit".into());
        }
        let mut dir = PathBuf::from(root.unwrap_or_else(|| RUNTIME_ROOT_DEFAULT.into()));
        if let Some(sub) = sub {
            dir.push(sub);
        }
        dir.push(app.unwrap_or_else(|| RUNTIME_APPDIRECTORY_DEFAULT.into()));
        used("RUNTIME_ROOT", format!("config from {}", dir.display()));
        args.config = vec![dir];
    }

    // Backend.
    if unset("backend") {
        match var("BACKEND_TYPE").map(|b| b.to_ascii_lowercase()).as_deref() {
            Some("redis") => args.backend = Backend::Redis,
            Some("memcache") => {
                return Err("BACKEND_TYPE=memcache: Memcached is not supported (use redis, or sluice's in-memory store)".into())
            }
            Some(other) => return Err(format!("BACKEND_TYPE={other}: expected redis")),
            // envoyproxy/ratelimit's default backend is Redis: REDIS_URL alone means it.
            None if var("REDIS_URL").is_some() => {
                args.backend = Backend::Redis;
                used("REDIS_URL", "backend redis (envoyproxy/ratelimit's default BACKEND_TYPE)".into());
            }
            None => {}
        }
    }
    if let Some(t) = var("REDIS_SOCKET_TYPE") {
        if !t.eq_ignore_ascii_case("tcp") {
            return Err(format!(
                "REDIS_SOCKET_TYPE={t}: only tcp is supported (no unix sockets)"
            ));
        }
    }
    if unset("redis_url") {
        if let Some(hosts) = var("REDIS_URL") {
            let tls = flag("REDIS_TLS")?.unwrap_or(false);
            let kind = var("REDIS_TYPE").unwrap_or_default();
            args.redis.redis_url = redis_url(&kind, &hosts, var("REDIS_AUTH").as_deref(), tls)?;
        }
    }
    if unset("redis_tls_ca") {
        if let Some(ca) = var("REDIS_TLS_CACERT") {
            args.redis.redis_tls_ca = Some(ca.into());
        }
    }
    // A client certificate is a pair: sluice's flags require each other, so one half alone
    // is an error rather than a certificate silently not presented.
    if unset("redis_tls_cert") && unset("redis_tls_key") {
        match (var("REDIS_TLS_CLIENT_CERT"), var("REDIS_TLS_CLIENT_KEY")) {
            (Some(cert), Some(key)) => {
                args.redis.redis_tls_cert = Some(cert.into());
                args.redis.redis_tls_key = Some(key.into());
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(
                    "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: set both or neither".into(),
                )
            }
            (None, None) => {}
        }
    }
    if unset("redis_pool_size") {
        if let Some(n) = var("REDIS_POOL_SIZE") {
            args.redis.redis_pool_size = n
                .parse()
                .map_err(|_| format!("REDIS_POOL_SIZE={n}: expected a number"))?;
        }
    }

    // Decisions and responses.
    if unset("key_prefix") {
        if let Some(p) = var("CACHE_KEY_PREFIX") {
            args.key_prefix = p;
        }
    }
    let switches: [(&str, &str, &mut bool); 4] = [
        (
            "LIMIT_RESPONSE_HEADERS_ENABLED",
            "response_headers",
            &mut args.response_headers,
        ),
        ("SHADOW_MODE", "shadow_mode", &mut args.shadow_mode),
        ("QUOTA_MODE", "quota_mode", &mut args.quota_mode),
        (
            "MERGE_DOMAIN_CONFIG",
            "merge_domains",
            &mut args.merge_domains,
        ),
    ];
    for (name, id, field) in switches {
        if unset(id) {
            if let Some(b) = flag(name)? {
                *field = b;
            }
        }
    }
    for (name, id, field) in [
        ("LIMIT_LIMIT_HEADER", "header_limit", &mut args.header_limit),
        (
            "LIMIT_REMAINING_HEADER",
            "header_remaining",
            &mut args.header_remaining,
        ),
        ("LIMIT_RESET_HEADER", "header_reset", &mut args.header_reset),
    ] {
        if unset(id) {
            if let Some(v) = var(name) {
                *field = v;
            }
        }
    }
    // false (their default) counts every request, rejected ones too: --charge-rejected.
    // true stops counting once over the limit: sluice's default, which charges nothing for a
    // rejected request. Unset, their default applies when sluice runs as envoyproxy/ratelimit
    // (see `gateway::runs_as_ratelimit`): a usage charge sent at stream end must count even
    // past the limit, or token budgets under-count.
    if unset("charge_rejected") {
        match flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? {
            Some(stop) => args.charge_rejected = !stop,
            None if as_ratelimit => {
                args.charge_rejected = true;
                used(
                    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
                    "unset: envoyproxy/ratelimit's default (false), rejected requests are charged (--charge-rejected)".into(),
                );
            }
            None => {}
        }
    }
    if unset("near_limit_ratio") {
        if let Some(r) = var("NEAR_LIMIT_RATIO") {
            args.near_limit_ratio =
                super::parse_ratio(&r).map_err(|e| format!("NEAR_LIMIT_RATIO: {e}"))?;
        }
    }

    // Logs and metrics.
    if unset("log_level") {
        if let Some(l) = var("LOG_LEVEL") {
            args.log.log_level = match l.to_ascii_lowercase().as_str() {
                "fatal" | "panic" => "error".into(),
                "warning" => "warn".into(),
                other => other.into(),
            };
        }
    }
    if unset("log_format") {
        match var("LOG_FORMAT").map(|f| f.to_ascii_lowercase()).as_deref() {
            Some("json") => args.log.log_format = LogFormat::Json,
            Some("text") => args.log.log_format = LogFormat::Text,
            Some(other) => return Err(format!("LOG_FORMAT={other}: expected text or json")),
            None => {}
        }
    }
    if unset("prometheus_addr") && flag("USE_PROMETHEUS")? == Some(true) {
        let a = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let (host, port) = a
            .rsplit_once(':')
            .ok_or_else(|| format!("PROMETHEUS_ADDR={a}: expected host:port"))?;
        args.prometheus_addr = Some(addr(
            "PROMETHEUS_ADDR",
            host.trim_matches(['[', ']']),
            port,
        )?);
        // Their names there: PROMETHEUS_MAPPER_YAML, or their built-in mapping.
        if unset("prometheus_statsd_mapper") {
            args.prometheus_statsd_mapper =
                Some(var("PROMETHEUS_MAPPER_YAML").unwrap_or_else(|| BUILTIN_MAPPER.into()));
        }
    }
    if flag("USE_STATSD")? == Some(true) {
        used(
            "USE_STATSD",
            "ignored: statsd is not offered; scrape /metrics or set --otlp-endpoint".into(),
        );
    }
    if unset("otlp_endpoint") {
        if let Some(e) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            args.otlp_endpoint = Some(e);
        }
    }
    for (name, why) in IGNORED {
        if var(name).is_some() {
            used(name, format!("ignored: {why}"));
        }
    }
    gateway::apply(args, &unset, &var, as_ratelimit, &mut notes)?;
    notes.extend(xds_notes);
    Ok(notes)
}

pub mod gateway;
mod xds;

#[cfg(test)]
mod tests;
