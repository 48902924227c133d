//! The part of envoyproxy/ratelimit's environment that Envoy Gateway sets beyond the basics
//! (`internal/infrastructure/kubernetes/ratelimit/resource.go`): the container runs
//! `/bin/ratelimit` with no arguments, gRPC over TLS with a client CA, the debug port, and
//! tracing (TRACING_*). Kept apart from [`super::apply`] so each concern reads on its own.

use std::ffi::OsString;

use super::{addr, parse_bool};
use crate::settings::ServeArgs;

/// envoyproxy/ratelimit's debug listener: `DEBUG_HOST` / `DEBUG_PORT` defaults.
const DEBUG_HOST_DEFAULT: &str = "0.0.0.0";
const DEBUG_PORT_DEFAULT: &str = "6070";

/// Variables naming where envoyproxy/ratelimit reads its rules: set without sluice's own
/// `--config`, they mean sluice is standing in for envoyproxy/ratelimit.
const CONFIG_SOURCE_VARS: [&str; 4] = [
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "CONFIG_TYPE",
];

/// The command line to parse: invoked as `ratelimit` (`argv[0]`'s file name, as Envoy Gateway's
/// `/bin/ratelimit`) with no arguments, sluice serves from the environment with
/// envoyproxy/ratelimit's defaults; anything else is sluice's own command line.
pub fn command_line(argv: Vec<OsString>) -> Vec<OsString> {
    let as_ratelimit = argv.len() == 1
        && argv[0]
            .to_str()
            .map(|a| a.rsplit('/').next() == Some("ratelimit"))
            .unwrap_or(false);
    if as_ratelimit {
        vec![
            argv[0].clone(),
            "serve".into(),
            "--ratelimit-defaults".into(),
        ]
    } else {
        argv
    }
}

/// Whether sluice stands in for envoyproxy/ratelimit: asked to (`--ratelimit-defaults`, or
/// invoked as `ratelimit`), or given its config location only through envoyproxy/ratelimit's
/// variables. Then envoyproxy/ratelimit's defaults apply where sluice's differ.
pub(super) fn runs_as_ratelimit(args: &ServeArgs, var: &dyn Fn(&str) -> Option<String>) -> bool {
    args.ratelimit_defaults
        || (args.config.is_empty() && CONFIG_SOURCE_VARS.iter().any(|v| var(v).is_some()))
}

/// Maps the gRPC TLS and debug-port variables onto `args` where sluice's own settings are not
/// given (`unset`), appending what to log to `notes`.
pub(super) fn apply(
    args: &mut ServeArgs,
    unset: &dyn Fn(&str) -> bool,
    var: &dyn Fn(&str) -> Option<String>,
    as_ratelimit: bool,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let flag = |name: &str| var(name).map(|v| parse_bool(name, &v)).transpose();
    args.ratelimit_defaults = as_ratelimit;

    // The debug listener: envoyproxy/ratelimit always opens it; sluice when standing in for
    // it or asked to.
    if unset("debug_addr")
        && (as_ratelimit || var("DEBUG_HOST").is_some() || var("DEBUG_PORT").is_some())
    {
        let host = var("DEBUG_HOST").unwrap_or_else(|| DEBUG_HOST_DEFAULT.into());
        let port = var("DEBUG_PORT").unwrap_or_else(|| DEBUG_PORT_DEFAULT.into());
        let a = addr("DEBUG_HOST/DEBUG_PORT", &host, &port)?;
        args.debug_addr = Some(a);
        notes.push(format!("DEBUG_PORT: debug listener (/rlconfig) on {a}"));
    }

    grpc_tls(args, unset, var, flag("GRPC_SERVER_USE_TLS")?, notes)?;
    tracing(args, var, flag("TRACING_ENABLED")?, notes)
}

