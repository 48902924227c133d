//! The HTTP ports (`--http-addr`, `--prometheus-addr`): an axum router served connection by
//! connection through hyper-util's builder (HTTP/1.1 and HTTP/2), because `axum::serve`
//! cannot bound the time to read a request's headers. Each connection is within the port's
//! cap and reaped when idle ([`super::accept`]); an HTTP/1 request whose headers have not
//! arrived whole within `--http-header-read-timeout` (a slowloris client dripping them a byte
//! at a time) closes its connection. On the stop signal the listener closes and every
//! connection finishes its requests (graceful shutdown); `serve` returns once all are closed.

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

/// Serves `router` on `listener` within `port`'s limits until `stop` turns `true`, then drains.
/// A zero `header_read_timeout` sets none.
pub async fn serve(
    listener: TcpListener,
    port: Arc<Port>,
    router: Router,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    // Every connection task holds a receiver; the sender sees them all gone.
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let (tcp, _, slot) = tokio::select! {
            accepted = port.accept(&listener) => accepted,
            _ = stopped(&mut stop) => break,
        };
        let io = port.track(tcp, slot);
        let streams = io.streams().clone();
        let router = router.clone();
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let open = streams.begin();
            let mut router = router.clone();
            async move {
                let answer = router.call(req.map(Body::new)).await?;
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
            let timeout = (!header_read_timeout.is_zero()).then_some(header_read_timeout);
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
