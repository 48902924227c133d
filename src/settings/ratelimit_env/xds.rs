//! envoyproxy/ratelimit's config-source variables: `CONFIG_TYPE` (FILE or GRPC_XDS_SOTW), the
//! `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings of its ADS client, and
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, mapped onto sluice's `--config-xds` family wherever
//! sluice's own setting is not given.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::parse_bool;
use crate::settings::ServeArgs;

/// envoyproxy/ratelimit's default control plane.
const SERVER_URL_DEFAULT: &str = "localhost:18000";

/// Applies the variables; returns what to log about them.
pub(super) fn apply(
    args: &mut ServeArgs,
    m: &ArgMatches,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, String> {
    let unset = |id: &str| matches!(m.value_source(id), None | Some(ValueSource::DefaultValue));
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let flag = |name: &str| var(name).map(|v| parse_bool(name, &v)).transpose();
    let mut notes = Vec::new();

    if unset("start_without_config") {
        if let Some(b) = flag("FORCE_START_WITHOUT_INITIAL_CONFIG")? {
            args.xds.start_without_config = b;
        }
    }
    match var("CONFIG_TYPE")
        .map(|t| t.to_ascii_uppercase())
        .as_deref()
    {
        None | Some("FILE") => return Ok(notes),
        Some("GRPC_XDS_SOTW") => {}
        Some(other) => {
            return Err(format!(
                "CONFIG_TYPE={other}: expected FILE or GRPC_XDS_SOTW"
            ))
        }
    }
    if !args.config.is_empty() {
        notes.push("CONFIG_TYPE: ignored: --config (SLUICE_CONFIG) names config files".into());
        return Ok(notes);
    }
    if unset("config_xds") {
        let url = var("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| SERVER_URL_DEFAULT.into());
        notes.push(format!("CONFIG_TYPE: rules over xDS from {url}"));
        args.xds.config_xds = Some(url);
    }
    let x = &mut args.xds;
    if unset("xds_node_id") {
        if let Some(id) = var("CONFIG_GRPC_XDS_NODE_ID") {
            x.xds_node_id = id;
        }
    }
    if unset("xds_node_metadata") {
        if let Some(md) = var("CONFIG_GRPC_XDS_NODE_METADATA") {
            x.xds_node_metadata = pairs("CONFIG_GRPC_XDS_NODE_METADATA", &md, '=')?;
        }
    }
    if unset("xds_headers") {
        // envconfig's map syntax: key:value,key:value.
        if let Some(h) = var("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
            x.xds_headers = pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", &h, ':')?;
        }
    }
    if unset("xds_tls") {
        if let Some(b) = flag("CONFIG_GRPC_XDS_SERVER_USE_TLS")? {
            x.xds_tls = b;
        }
    }
    if unset("xds_tls_ca") {
        if let Some(ca) = var("CONFIG_GRPC_XDS_SERVER_TLS_CACERT") {
            x.xds_tls_ca = Some(PathBuf::from(ca));
        }
    }
    if unset("xds_tls_cert") && unset("xds_tls_key") {
        match (
            var("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            var("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        ) {
            (Some(cert), Some(key)) => {
                x.xds_tls_cert = Some(cert.into());
                x.xds_tls_key = Some(key.into());
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both or neither"
                        .into(),
                )
            }
            (None, None) => {}
        }
    }
    if unset("xds_tls_server_name") {
        if let Some(san) = var("CONFIG_GRPC_XDS_SERVER_TLS_SAN") {
            x.xds_tls_server_name = Some(san);
        }
    }
    if unset("xds_max_message_bytes") {
        if let Some(n) = var("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
            x.xds_max_message_bytes =
                n.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                    format!("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES={n}: expected a number of bytes")
                })?;
        }
    }
    for (name, id, field) in [
        (
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "xds_backoff_initial",
            &mut x.xds_backoff_initial,
        ),
        (
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            "xds_backoff_max",
            &mut x.xds_backoff_max,
        ),
    ] {
        if unset(id) {
            if let Some(d) = var(name) {
                *field = crate::settings::parse_duration(&d).map_err(|e| format!("{name}: {e}"))?;
            }
        }
    }
    for (name, why) in [
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "each reconnect delay is doubled and jittered by ±50%",
        ),
        (
            "XDS_CLIENT_BACKOFF_JITTER",
            "reconnect delays are always jittered",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "reconnects follow XDS_CLIENT_BACKOFF_INITIAL_INTERVAL and _MAX_INTERVAL",
        ),
    ] {
        if var(name).is_some() {
            notes.push(format!("{name}: ignored: {why}"));
        }
    }
    Ok(notes)
}

/// `k<sep>v,k<sep>v`; an entry without the separator is an error, not skipped.
fn pairs(name: &str, s: &str, sep: char) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|e| match e.split_once(sep) {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().into(), v.trim().into())),
            _ => Err(format!("{name}: '{e}' is not key{sep}value")),
        })
        .collect()
}

#[cfg(test)]
mod tests;
