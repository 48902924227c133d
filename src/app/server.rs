//! [`Server`]: the handle of a running sluice (its addresses, reload, drain, status).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Reloader;
use crate::metrics::Metrics;
use crate::service::overload::InFlight;
use crate::service::tls::{ReloadingTls, TlsError};
use crate::store::redis::RedisStatus;
use crate::store::RedisStore;

/// A running sluice: its bound addresses, and the handles to reload and stop it.
pub struct Server {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The extra Prometheus listener (`--prometheus-addr`), if any.
    pub prometheus_addr: Option<SocketAddr>,
    /// The debug listener (`--debug-addr`), if any.
    pub debug_addr: Option<SocketAddr>,
    pub(super) reloader: Arc<Reloader>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: JoinHandle<anyhow::Result<()>>,
    /// The gauges hold it weakly: they end with the server.
    pub(super) redis: Option<Arc<RedisStore>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) in_flight: Arc<InFlight>,
    pub(super) tls: Option<Arc<ReloadingTls>>,
}

impl Server {
    /// Reloads the config; `false` (and the old rules kept) when the new one is invalid.
    pub fn reload(&self) -> bool {
        self.reloader.reload()
    }

    /// Reloads on a blocking thread: parsing and compiling a large config takes long enough
    /// (10k rules: ~0.1 s of CPU) that it must not occupy a runtime worker.
    pub async fn reload_off_runtime(&self) -> bool {
        let reloader = self.reloader.clone();
        tokio::task::spawn_blocking(move || reloader.reload())
            .await
            .unwrap_or(false)
    }

    /// Starts the drain: health turns NOT_SERVING, listeners stop accepting, in-flight
    /// requests finish.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Connection and circuit-breaker state of the Redis backend (`None` with another backend).
    pub fn redis_status(&self) -> Option<RedisStatus> {
        self.redis.as_deref().map(RedisStore::status)
    }

    /// Waits until the store can decide: at once for the in-memory store; for Redis, until it
    /// is connected with the script loaded (it connects in the background).
    pub async fn store_ready(&self) {
        if let Some(r) = &self.redis {
            r.ready().await;
        }
    }

    /// The server's metrics (as `/metrics` shows them).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The in-flight bound of the RLS service (requests now, refusals so far).
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Re-reads the gRPC TLS files now (they are also polled); `Ok(true)` when they changed
    /// and new connections use them, `Ok(false)` without TLS or without a change.
    pub fn reload_tls(&self) -> Result<bool, TlsError> {
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Ok(false),
        }
    }

    /// Waits until both servers have stopped.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task failed")?
    }
}
