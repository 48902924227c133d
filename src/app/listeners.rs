//! The sockets: bound first (so a port in use fails start-up), then served; gRPC on one
//! shared listener or one `SO_REUSEPORT` listener per serving thread (`--grpc-threads`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use futures::future::BoxFuture;
use tokio::net::TcpListener;

use crate::grpc_threads;
use crate::service::grpc::GrpcServer;
use crate::settings::ServeArgs;
use crate::store::RedisStore;

pub(super) struct Listeners {
    pub grpc: GrpcListeners,
    pub http: TcpListener,
    pub prometheus: Option<TcpListener>,
    /// envoyproxy/ratelimit's debug port (`--debug-addr`): `/rlconfig`.
    pub debug: Option<TcpListener>,
}

/// `--grpc-threads 0`: one listener served on the main runtime; otherwise one SO_REUSEPORT
/// listener per serving thread.
pub(super) enum GrpcListeners {
    Shared(TcpListener),
    PerThread(Vec<std::net::TcpListener>),
}

impl Listeners {
    pub(super) async fn bind(args: &ServeArgs) -> anyhow::Result<Listeners> {
        let grpc = match args
            .grpc_threads
            .unwrap_or_else(grpc_threads::default_count)
        {
            0 => GrpcListeners::Shared(
                TcpListener::bind(args.grpc_addr)
                    .await
                    .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?,
            ),
            n => GrpcListeners::PerThread(
                grpc_threads::bind(args.grpc_addr, n)
                    .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?,
            ),
        };
        let http = TcpListener::bind(args.http_addr)
            .await
            .with_context(|| format!("cannot listen for HTTP on {}", args.http_addr))?;
        let prometheus = match args.prometheus_addr {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen for Prometheus on {a}"))?,
            ),
            None => None,
        };
        let debug = match args.debug_addr {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen for the debug port on {a}"))?,
            ),
            None => None,
        };
        Ok(Listeners {
            grpc,
            http,
            prometheus,
            debug,
        })
    }
}

impl GrpcListeners {
    pub(super) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            GrpcListeners::Shared(l) => l.local_addr(),
            GrpcListeners::PerThread(ls) => ls
                .first()
                .ok_or_else(|| std::io::Error::other("no gRPC listener"))?
                .local_addr(),
        }
    }
}

/// Serves gRPC on its listeners; resolves when every one has stopped (after the drain).
pub(super) fn serve_grpc(
    listeners: GrpcListeners,
    server: GrpcServer,
    redis: Option<Arc<RedisStore>>,
) -> anyhow::Result<BoxFuture<'static, anyhow::Result<()>>> {
    match listeners {
        GrpcListeners::Shared(l) => {
            let task = tokio::spawn(server.serve(l));
            Ok(Box::pin(async move {
                task.await
                    .context("gRPC server panicked")?
                    .context("gRPC server failed")
            }))
        }
        GrpcListeners::PerThread(ls) => {
            // Each thread decides on its own Redis connection, driven by its own runtime.
            let serve = move |l: TcpListener| {
                if let Some(r) = &redis {
                    if let Err(e) = r.attach_thread() {
                        tracing::warn!(error = %e, "no own Redis connection for a gRPC thread");
                    }
                }
                server.clone().serve(l)
            };
            let ended =
                grpc_threads::spawn(ls, serve).context("cannot start the gRPC serving threads")?;
            Ok(Box::pin(async move {
                let mut result = Ok(());
                for e in ended {
                    match e.await {
                        Ok(Ok(())) => {}
                        Ok(Err(m)) => result = Err(anyhow::anyhow!("gRPC server failed: {m}")),
                        Err(_) => result = Err(anyhow::anyhow!("gRPC serving thread panicked")),
                    }
                }
                result
            }))
        }
    }
}
