//! Wiring: settings -> store -> limiter -> servers, reloads, and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::clock::Clock;
use crate::config::{self, LoadOptions};
use crate::limiter::{HeaderNames, Limiter, LimiterOptions};
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::service::http::{self, HttpContext};
use crate::service::rls::RlsService;
use crate::service::ServiceState;
use crate::settings::{Backend, ServeArgs};
use crate::store::{MemoryStore, Store};

/// How often expired in-memory entries are reclaimed.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A running sluice: its bound addresses, and the handles to reload and stop it.
pub struct Server {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    reload: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Reloads the config; `false` (and the old rules kept) when the new one is invalid.
    pub fn reload(&self) -> bool {
        (self.reload)()
    }

    /// Starts the drain: health turns NOT_SERVING, listeners stop accepting, in-flight
    /// requests finish.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until both servers have stopped.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task failed")?
    }
}

/// Binds the listeners (so a port in use fails here), loads the config and starts serving.
pub async fn start(args: ServeArgs, clock: Arc<dyn Clock>) -> anyhow::Result<Server> {
    let grpc = TcpListener::bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?;
    let http = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", args.http_addr))?;
    match args.backend {
        Backend::Memory => {
            let store = Arc::new(MemoryStore::new(args.memory_max_entries));
            // Weak, so the sweeper ends with the server instead of keeping the store alive.
            let sweeper = Arc::downgrade(&store);
            let sweep_clock = clock.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SWEEP_EVERY);
                loop {
                    tick.tick().await;
                    match sweeper.upgrade() {
                        Some(store) => store.sweep(sweep_clock.now()),
                        None => break,
                    };
                }
            });
            run(args, clock, store, grpc, http).await
        }
    }
}

impl<S: Store> Store for Arc<S> {
    fn decide(
        &self,
        checks: &[crate::store::Check<'_>],
        now: crate::model::Micros,
    ) -> impl std::future::Future<
        Output = Result<Vec<crate::store::Verdict>, crate::store::StoreError>,
    > + Send {
        (**self).decide(checks, now)
    }
}

async fn run<S: Store>(
    args: ServeArgs,
    clock: Arc<dyn Clock>,
    store: S,
    grpc: TcpListener,
    http: TcpListener,
) -> anyhow::Result<Server> {
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let opts = LimiterOptions {
        shadow_mode: args.shadow_mode,
        quota_mode: args.quota_mode,
        charge_rejected: args.charge_rejected,
        response_headers: args.response_headers.then(|| HeaderNames {
            limit: args.header_limit.clone(),
            remaining: args.header_remaining.clone(),
            reset: args.header_reset.clone(),
        }),
        key_prefix: args.key_prefix.clone().into_bytes(),
    };
    let limiter = Arc::new(Limiter::new(store, clock, opts));
    let (reporter, health) = tonic_health::server::health_reporter();
    let state = Arc::new(ServiceState::new(reporter));
    state.set_draining_if(false).await;

    let reload: Arc<dyn Fn() -> bool + Send + Sync> = {
        let limiter = limiter.clone();
        let state = state.clone();
        let paths = args.config.clone();
        let opts = LoadOptions {
            merge_domains: args.merge_domains,
        };
        Arc::new(move || match config::load(&paths, opts) {
            Ok(rules) => {
                let domains = rules.domains.len();
                let files = rules.sources.len();
                limiter.set_rules(Arc::new(rules));
                state.mark_config_loaded();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let state = state.clone();
                    rt.spawn(async move { state.publish().await });
                }
                tracing::info!(domains, files, "config loaded");
                true
            }
            Err(errors) => {
                for e in &errors.0 {
                    tracing::error!(error = %e, "config rejected; keeping the running rules");
                }
                false
            }
        })
    };
    reload();
    state.publish().await;

    let (stop, stop_rx) = watch::channel(false);
    let grpc_server = {
        let mut rx = stop_rx.clone();
        let svc = RateLimitServiceServer::new(RlsService::new(limiter.clone()));
        let incoming = TcpIncoming::from(grpc).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(health)
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
    };
    let http_server = {
        let mut rx = stop_rx.clone();
        let limiter = limiter.clone();
        let cx = HttpContext {
            state: state.clone(),
            rules: Arc::new(move || limiter.rules()),
        };
        axum::serve(http, http::router(cx)).with_graceful_shutdown(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    };
    let drain_timeout = args.drain_timeout;
    let task = tokio::spawn({
        let state = state.clone();
        let mut rx = stop_rx.clone();
        async move {
            let grpc_task = tokio::spawn(grpc_server);
            let http_task = tokio::spawn(async move { http_server.await });
            let _ = rx.wait_for(|s| *s).await;
            state.set_draining().await;
            let drained = tokio::time::timeout(drain_timeout, async {
                let g = grpc_task.await;
                let h = http_task.await;
                (g, h)
            })
            .await;
            match drained {
                Ok((g, h)) => {
                    g.context("gRPC server panicked")?
                        .context("gRPC server failed")?;
                    h.context("HTTP server panicked")?
                        .context("HTTP server failed")?;
                }
                Err(_) => tracing::warn!(?drain_timeout, "drain timed out; exiting anyway"),
            }
            Ok(())
        }
    });
    Ok(Server {
        grpc_addr,
        http_addr,
        reload,
        stop,
        task,
    })
}
