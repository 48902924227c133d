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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsConnector;
use url::Url;

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

/// Rewrites `scheme://[cred@]h1:p1,h2:p2[/db][?q]` into `scheme://[cred@]h1:p1[/db]?node=h2:p2[&q]`.
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

/// Reads a (normalized) URL: the scheme's `-cluster` / `-sentinel` suffix chooses the
/// topology, `rediss` / `valkeys` TLS with the system's CAs (unless `--redis-tls-ca`).
fn parse_url(text: &str) -> Result<Config, String> {
    let url = Url::parse(text).map_err(|e| e.to_string())?;
    let scheme = url.scheme();
    let cluster = scheme.ends_with("-cluster");
    let sentinel = scheme.ends_with("-sentinel");
    if scheme.ends_with("+unix") {
        return Err("unix sockets are not supported".into());
    }
    let host = url
        .host_str()
        .ok_or("Invalid or missing host.")?
        .to_string();
    let port = url.port().unwrap_or(if sentinel { 26379 } else { 6379 });
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|e| e.to_string())
    };
    let username = Some(decode(url.username())?).filter(|u| !u.is_empty());
    let password = Some(decode(url.password().unwrap_or_default())?).filter(|p| !p.is_empty());
    let query = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let mut hosts = Vec::new();
    if cluster || sentinel {
        for (key, value) in url.query_pairs() {
            if key == "node" {
                let (h, p) = value
                    .split_once(':')
                    .filter(|(_, p)| !p.contains(':'))
                    .ok_or_else(|| format!("Invalid host:port for cluster node: {value}"))?;
                let p: u16 = p.parse().map_err(|e| format!("{value}: {e}"))?;
                hosts.push((h.to_string(), p));
            }
        }
        hosts.push((host.clone(), port));
    }
    let database = if cluster { None } else { database(&url)? };
    let server = if cluster {
        Server::Cluster(hosts)
    } else if sentinel {
        Server::Sentinel {
            sentinels: hosts,
            service: query("sentinelServiceName")
                .ok_or("Invalid or missing sentinel service name query parameter.")?,
            username: query("sentinelUsername"),
            password: query("sentinelPassword").map(Secret::new),
        }
    } else {
        Server::Standalone(host, port)
    };
    let tls = if uses_tls(text) {
        Some(system_tls()?)
    } else {
        None
    };
    Ok(Config {
        server,
        username,
        password: password.map(Secret::new),
        database,
        tls,
    })
}

/// The database in the URL's path (`/2`), if any.
fn database(url: &Url) -> Result<Option<u8>, String> {
    let Some(parts) = url.path_segments() else {
        return Ok(None);
    };
    let parts: Vec<&str> = parts.collect();
    match parts.as_slice() {
        [] => Ok(None),
        [db] if db.trim().is_empty() => Ok(None),
        [db] => db
            .parse()
            .map(Some)
            .map_err(|e| format!("invalid database {db}: {e}")),
        _ => Err("Invalid database path.".into()),
    }
}

/// TLS trusting the system's CAs (a `rediss` URL without `--redis-tls-ca`).
fn system_tls() -> Result<TlsConnector, String> {
    let loaded = rustls_native_certs::load_native_certs();
    if let Some(e) = loaded.errors.first() {
        tracing::debug!(target: "sluice::store::redis", error = %e, "some system CA certificates could not be read");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, _) = roots.add_parsable_certificates(loaded.certs);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
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

    // The system's roots come with no client certificate: with one, the CA that signed the
    // server's certificate must be named too.
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
    Ok(TlsConnector::from(Arc::new(config)))
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
        let t = |u: &str| config(&opts(u)).map(|(_, t)| t).unwrap();
        assert_eq!(t("redis://127.0.0.1:7000"), Topology::Standalone);
        assert_eq!(
            t("redis-cluster://127.0.0.1:7000,127.0.0.1:7001"),
            Topology::Cluster
        );
        assert_eq!(
            t("redis-sentinel://127.0.0.1:26379?sentinelServiceName=m"),
            Topology::Sentinel
        );
        assert!(config(&opts("redis-sentinel://127.0.0.1:26379")).is_err());
        let mut o = opts("redis://127.0.0.1:7000");
        o.tls_ca = Some("/nonexistent".into());
        assert!(config(&o).is_err(), "a CA needs a TLS URL");
    }

    #[test]
    fn urls_read_as_fred_read_them() {
        let c = |u: &str| config(&opts(u)).map(|(c, _)| c);
        let s = c("redis://u%40x:p%3Aw@h.example/3").unwrap();
        assert_eq!(s.server, Server::Standalone("h.example".into(), 6379));
        assert_eq!(s.username.as_deref(), Some("u@x"));
        assert_eq!(
            s.password
                .as_ref()
                .map(|p| p.expose().to_string())
                .as_deref(),
            Some("p:w")
        );
        assert_eq!(s.database, Some(3));
        assert!(s.tls.is_none());
        let s = c("redis://:pw@h:1").unwrap();
        assert_eq!(s.username, None);
        assert!(s.password.is_some());
        assert_eq!(c("redis://h:1/").unwrap().database, None);
        assert!(c("redis://h:1/x").is_err());
        assert!(c("redis://h:1/1/2").is_err());
        assert!(c("redis://:1").is_err(), "no host");
        assert!(c("rediss://h:1").unwrap().tls.is_some());
        assert!(c("valkeys://h:1").unwrap().tls.is_some());
        let s = c("rediss-cluster://a:1,b:2/5").unwrap();
        assert_eq!(
            s.server,
            Server::Cluster(vec![("b".into(), 2), ("a".into(), 1)])
        );
        assert_eq!(s.database, None, "a Cluster has no databases");
        assert!(s.tls.is_some());
        let s = c("redis-sentinel://a,b:2/1?sentinelServiceName=m&sentinelUsername=su&sentinelPassword=sp")
            .unwrap();
        assert_eq!(s.database, Some(1));
        let Server::Sentinel {
            sentinels,
            service,
            username,
            password,
        } = s.server
        else {
            panic!("not sentinel");
        };
        assert_eq!(sentinels, vec![("b".into(), 2), ("a".into(), 26379)]);
        assert_eq!(service, "m");
        assert_eq!(username.as_deref(), Some("su"));
        assert_eq!(
            password.map(|p| p.expose().to_string()).as_deref(),
            Some("sp")
        );
        assert!(c("redis-cluster://a:1?node=b").is_err());
        // The flags override the URL's credentials.
        let mut o = opts("redis://u:p@h:1");
        o.username = Some("flag".into());
        o.password = Some(Secret::new("secret"));
        let (s, _) = config(&o).unwrap();
        assert_eq!(s.username.as_deref(), Some("flag"));
        assert_eq!(
            s.password.map(|p| p.expose().to_string()).as_deref(),
            Some("secret")
        );
    }
}
