//! gRPC serving threads (`--grpc-threads N`): N threads, each running one current-thread Tokio
//! runtime that serves its own listening socket. The sockets are bound with `SO_REUSEPORT` to
//! one address, so the kernel spreads new connections over them and a connection lives its
//! whole life on one thread: no work stealing, no cross-thread wake-ups on the request path
//! (a current-thread runtime costs about a third less CPU per request than the multi-thread
//! one, measured on the no-op RLS server).
//!
//! What the threads share is whatever the server they run shares (the limiter, the in-flight
//! bound, metrics, TLS config): all of it is `Send + Sync` behind `Arc`s. Each thread ends
//! when its server future ends (the drain), and reports how it ended on a oneshot channel.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::oneshot;

/// Pending connections per listener (as `std`'s default).
const BACKLOG: u32 = 1024;

/// The threads to run by default: the cores this process may use (cgroup quotas included).
pub(crate) fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Binds `n` (at least one) listening sockets with `SO_REUSEPORT` on `addr`; with port 0 the
/// first picks the port and the others join it. Must be called within a Tokio runtime; the
/// listeners are returned detached from it, for [`spawn`] to hand to their own runtimes.
pub(crate) fn bind(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut out = Vec::with_capacity(n.max(1));
    let mut at = addr;
    for _ in 0..n.max(1) {
        let socket = if at.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As `TcpListener::bind`: a restart need not wait for TIME_WAIT to pass.
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(at)?;
        let listener = socket.listen(BACKLOG)?;
        at = listener.local_addr()?;
        out.push(listener.into_std()?);
    }
    Ok(out)
}

/// How a serving thread ended: `Err` with a message when its runtime could not start or its
/// server failed.
pub(crate) type Ended = oneshot::Receiver<Result<(), String>>;

/// Starts one thread per listener, each with a current-thread runtime running
/// `serve(listener)` to completion. `serve` builds the thread's server; its future need not be
/// `Send` (it never leaves the thread).
pub(crate) fn spawn<F, Fut, E>(
    listeners: Vec<std::net::TcpListener>,
    serve: F,
) -> std::io::Result<Vec<Ended>>
where
    F: Fn(TcpListener) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut ended = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.into_iter().enumerate() {
        let (tx, rx) = oneshot::channel();
        let serve = serve.clone();
        std::thread::Builder::new()
            .name(format!("sluice-grpc-{i}"))
            .spawn(move || {
                let _ = tx.send(run(listener, serve));
            })?;
        ended.push(rx);
    }
    Ok(ended)
}

fn run<F, Fut, E>(listener: std::net::TcpListener, serve: F) -> Result<(), String>
where
    F: Fn(TcpListener) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a gRPC runtime: {e}"))?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        serve(listener).await.map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn port_zero_gives_every_socket_the_same_port() {
        let ls = bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let addrs: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        assert_eq!(addrs.len(), 3);
        assert_ne!(addrs[0].port(), 0);
        assert!(addrs.iter().all(|a| *a == addrs[0]));
    }

    #[tokio::test]
    async fn a_port_held_without_reuseport_is_refused() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(bind(held.local_addr().unwrap(), 2).is_err());
    }
}
