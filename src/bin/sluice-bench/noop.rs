//! `sluice-bench noop`: the gRPC floor. An RLS server that answers OK at once, one status per
//! descriptor, with no matching and no store: what tonic, HTTP/2 and protobuf cost by
//! themselves on this machine, on the runtime layout chosen by `--runtime`.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::{TcpListener, TcpSocket};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use sluice::proto::rate_limit_response::{Code, DescriptorStatus};
use sluice::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use sluice::proto::{RateLimitRequest, RateLimitResponse};

/// How the noop server runs its runtime(s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// One current-thread tokio runtime on one thread.
    Current,
    /// tokio's multi-thread runtime with `--threads` workers.
    Multi,
    /// `--threads` current-thread runtimes, each with its own SO_REUSEPORT listener.
    PerCore,
}

#[derive(Clone, Copy, Default)]
struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = request.get_ref().descriptors.len();
        let statuses = (0..n)
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

/// Binds `addr` with SO_REUSEPORT (so more listeners can share the port) inside the current
/// runtime.
fn bind(addr: SocketAddr, reuseport: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuseport {
        socket.set_reuseport(true)?;
    }
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the default action (exit) still stops the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Noop))
        .serve_with_incoming_shutdown(incoming, shutdown_signal())
        .await
        .context("the noop server failed")
}

fn announce(addr: SocketAddr) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    out.flush()?;
    Ok(())
}

pub fn run(addr: SocketAddr, runtime: RuntimeKind, threads: usize) -> anyhow::Result<()> {
    match runtime {
        RuntimeKind::Current | RuntimeKind::Multi => {
            let rt = if runtime == RuntimeKind::Current {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .enable_all()
                    .build()?
            };
            rt.block_on(async {
                let listener = bind(addr, false).with_context(|| format!("cannot bind {addr}"))?;
                announce(listener.local_addr()?)?;
                serve(listener).await
            })
        }
        RuntimeKind::PerCore => per_core(addr, threads),
    }
}

/// One thread per listener, each a current-thread runtime; the first binds `addr` (port 0
/// picks one), the others bind the port it got. The kernel spreads connections over the
/// listeners by a hash of the 4-tuple, so use at least as many connections as threads.
fn per_core(addr: SocketAddr, threads: usize) -> anyhow::Result<()> {
    let mut bound = addr;
    let mut handles = Vec::new();
    for n in 0..threads.max(1) {
        let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<SocketAddr>>();
        let want = bound;
        let handle = std::thread::Builder::new()
            .name(format!("noop-{n}"))
            .spawn(move || -> anyhow::Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let listener = match bind(want, true) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = tx.send(Err(anyhow::anyhow!("cannot bind {want}: {e}")));
                            return Ok(());
                        }
                    };
                    let _ = tx.send(Ok(listener.local_addr()?));
                    serve(listener).await
                })
            })?;
        bound = rx.recv().context("a listener thread died")??;
        handles.push(handle);
    }
    announce(bound)?;
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a listener thread panicked"))??;
    }
    Ok(())
}