/// TRACING_ENABLED with TRACING_SERVICE_NAME / _NAMESPACE / _INSTANCE_ID, TRACING_SAMPLING_RATE
/// and the OTLP endpoint (mapped onto --otlp-endpoint by [`super::apply`]). sluice exports
/// OTLP over gRPC only, while envoyproxy/ratelimit's default TRACING_EXPORTER_PROTOCOL is
/// http: sending gRPC to an OTLP/HTTP port would lose every span, so that stops start-up.
fn tracing(
    args: &mut ServeArgs,
    var: &dyn Fn(&str) -> Option<String>,
    enabled: Option<bool>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    const NAMES: [(&str, &str); 3] = [
        ("TRACING_SERVICE_NAME", "service.name"),
        ("TRACING_SERVICE_NAMESPACE", "service.namespace"),
        ("TRACING_SERVICE_INSTANCE_ID", "service.instance.id"),
    ];
    if enabled != Some(true) {
        for name in NAMES
            .iter()
            .map(|n| n.0)
            .chain(["TRACING_SAMPLING_RATE", "TRACING_EXPORTER_PROTOCOL"])
        {
            if var(name).is_some() {
                notes.push(format!("{name}: ignored: TRACING_ENABLED is not true"));
            }
        }
        return Ok(());
    }
    let protocol = var("TRACING_EXPORTER_PROTOCOL").unwrap_or_else(|| "http".into());
    if !protocol.eq_ignore_ascii_case("grpc") {
        return Err(format!(
            "TRACING_ENABLED=true with TRACING_EXPORTER_PROTOCOL={protocol}{}: sluice exports OTLP over gRPC only; set TRACING_EXPORTER_PROTOCOL=grpc and OTEL_EXPORTER_OTLP_ENDPOINT to the collector's OTLP/gRPC port (4317)",
            if var("TRACING_EXPORTER_PROTOCOL").is_none() { " (envoyproxy/ratelimit's default)" } else { "" }
        ));
    }
    let Some(endpoint) = &args.otlp_endpoint else {
        return Err(
            "TRACING_ENABLED=true needs OTEL_EXPORTER_OTLP_ENDPOINT (or --otlp-endpoint)".into(),
        );
    };
    notes.push(format!(
        "TRACING_ENABLED: traces over OTLP/gRPC to {endpoint}"
    ));
    for (name, attr) in NAMES {
        if let Some(v) = var(name) {
            args.trace_resource.push((attr.into(), v));
        }
    }
    if let Some(r) = var("TRACING_SAMPLING_RATE") {
        match r.trim().parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => args.trace_sampling_rate = Some(x),
            _ => {
                return Err(format!(
                    "TRACING_SAMPLING_RATE={r}: expected a number from 0 to 1"
                ))
            }
        }
    }
    Ok(())
}

/// GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT / _KEY, and a client CA: envoyproxy/ratelimit
/// reads GRPC_CLIENT_TLS_CACERT; Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT (which
/// envoyproxy/ratelimit does not read). Either makes a client certificate required.
fn grpc_tls(
    args: &mut ServeArgs,
    unset: &dyn Fn(&str) -> bool,
    var: &dyn Fn(&str) -> Option<String>,
    use_tls: Option<bool>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    const FILES: [&str; 5] = [
        "GRPC_SERVER_TLS_CERT",
        "GRPC_SERVER_TLS_KEY",
        "GRPC_SERVER_TLS_CA_CERT",
        "GRPC_CLIENT_TLS_CACERT",
        "GRPC_CLIENT_TLS_SAN",
    ];
    let tls = &mut args.hardening.tls;
    if use_tls != Some(true) {
        for name in FILES {
            if var(name).is_some() {
                notes.push(format!("{name}: ignored: GRPC_SERVER_USE_TLS is not true"));
            }
        }
        return Ok(());
    }
    if !(unset("grpc_tls_cert") && unset("grpc_tls_key")) {
        notes.push("GRPC_SERVER_USE_TLS: ignored: --grpc-tls-cert is given".into());
        return Ok(());
    }
    let (Some(cert), Some(key)) = (var("GRPC_SERVER_TLS_CERT"), var("GRPC_SERVER_TLS_KEY")) else {
        return Err(
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into(),
        );
    };
    tls.grpc_tls_cert = Some(cert.into());
    tls.grpc_tls_key = Some(key.into());
    let ca = match (var("GRPC_SERVER_TLS_CA_CERT"), var("GRPC_CLIENT_TLS_CACERT")) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "GRPC_SERVER_TLS_CA_CERT={a} and GRPC_CLIENT_TLS_CACERT={b}: set one, or both to the same file"
            ))
        }
        (a, b) => a.or(b),
    };
    if unset("grpc_tls_client_ca") {
        if let Some(ca) = ca {
            tls.grpc_tls_client_ca = Some(ca.into());
        }
    }
    if unset("grpc_tls_allowed_san") {
        if let Some(san) = var("GRPC_CLIENT_TLS_SAN") {
            if tls.grpc_tls_client_ca.is_none() {
                return Err("GRPC_CLIENT_TLS_SAN needs a client CA (GRPC_CLIENT_TLS_CACERT or GRPC_SERVER_TLS_CA_CERT)".into());
            }
            tls.grpc_tls_allowed_san = vec![san];
        }
    }
    notes.push(format!(
        "GRPC_SERVER_USE_TLS: gRPC over TLS{}",
        if tls.grpc_tls_client_ca.is_some() {
            ", client certificates required"
        } else {
            ""
        }
    ));
    Ok(())
}

#[cfg(test)]
mod tests;
