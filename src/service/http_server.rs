//! The HTTP ports (`--http-addr`, `--prometheus-addr`): an axum router served connection by
//! connection through hyper-util's builder (HTTP/1.1 and HTTP/2), because `axum::serve`
//! cannot bound the time to read a request's headers. Each connection is within the port's
//! cap and reaped when idle ([`super::accept`]); an HTTP/1 request whose headers have not
//! arrived whole within `--http-header-read-timeout` (a slowloris client dripping them a byte
//! at a time) closes its connection, and every request passes the port's [`HttpGate`] (its
//! body bounded in bytes and time) before its route runs.
//!
//! When every regular place of the port is taken, a few reserved connections
//! ([`HEALTH_RESERVE`]) still answer `/healthcheck`, one HTTP/1 request each within
//! [`RESERVE_HEADER_TIMEOUT`], and 503 for any other path: clients holding every regular place
//! cannot make a kubelet probe fail and restart a healthy pod.
//!
//! On the stop signal the listener closes and every connection finishes its requests
//! (graceful shutdown); `serve` returns once all are closed.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::Service;

use super::accept::Port;
use super::http_gate::HttpGate;

/// Connections a port accepts beyond `--http-max-connections`, for `/healthcheck` only.
pub(crate) const HEALTH_RESERVE: usize = 8;
/// The time a reserved connection has to send its request's headers.
pub(crate) const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// The one path a reserved connection answers.
const HEALTH_PATH: &str = "/healthcheck";

/// Serves `router` on `listener` within `port`'s limits until `stop` turns `true`, then drains.
/// A zero `header_read_timeout` sets none.
pub(crate) async fn serve(
    listener: TcpListener,
    port: Arc<Port>,
    router: Router,
    gate: HttpGate,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let gate = Arc::new(gate);
    // Every connection task holds a receiver; the sender sees them all gone.
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let (tcp, _, slot) = tokio::select! {
            accepted = port.accept(&listener) => accepted,
            _ = stopped(&mut stop) => break,
        };
        let reserved = slot.is_reserved();
        let io = port.track(tcp, slot);
        let streams = io.streams().clone();
        let (router, gate) = (router.clone(), gate.clone());
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let open = streams.begin();
            let (mut router, gate) = (router.clone(), gate.clone());
            async move {
                if reserved && req.uri().path() != HEALTH_PATH {
                    return Ok(gate.refuse_reserved());
                }
                let answer = match gate.admit(req).await {
                    Ok(req) => router.call(req).await?,
                    Err(refused) => refused,
                };
                // The request stays open until its answer has been sent.
                Ok::<_, std::convert::Infallible>(answer.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _open = &open;
                        frame
                    }))
                }))
            }
        });
        let (mut stop, open) = (stop.clone(), open_rx.clone());
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            let mut timeout = (!header_read_timeout.is_zero()).then_some(header_read_timeout);
            if reserved {
                timeout =
                    Some(timeout.map_or(RESERVE_HEADER_TIMEOUT, |t| t.min(RESERVE_HEADER_TIMEOUT)));
                builder = builder.http1_only();
                builder.http1().keep_alive(false);
            }
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                // An error is the client's doing (reset, timeout, bad bytes): nothing to log.
                _ = conn.as_mut() => {}
                _ = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(open);
        });
    }
    drop((listener, open_rx));
    open_tx.closed().await;
}

/// Resolves once `stop` turns `true` (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
