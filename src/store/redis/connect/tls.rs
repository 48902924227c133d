//! The TLS a `rediss` URL dials with: the system's CAs, or `--redis-tls-ca` with an optional
//! client certificate (`--redis-tls-cert`, `--redis-tls-key`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::TlsConnector;

use super::RedisSettingsError;

/// TLS trusting the system's CAs (a `rediss` URL without `--redis-tls-ca`).
pub(super) fn system_tls() -> Result<TlsConnector, String> {
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
pub(super) fn tls_config(
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
