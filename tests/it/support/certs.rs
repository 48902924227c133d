//! Certificates generated inside the tests with rcgen (ring): a CA, and server and client
//! certificates it signs, written as PEM files ([`MutualTls`]: the files of a mutual-TLS
//! set-up); a gRPC client channel over TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A certificate authority.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pub pem: String,
}

/// A certificate and its key, as PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

/// What a leaf certificate is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("self-signed CA").pem();
        Ca { params, key, pem }
    }

    /// A certificate for `sans` (DNS names or IP addresses), valid now, or expired since 2020
    /// when `expired`.
    pub fn issue(&self, sans: &[&str], usage: Usage, expired: bool) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice test");
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("signed leaf");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

impl Leaf {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert).expect("write cert");
        std::fs::write(&key, &self.key).expect("write key");
        (cert, key)
    }
}

impl Ca {
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }
}

/// The files of a mutual-TLS set-up, written into one directory: a CA (`ca.crt`), a server
/// certificate it signs and a client certificate it signs.
pub struct MutualTls {
    pub ca_file: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl MutualTls {
    /// A CA named `ca_name`; `server` and `client` are each (file name, subject alternative
    /// names), written as `<name>.crt` and `<name>.key` into `dir`.
    pub fn write(
        dir: &Path,
        ca_name: &str,
        server: (&str, &[&str]),
        client: (&str, &[&str]),
    ) -> MutualTls {
        let ca = Ca::new(ca_name);
        let ca_file = ca.write(dir, "ca");
        let (server_cert, server_key) = ca
            .issue(server.1, Usage::Server, false)
            .write(dir, server.0);
        let (client_cert, client_key) = ca
            .issue(client.1, Usage::Client, false)
            .write(dir, client.0);
        MutualTls {
            ca_file,
            server_cert,
            server_key,
            client_cert,
            client_key,
        }
    }
}

/// A gRPC channel over TLS to `addr` (named `localhost`), trusting the PEM `ca`, presenting
/// `identity` when given; the error as text, for tests that expect a refusal.
pub async fn tls_channel(
    addr: SocketAddr,
    ca: &str,
    identity: Option<&Leaf>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert, &id.key));
    }
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| format!("{e:?}"))?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}
