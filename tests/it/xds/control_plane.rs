//! A small state-of-the-world ADS control plane, as Envoy Gateway's: it holds one snapshot
//! (a version and its `RateLimitConfig` resources), sends it whole on every new stream's
//! first request and on every change, with a fresh nonce each time, and records every
//! request it receives (the ACKs and NACKs the tests look for). Plaintext, or TLS 1.3 only
//! with a required client certificate (as Envoy Gateway's xDS server).

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::Stream;
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice::config::xds::TYPE_URL;
use sluice::proto::discovery::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use sluice::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use sluice::proto::rls_conf::RateLimitConfig;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::support::poll::eventually;

/// A version and its resources.
#[derive(Clone)]
pub struct Snapshot {
    pub version: String,
    pub resources: Vec<RateLimitConfig>,
}

/// Server-side TLS material (PEM files).
pub struct ServerTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    /// The CA client certificates must chain to.
    pub client_ca: &'a Path,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<DiscoveryRequest>>,
    /// The (nonce, version) of every response sent.
    sent: Mutex<Vec<(String, String)>>,
    nonce: AtomicU64,
}

pub struct ControlPlane {
    pub addr: SocketAddr,
    snapshot: watch::Sender<Option<Snapshot>>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlPlane {
    /// Serves on `addr` (port 0 for a free one).
    pub async fn start(addr: SocketAddr, tls: Option<ServerTls<'_>>) -> ControlPlane {
        let listener = TcpListener::bind(addr).await.expect("bind control plane");
        let addr = listener.local_addr().unwrap();
        let (snapshot, _) = watch::channel(None);
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared::default());
        let service = Ads {
            snapshot: snapshot.clone(),
            shared: shared.clone(),
            stop: stop_rx.clone(),
        };
        let router = tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(service));
        let mut shutdown = stop_rx.clone();
        let signal = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        let task = match tls {
            None => tokio::spawn(async move {
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let _ = router.serve_with_incoming_shutdown(incoming, signal).await;
            }),
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&tls)));
                let (tx, rx) = mpsc::channel(16);
                let mut stopped = stop_rx.clone();
                let accept = tokio::spawn(async move {
                    loop {
                        let (tcp, _) = tokio::select! {
                            a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                            _ = stopped.wait_for(|s| *s) => return,
                        };
                        let (acceptor, tx) = (acceptor.clone(), tx.clone());
                        tokio::spawn(async move {
                            // A refused handshake (no client certificate, TLS 1.2) just ends.
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                let _ = tx.send(Ok::<_, std::io::Error>(stream)).await;
                            }
                        });
                    }
                });
                let serve = tokio::spawn(async move {
                    let incoming = ReceiverStream::new(rx);
                    let _ = router.serve_with_incoming_shutdown(incoming, signal).await;
                });
                // Stopped once both are done: the listener is closed with the accept loop.
                tokio::spawn(async move {
                    let _ = accept.await;
                    let _ = serve.await;
                })
            }
        };
        ControlPlane {
            addr,
            snapshot,
            shared,
            stop,
            task,
        }
    }

    /// Publishes a snapshot: every open stream gets it.
    pub fn set(&self, version: &str, resources: Vec<RateLimitConfig>) {
        self.snapshot.send_replace(Some(Snapshot {
            version: version.into(),
            resources,
        }));
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The request that answered a response of `version` (ACK or NACK), once one has.
    fn reply_to(&self, version: &str) -> Option<DiscoveryRequest> {
        let sent = self.shared.sent.lock().unwrap().clone();
        self.requests().into_iter().find(|r| {
            sent.iter()
                .any(|(nonce, v)| v == version && *nonce == r.response_nonce)
        })
    }

    /// Waits for the reply to `version`: the ACK or NACK sluice sent.
    pub async fn reply(&self, version: &str) -> DiscoveryRequest {
        let what = format!("a reply to xDS version {version}");
        eventually(&what, || async { self.reply_to(version) }).await
    }

    /// Ends every stream and stops listening (the port is free again once this returns).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// TLS 1.3 only, with a client certificate required.
fn server_config(tls: &ServerTls<'_>) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(tls.cert)
        .expect("server cert")
        .map(|c| c.expect("server cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(tls.key).expect("server key");
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(tls.client_ca).expect("client CA") {
        roots.add(ca.expect("client CA")).expect("add client CA");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("client verifier");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

struct Ads {
    snapshot: watch::Sender<Option<Snapshot>>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let mut snapshot = self.snapshot.subscribe();
        let mut stop = self.stop.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // Nothing is sent before the client's first request.
            let mut subscribed = false;
            loop {
                tokio::select! {
                    r = inbound.message() => match r {
                        Ok(Some(req)) => {
                            shared.requests.lock().unwrap().push(req);
                            if !subscribed {
                                subscribed = true;
                                snapshot.mark_changed();
                            }
                        }
                        _ => return,
                    },
                    changed = snapshot.changed(), if subscribed => {
                        if changed.is_err() {
                            return;
                        }
                        let current: Option<Snapshot> = {
                            let r = snapshot.borrow_and_update();
                            r.clone()
                        };
                        let Some(s) = current else { continue };
                        let nonce = shared.nonce.fetch_add(1, Ordering::Relaxed) + 1;
                        shared.sent.lock().unwrap().push((nonce.to_string(), s.version.clone()));
                        if tx.send(Ok(response(&s, nonce))).await.is_err() {
                            return;
                        }
                    }
                    _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                        let _ = tx.send(Err(Status::unavailable("control plane stopping"))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn response(s: &Snapshot, nonce: u64) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: s.version.clone(),
        resources: s
            .resources
            .iter()
            .map(|r| prost_types::Any {
                type_url: TYPE_URL.into(),
                value: r.encode_to_vec(),
            })
            .collect(),
        type_url: TYPE_URL.into(),
        nonce: nonce.to_string(),
        ..Default::default()
    }
}
