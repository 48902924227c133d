//! TLS of the gRPC listener (rustls, ring): server certificate, optional mutual TLS with a
//! client CA and an optional list of names a client certificate must be valid for, and
//! certificates reloaded from their files without dropping connections.
//!
//! The files are read into a complete `ServerConfig`, published through an `ArcSwap`; every
//! new connection handshakes with the config current at its accept, so a reload applies to
//! new connections while open ones keep theirs. A reload that fails (a half-written file, a
//! key that does not match) is logged and the previous config stays.
//!
//! Handshakes run in their own tasks, at most [`MAX_HANDSHAKES`] at once and each within
//! [`HANDSHAKE_TIMEOUT`], so slow or hostile clients can neither stall the accept loop nor
//! pile up tasks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;

use super::accept::{Port, Tracked};

/// TLS handshakes in progress at most (over all listeners); connections beyond it are closed
/// at once.
pub(crate) const MAX_HANDSHAKES: usize = 1024;
/// A client that has not finished its handshake by then is disconnected.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the listener's certificates come from (`--grpc-tls-*`).
#[derive(Clone, Debug)]
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Mutual TLS: clients must present a certificate signed by one of these CAs.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: DNS names or IP addresses; a client certificate must be valid for one.
    pub allowed_sans: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

/// The current server config and the file contents it was built from.
pub(crate) struct ReloadingTls {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
    contents: Mutex<Vec<Vec<u8>>>,
    /// Handshakes in progress, over every listener (one per `--grpc-threads` thread).
    handshakes: Arc<Semaphore>,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ReloadingTls {
    /// Reads the files; an error here is a start-up error.
    pub(crate) fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let contents = read_all(&files)?;
        let config = build(&files, &contents)?;
        Ok(Arc::new(ReloadingTls {
            files,
            config: ArcSwap::from_pointee(config),
            contents: Mutex::new(contents),
            handshakes: Arc::new(Semaphore::new(MAX_HANDSHAKES)),
        }))
    }

    /// Re-reads the files; when they changed, builds and publishes a new config. `Ok(true)`
    /// when a new config is in use, `Ok(false)` when nothing changed; on error the old stays.
    pub(crate) fn reload(&self) -> Result<bool, TlsError> {
        let contents = read_all(&self.files)?;
        let mut seen = self.contents.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == contents {
            return Ok(false);
        }
        let config = build(&self.files, &contents)?;
        self.config.store(Arc::new(config));
        *seen = contents;
        Ok(true)
    }

    /// [`Self::reload`], logged.
    pub(crate) fn reload_logged(&self) {
        match self.reload() {
            Ok(true) => {
                tracing::info!(cert = %self.files.cert.display(), "TLS certificates reloaded")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "TLS reload failed; keeping the current certificates")
            }
        }
    }

    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.config.load_full()
    }
}

fn read_all(files: &TlsFiles) -> Result<Vec<Vec<u8>>, TlsError> {
    let read = |p: &PathBuf| {
        std::fs::read(p).map_err(|e| TlsError(format!("cannot read {}: {e}", p.display())))
    };
    let mut out = vec![read(&files.cert)?, read(&files.key)?];
    if let Some(ca) = &files.client_ca {
        out.push(read(ca)?);
    }
    Ok(out)
}

fn build(files: &TlsFiles, contents: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&contents[0])
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError(format!("invalid PEM in {}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "no certificate in {}",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&contents[1])
        .map_err(|e| TlsError(format!("no private key in {}: {e}", files.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match (&files.client_ca, contents.get(2)) {
        (Some(path), Some(pem)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|e| TlsError(format!("invalid PEM in {}: {e}", path.display())))?;
                roots.add(cert).map_err(|e| {
                    TlsError(format!("invalid CA certificate in {}: {e}", path.display()))
                })?;
            }
            if roots.is_empty() {
                return Err(TlsError(format!("no certificate in {}", path.display())));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError(format!("client CA {}: {e}", path.display())))?;
            let verifier: Arc<dyn ClientCertVerifier> = if files.allowed_sans.is_empty() {
                verifier
            } else {
                Arc::new(SanVerifier {
                    inner: verifier,
                    allowed: parse_names(&files.allowed_sans)?,
                })
            };
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(format!("certificate and key do not fit: {e}")))?;
    // gRPC is HTTP/2 only.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

fn parse_names(names: &[String]) -> Result<Vec<ServerName<'static>>, TlsError> {
    names
        .iter()
        .map(|n| {
            ServerName::try_from(n.trim().to_string())
                .map_err(|_| TlsError(format!("--grpc-tls-allowed-san: invalid name '{n}'")))
        })
        .collect()
}

/// The client CA's verdict, plus: the certificate must be valid for one of `allowed` (its DNS
/// or IP subject alternative names, as a server certificate is checked).
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for SanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self
            .allowed
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepted and handshaken connections of `listener` within `port`'s limits, for tonic's
/// `serve_with_incoming_shutdown`. The accept loop ends (closing the listener) when the stream
/// is dropped.
pub(crate) fn incoming(
    listener: TcpListener,
    tls: Arc<ReloadingTls>,
    port: Arc<Port>,
) -> ReceiverStream<Result<TlsStream<Tracked<TcpStream>>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, tls, port, tx));
    ReceiverStream::new(rx)
}

type Accepted = mpsc::Sender<Result<TlsStream<Tracked<TcpStream>>, std::io::Error>>;

async fn accept_loop(listener: TcpListener, tls: Arc<ReloadingTls>, port: Arc<Port>, tx: Accepted) {
    let handshakes = tls.handshakes.clone();
    loop {
        // Back-off on failed accepts and the connection cap live in `Port::accept`.
        let (tcp, peer, slot) = tokio::select! {
            accepted = port.accept(&listener) => accepted,
            _ = tx.closed() => return,
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many TLS handshakes in progress; connection closed");
            continue;
        };
        let tcp = port.track(tcp, slot);
        let acceptor = TlsAcceptor::from(tls.current());
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            handshake(acceptor, tcp, peer, tx).await;
        });
    }
}

async fn handshake(acceptor: TlsAcceptor, tcp: Tracked<TcpStream>, peer: SocketAddr, tx: Accepted) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => {
            let _ = tx.send(Ok(stream)).await;
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}
