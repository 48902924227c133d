//! The ADS stream: connect (TLS files read now), subscribe to every `RateLimitConfig` of the
//! node (a wildcard: no resource names), apply each response as a whole snapshot, and ACK or
//! NACK it; on any failure, wait a backoff and start over. The running rules are never touched
//! by a failure: only a snapshot that compiles replaces them.

use std::sync::atomic::Ordering;

use opentelemetry::KeyValue;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::convert::{documents, TYPE_URL};
use super::{Backoff, XdsOptions, XdsSource};
use crate::proto::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::envoy::config::core::v3::Node;
use crate::proto::google::rpc::Status;

/// gRPC's INVALID_ARGUMENT, the code of a NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// Why a stream ended.
#[derive(Debug, thiserror::Error)]
pub(super) enum XdsError {
    #[error("cannot read {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid xDS server address {0}")]
    Address(String),
    #[error("cannot connect to the xDS server: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("invalid gRPC header {0}")]
    Header(String),
    #[error("xDS stream failed: {0}")]
    Stream(#[from] tonic::Status),
    #[error("the xDS server closed the stream")]
    Closed,
}

/// Runs the source until `stop` turns true.
pub fn spawn(source: XdsSource, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Backoff::new(source.opts.backoff_initial, source.opts.backoff_max);
        // The version last applied, over every stream: a NACK names it as still in use.
        let mut applied = String::new();
        loop {
            let ended = tokio::select! {
                e = session(&source, &mut backoff, &mut applied) => e,
                _ = stop.wait_for(|s| *s) => return,
            };
            source.metrics.connected.store(0, Ordering::Relaxed);
            let delay = backoff.delay();
            tracing::warn!(
                error = %ended,
                server = %source.opts.server,
                retry_in = ?delay,
                "xDS stream down; keeping the running rules"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}

/// One stream, from connecting to its end (always an error: a stream is meant to last).
async fn session(source: &XdsSource, backoff: &mut Backoff, applied: &mut String) -> XdsError {
    let opts = &source.opts;
    let channel = match connect(opts).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(opts.max_message_bytes)
        .max_encoding_message_size(opts.max_message_bytes);
    let (tx, rx) = mpsc::channel(4);
    let node = node(opts);
    // A new stream asks for the whole state (no version): the control plane sends it at
    // once, and an identical snapshot recompiles to the same rules.
    let _ = tx.try_send(request(&node, "", "", None));
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    for (k, v) in &opts.headers {
        let key = MetadataKey::from_bytes(k.as_bytes()).map_err(|_| XdsError::Header(k.clone()));
        let value = MetadataValue::try_from(v.as_str()).map_err(|_| XdsError::Header(k.clone()));
        match (key, value) {
            (Ok(key), Ok(value)) => {
                req.metadata_mut().insert(key, value);
            }
            (Err(e), _) | (_, Err(e)) => return e,
        }
    }
    let mut inbound = match client.stream_aggregated_resources(req).await {
        Ok(r) => r.into_inner(),
        Err(e) => return e.into(),
    };
    source.metrics.connected.store(1, Ordering::Relaxed);
    tracing::info!(server = %opts.server, node = %opts.node_id, "xDS stream open");
    loop {
        let response = match inbound.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return XdsError::Closed,
            Err(e) => return e.into(),
        };
        backoff.reset();
        let nonce = response.nonce.clone();
        let version = response.version_info.clone();
        let reply = match apply(source, response).await {
            Ok(()) => {
                applied.clone_from(&version);
                request(&node, &version, &nonce, None)
            }
            Err(reason) => request(
                &node,
                applied,
                &nonce,
                Some(Status {
                    code: INVALID_ARGUMENT,
                    message: reason,
                    details: Vec::new(),
                }),
            ),
        };
        if tx.send(reply).await.is_err() {
            return XdsError::Closed;
        }
    }
}

/// Applies one response as a snapshot; the reason to NACK it otherwise.
async fn apply(source: &XdsSource, response: DiscoveryResponse) -> Result<(), String> {
    let version = response.version_info.clone();
    let resources = response.resources.len();
    let result = if response.type_url != TYPE_URL {
        Err(format!(
            "unexpected type {}, subscribed to {TYPE_URL}",
            response.type_url
        ))
    } else {
        let reloader = source.reloader.clone();
        let v = version.clone();
        // Compiling a large snapshot takes long enough that it must not hold a runtime worker.
        tokio::task::spawn_blocking(move || {
            let docs = documents(&response.resources).map_err(|e| e.to_string())?;
            reloader
                .apply_snapshot(&docs, &v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(format!("snapshot compilation failed: {e}")))
    };
    let outcome = match &result {
        Ok(()) => {
            tracing::info!(%version, resources, "xDS snapshot applied (ACK)");
            "applied"
        }
        Err(reason) => {
            tracing::error!(
                %version,
                resources,
                %reason,
                "xDS snapshot rejected (NACK); keeping the running rules"
            );
            "rejected"
        }
    };
    source
        .metrics
        .updates
        .add(1, &[KeyValue::new("result", outcome)]);
    result
}

fn request(node: &Node, version: &str, nonce: &str, error: Option<Status>) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.to_string(),
        node: Some(node.clone()),
        resource_names: Vec::new(),
        type_url: TYPE_URL.to_string(),
        response_nonce: nonce.to_string(),
        error_detail: error,
    }
}

fn node(opts: &XdsOptions) -> Node {
    use prost_types::value::Kind;
    let fields = opts
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = prost_types::Value {
                kind: Some(Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: opts.node_id.clone(),
        metadata: Some(prost_types::Struct { fields }),
        user_agent_name: "sluice".into(),
        user_agent_version_type: Some(
            crate::proto::envoy::config::core::v3::node::UserAgentVersionType::UserAgentVersion(
                env!("CARGO_PKG_VERSION").into(),
            ),
        ),
        ..Node::default()
    }
}

/// Opens the channel; TLS files are read now, so each reconnect uses the current ones.
async fn connect(opts: &XdsOptions) -> Result<Channel, XdsError> {
    let uri = if opts.server.contains("://") {
        opts.server.clone()
    } else if opts.tls.is_some() {
        format!("https://{}", opts.server)
    } else {
        format!("http://{}", opts.server)
    };
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|_| XdsError::Address(opts.server.clone()))?
        .connect_timeout(opts.connect_timeout)
        .tcp_nodelay(true);
    if let Some(tls) = &opts.tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|source| XdsError::File {
                path: p.display().to_string(),
                source,
            })
        };
        let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
        if let Some((cert, key)) = &tls.identity {
            cfg = cfg.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &tls.server_name {
            cfg = cfg.domain_name(name.clone());
        }
        endpoint = endpoint.tls_config(cfg)?;
    }
    Ok(endpoint.connect().await?)
}
