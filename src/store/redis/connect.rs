//! From `--redis-url` and friends to a fred client pool.
//!
//! The URL's scheme chooses the topology: `redis://` / `rediss://` (standalone, TLS),
//! `redis-sentinel://h:p,h:p?sentinelServiceName=name` (Sentinel),
//! `redis-cluster://h:p,h:p` (Cluster); `rediss-` variants use TLS. Credentials
//! (`user:password@`) authenticate with ACL; `--redis-username` and a password from
//! `SLUICE_REDIS_PASSWORD` or `--redis-password-file` take precedence over the URL's, so the
//! password need not be in the URL. The password is never logged (it is a [`Secret`]). With
//! TLS, a custom CA and a client certificate (Redis `tls-auth-clients yes`) may be given.
//! Several comma-separated hosts become fred's `node=` query parameters.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, Config, Pool, ReconnectPolicy, ServerConfig, TlsConnector};

use crate::secret::Secret;

/// How the store reaches Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Sentinel,
    Cluster,
}

/// Connection settings (the `--redis-*` flags).
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub url: String,
    /// PEM file of CA certificates to trust instead of the system's (TLS URLs only).
    pub tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate and key for TLS client authentication (TLS URLs only).
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// ACL user name; overrides the URL's.
    pub username: Option<String>,
    /// Password; overrides the URL's.
    pub password: Option<Secret>,
    /// File holding the password (trailing newline ignored); overrides the URL's.
    pub password_file: Option<PathBuf>,
    pub pool_size: usize,
    /// TCP connect plus TLS handshake, and the connection's own commands (AUTH, CLUSTER SLOTS).
    pub connect_timeout: Duration,
}

impl ConnectOptions {
    /// `url` with nothing else set: no TLS files or credentials beyond the URL's, one pooled
    /// connection, a one-second connect timeout (tools and tests).
    pub fn for_url(url: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            url: url.into(),
            tls_ca: None,
            tls_client: None,
            username: None,
            password: None,
            password_file: None,
            pool_size: 1,
            connect_timeout: Duration::from_secs(1),
        }
    }
}

/// A configuration error: the settings can never work, so start-up fails.
#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct RedisSettingsError(String);

impl RedisSettingsError {
    pub fn new(message: impl Into<String>) -> Self {
        RedisSettingsError(message.into())
    }
}

/// Rewrites `scheme://[cred@]h1:p1,h2:p2[/db][?q]` into fred's `scheme://[cred@]h1:p1[/db]?node=h2:p2[&q]`.
pub(crate) fn normalize_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let (cred, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let mut hosts = hosts.split(',').filter(|h| !h.is_empty());
    let Some(first) = hosts.next() else {
        return url.to_string();
    };
    let nodes: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
    if nodes.is_empty() {
        return url.to_string();
    }
    let (path, query) = match tail.find('?') {
        Some(q) => (&tail[..q], &tail[q + 1..]),
        None => (tail, ""),
    };
    let mut query_parts = nodes;
    if !query.is_empty() {
        query_parts.push(query.to_string());
    }
    format!(
        "{}{cred}{first}{path}?{}",
        &url[..scheme_end + 3],
        query_parts.join("&")
    )
}

