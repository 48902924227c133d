//! Reading `--redis-url`: comma-separated hosts as `node=` parameters, then the scheme, the
//! servers, the credentials and the database ([`super::Config`]).

use ::url::Url;

use super::tls::system_tls;
use super::{Config, Server};
use crate::secret::Secret;

/// Rewrites `scheme://[cred@]h1:p1,h2:p2[/db][?q]` into `scheme://[cred@]h1:p1[/db]?node=h2:p2[&q]`.
pub(super) fn normalize_url(url: &str) -> String {
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

pub(super) fn uses_tls(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or("");
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// Reads a (normalized) URL: the scheme's `-cluster` / `-sentinel` suffix chooses the
/// topology, `rediss` / `valkeys` TLS with the system's CAs (unless `--redis-tls-ca`).
pub(super) fn parse_url(text: &str) -> Result<Config, String> {
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
