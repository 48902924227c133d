//! From `--redis-url` and friends to what a link dials ([`Config`]).
//!
//! The URL's scheme chooses the topology: `redis://` / `rediss://` (standalone, TLS),
//! `redis-sentinel://h:p,h:p?sentinelServiceName=name` (Sentinel),
//! `redis-cluster://h:p,h:p` (Cluster); `rediss-` variants use TLS. Credentials
//! (`user:password@`) authenticate with ACL; `--redis-username` and a password from
//! `SLUICE_REDIS_PASSWORD` or `--redis-password-file` take precedence over the URL's, so the
//! password need not be in the URL. The password is never logged (it is a [`Secret`]). With
//! TLS, a custom CA and a client certificate (Redis `tls-auth-clients yes`) may be given.
//! Several comma-separated hosts become `node=` query parameters (the URL forms fred, the
//! client sluice used before its own, accepted; they are accepted alike, see the tests):
//! `scheme://[user[:password]@]host[:port][/db][?node=h:p&...]`, with
//! `sentinelServiceName`, `sentinelUsername` and `sentinelPassword` for Sentinel.

use std::path::PathBuf;
use std::time::Duration;

use tokio_rustls::TlsConnector;

use crate::secret::Secret;

use self::tls::tls_config;
use self::url::{normalize_url, parse_url, uses_tls};

mod tls;
mod url;

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
    /// `url` with nothing else set: no TLS files or credentials beyond the URL's, one shared
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

/// Where the store connects, with what credentials and TLS: the URL and flags read.
#[derive(Clone)]
pub(super) struct Config {
    pub server: Server,
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub database: Option<u8>,
    pub tls: Option<TlsConnector>,
}

/// The servers a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Server {
    Standalone(String, u16),
    /// The seeds the slot map is first read from.
    Cluster(Vec<(String, u16)>),
    Sentinel {
        sentinels: Vec<(String, u16)>,
        service: String,
        username: Option<String>,
        password: Option<Secret>,
    },
}

impl Server {
    pub(super) fn topology(&self) -> Topology {
        match self {
            Server::Standalone(..) => Topology::Standalone,
            Server::Cluster(_) => Topology::Cluster,
            Server::Sentinel { .. } => Topology::Sentinel,
        }
    }
}

/// The configuration the URL and flags describe, and its topology.
pub(super) fn config(opts: &ConnectOptions) -> Result<(Config, Topology), RedisSettingsError> {
    let url = normalize_url(&opts.url);
    let mut config =
        parse_url(&url).map_err(|e| RedisSettingsError(format!("invalid --redis-url: {e}")))?;
    let topology = config.server.topology();
    if (opts.tls_ca.is_some() || opts.tls_client.is_some()) && !uses_tls(&opts.url) {
        return Err(RedisSettingsError(
            "--redis-tls-ca and --redis-tls-cert need a TLS URL (rediss://, rediss-cluster://, rediss-sentinel://)"
                .into(),
        ));
    }
    if opts.tls_ca.is_some() || opts.tls_client.is_some() {
        config.tls = Some(tls_config(
            opts.tls_ca.as_deref(),
            opts.tls_client.as_ref(),
        )?);
    }
    if let Some(user) = &opts.username {
        config.username = Some(user.clone());
    }
    if let Some(password) = password(opts)? {
        config.password = Some(password);
    }
    Ok((config, topology))
}

/// The nodes named by a Cluster URL (where the slot map is first read).
pub(crate) fn cluster_seeds(
    opts: &ConnectOptions,
) -> Result<Vec<(String, u16)>, RedisSettingsError> {
    match config(opts)?.0.server {
        Server::Cluster(seeds) => Ok(seeds),
        _ => Err(RedisSettingsError("not a Cluster URL".into())),
    }
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

#[cfg(test)]
mod tests;