fn uses_tls(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or("");
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// Builds the client pool (not connected yet) and tells its topology.
pub(crate) fn build_pool(opts: &ConnectOptions) -> Result<(Pool, Topology), RedisSettingsError> {
    let (builder, topology) = builder(opts)?;
    let pool = builder
        .build_pool(opts.pool_size.max(1))
        .map_err(|e| RedisSettingsError(e.details().to_string()))?;
    Ok((pool, topology))
}

/// The nodes named by a Cluster URL (where the slot map is first read).
pub(crate) fn cluster_seeds(
    opts: &ConnectOptions,
) -> Result<Vec<(String, u16)>, RedisSettingsError> {
    match config(opts)?.0.server {
        ServerConfig::Clustered { hosts, .. } => Ok(hosts
            .into_iter()
            .map(|s| (s.host.to_string(), s.port))
            .collect()),
        _ => Err(RedisSettingsError("not a Cluster URL".into())),
    }
}

/// A pool (not connected yet) to one node of a Cluster, as a plain server: sluice routes by
/// slot itself ([`super::nodes`]), so one node's trouble never blocks the others' commands.
pub(crate) fn build_node_pool(
    opts: &ConnectOptions,
    host: &str,
    port: u16,
) -> Result<Pool, RedisSettingsError> {
    let (mut config, _) = config(opts)?;
    config.server = ServerConfig::new_centralized(host, port);
    configure(Builder::from_config(config), opts)
        .build_pool(opts.pool_size.max(1))
        .map_err(|e| RedisSettingsError(e.details().to_string()))
}

fn builder(opts: &ConnectOptions) -> Result<(Builder, Topology), RedisSettingsError> {
    let (config, topology) = config(opts)?;
    Ok((configure(Builder::from_config(config), opts), topology))
}

/// The fred configuration the URL and flags describe.
pub(super) fn config(opts: &ConnectOptions) -> Result<(Config, Topology), RedisSettingsError> {
    let url = normalize_url(&opts.url);
    let mut config = Config::from_url(&url)
        .map_err(|e| RedisSettingsError(format!("invalid --redis-url: {}", e.details())))?;
    let topology = match &config.server {
        ServerConfig::Centralized { .. } => Topology::Standalone,
        ServerConfig::Clustered { .. } => Topology::Cluster,
        ServerConfig::Sentinel { .. } => Topology::Sentinel,
        #[allow(unreachable_patterns)]
        _ => return Err(RedisSettingsError("unsupported --redis-url".into())),
    };
    if (opts.tls_ca.is_some() || opts.tls_client.is_some()) && !uses_tls(&opts.url) {
        return Err(RedisSettingsError(
            "--redis-tls-ca and --redis-tls-cert need a TLS URL (rediss://, rediss-cluster://, rediss-sentinel://)"
                .into(),
        ));
    }
    if opts.tls_ca.is_some() || opts.tls_client.is_some() {
        config.tls = Some(tls_config(opts.tls_ca.as_deref(), opts.tls_client.as_ref())?.into());
    }
    if let Some(user) = &opts.username {
        config.username = Some(user.clone());
    }
    if let Some(password) = password(opts)? {
        config.password = Some(password.expose().to_string());
    }
    // A start with Redis down must not fail: connect in the background and keep retrying.
    config.fail_fast = false;
    Ok((config, topology))
}

/// The connection settings every client gets.
fn configure(mut builder: Builder, opts: &ConnectOptions) -> Builder {
    builder
        .with_connection_config(|c| {
            c.connection_timeout = opts.connect_timeout;
            c.internal_command_timeout = opts.connect_timeout.max(Duration::from_millis(100));
            // An EVALSHA whose connection dropped may have run: never send it twice.
            c.max_command_attempts = 1;
            // A stalled server is noticed and the connection replaced.
            c.unresponsive.max_timeout = Some(opts.connect_timeout.max(Duration::from_secs(1)));
            c.unresponsive.interval = Duration::from_millis(250);
        })
        // Capped low: a restarted Redis is found within a quarter second, not after a
        // back-off grown during the outage.
        .set_policy(ReconnectPolicy::new_exponential(0, 20, 250, 2));
    builder
}

/// The password from `--redis-password` / `SLUICE_REDIS_PASSWORD` or `--redis-password-file`.
fn password(opts: &ConnectOptions) -> Result<Option<Secret>, RedisSettingsError> {
    if let Some(p) = &opts.password {
        return Ok(Some(p.clone()));
    }
    let Some(path) = &opts.password_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        RedisSettingsError(format!(
            "cannot read --redis-password-file {}: {e}",
            path.display()
        ))
    })?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Ok(Some(Secret::new(text)))
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, RedisSettingsError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
        RedisSettingsError(format!(
            "cannot read --redis-tls-ca {}: {e}",
            path.display()
        ))
    })?;
    for cert in certs {
        let cert = cert.map_err(|e| {
            RedisSettingsError(format!(
                "invalid PEM in --redis-tls-ca {}: {e}",
                path.display()
            ))
        })?;
        roots.add(cert).map_err(|e| {
            RedisSettingsError(format!("invalid CA certificate in {}: {e}", path.display()))
        })?;
    }
    if roots.is_empty() {
        return Err(RedisSettingsError(format!(
            "--redis-tls-ca {}: no certificate found",
            path.display()
        )));
    }
    Ok(roots)
}

/// A rustls client config trusting the custom CA, with the client certificate if any.
fn tls_config(
    ca: Option<&Path>,
    client: Option<&(PathBuf, PathBuf)>,
) -> Result<TlsConnector, RedisSettingsError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    // fred's own TLS default (system roots) cannot carry a client certificate: with one, the
    // CA that signed the server's certificate must be named too.
    let Some(ca) = ca else {
        return Err(RedisSettingsError(
            "--redis-tls-cert needs --redis-tls-ca (the CA that signed the Redis server's certificate)"
                .into(),
        ));
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RedisSettingsError(format!("TLS: {e}")))?
        .with_root_certificates(roots(ca)?);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| {
                    RedisSettingsError(format!(
                        "cannot read --redis-tls-cert {}: {e}",
                        cert.display()
                    ))
                })?;
            if chain.is_empty() {
                return Err(RedisSettingsError(format!(
                    "--redis-tls-cert {}: no certificate found",
                    cert.display()
                )));
            }
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                RedisSettingsError(format!(
                    "cannot read --redis-tls-key {}: {e}",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                RedisSettingsError(format!("--redis-tls-cert / --redis-tls-key: {e}"))
            })?
        }
    };
    Ok(TlsConnector::from(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comma_separated_hosts_become_nodes() {
        assert_eq!(
            normalize_url("redis-cluster://u:p@a:1,b:2,c:3"),
            "redis-cluster://u:p@a:1?node=b:2&node=c:3"
        );
        assert_eq!(
            normalize_url("redis-sentinel://a:1,b:2/0?sentinelServiceName=m"),
            "redis-sentinel://a:1/0?node=b:2&sentinelServiceName=m"
        );
        assert_eq!(normalize_url("redis://h:1/2"), "redis://h:1/2");
    }

    fn opts(url: &str) -> ConnectOptions {
        ConnectOptions::for_url(url)
    }

    #[test]
    fn scheme_chooses_topology() {
        let t = |u: &str| build_pool(&opts(u)).map(|(_, t)| t).unwrap();
        assert_eq!(t("redis://127.0.0.1:7000"), Topology::Standalone);
        assert_eq!(
            t("redis-cluster://127.0.0.1:7000,127.0.0.1:7001"),
            Topology::Cluster
        );
        assert_eq!(
            t("redis-sentinel://127.0.0.1:26379?sentinelServiceName=m"),
            Topology::Sentinel
        );
        assert!(build_pool(&opts("redis-sentinel://127.0.0.1:26379")).is_err());
        let mut o = opts("redis://127.0.0.1:7000");
        o.tls_ca = Some("/nonexistent".into());
        assert!(build_pool(&o).is_err(), "a CA needs a TLS URL");
    }
}
