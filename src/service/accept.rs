//! Accepting connections on a listening port: a cap on open connections per port, back-off
//! with one log line per interval when accepting fails (out of file descriptors), and idle
//! connections reaped.
//!
//! Idle means no request open: a connection on which no request (HTTP/2 stream, HTTP/1
//! exchange) has been open at any moment of the port's idle time is closed. Bytes do not count,
//! so a connection that only answers keep-alive pings, or sends its own pings and
//! WINDOW_UPDATEs, is reaped like one that never sends anything after connecting; Envoy's
//! connections, which carry requests, stay. The servers report requests through the
//! connection's [`Streams`] (`service::every_call` on the gRPC port, `service::http_server` on
//! the HTTP ports).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

use super::preface::Preface;
use crate::clock::Clock;
use crate::quiet::QuietWarn;

/// Longest pause after a failed accept; the first is [`FIRST_BACKOFF`], doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// The requests open on one connection, as its server reports them.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: AtomicUsize,
    /// A request began since the idle timer last looked.
    began: AtomicBool,
}

impl Streams {
    /// One request open until the guard is dropped (with the response body, for streams).
    pub(crate) fn begin(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.began.store(true, Ordering::Release);
        StreamGuard(self.clone())
    }

    /// Whether a request was open at some moment since the last call.
    fn busy_since_check(&self) -> bool {
        let began = self.began.swap(false, Ordering::AcqRel);
        began || self.open.load(Ordering::Acquire) > 0
    }
}

/// An open request of [`Streams`].
#[derive(Debug)]
pub(crate) struct StreamGuard(Arc<Streams>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What tonic puts in each request's extensions: the connection's [`Streams`].
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub streams: Arc<Streams>,
}

/// The limits and counters of one port (shared by its `--grpc-threads` listeners).
#[derive(Debug)]
pub(crate) struct Port {
    name: &'static str,
    max: usize,
    /// Places beyond `max`, taken only when the port is full (see [`Slot::is_reserved`]).
    reserve: usize,
    idle: Duration,
    open: AtomicUsize,
    reserved_open: AtomicUsize,
    refused: AtomicU64,
    accept_failed: QuietWarn,
    over_cap: QuietWarn,
    /// Times the warnings above.
    clock: Arc<dyn Clock>,
}

impl Port {
    /// `max` connections at once (at least one); `idle` of zero never reaps.
    pub(crate) fn new(
        name: &'static str,
        max: usize,
        idle: Duration,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Port::with_reserve(name, max, 0, idle, clock)
    }

    /// [`Port::new`] with `reserve` more places, given only while the `max` are all taken: the
    /// server answers only its health check on them, so that clients holding every regular
    /// place cannot make the health check fail.
    pub(crate) fn with_reserve(
        name: &'static str,
        max: usize,
        reserve: usize,
        idle: Duration,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Port {
            name,
            max: max.max(1),
            reserve,
            idle,
            open: AtomicUsize::new(0),
            reserved_open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            accept_failed: QuietWarn::default(),
            over_cap: QuietWarn::default(),
            clock,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections closed at once because the port was full.
    #[cfg(test)]
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The next connection within the cap. Failed accepts (EMFILE and the like) back off,
    /// doubling the pause, and are logged once per interval instead of spinning.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        listener: &TcpListener,
    ) -> (TcpStream, SocketAddr, Slot) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match listener.accept().await {
                Ok((tcp, peer)) => {
                    backoff = FIRST_BACKOFF;
                    let Some(reserved) = self.take_place() else {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        if let Some(held) = self.over_cap.due(self.clock.monotonic()) {
                            tracing::warn!(
                                port = self.name,
                                max = self.max,
                                more = held,
                                "connection cap reached; new connections closed at once"
                            );
                        }
                        continue;
                    };
                    // Fails for a peer that already reset: nothing to report.
                    let _ = tcp.set_nodelay(true);
                    let slot = Slot {
                        port: self.clone(),
                        reserved,
                    };
                    return (tcp, peer, slot);
                }
                Err(e) => {
                    if let Some(held) = self.accept_failed.due(self.clock.monotonic()) {
                        tracing::warn!(port = self.name, error = %e, more = held,
                            "accept failed (out of file descriptors?); backing off");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// A regular place (`Some(false)`), else a reserved one (`Some(true)`), else `None`.
    fn take_place(&self) -> Option<bool> {
        if self.open.fetch_add(1, Ordering::AcqRel) < self.max {
            return Some(false);
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        if self.reserved_open.fetch_add(1, Ordering::AcqRel) < self.reserve {
            return Some(true);
        }
        self.reserved_open.fetch_sub(1, Ordering::AcqRel);
        None
    }

    /// `tcp` with its slot, closed once idle.
    pub(crate) fn track<IO>(&self, io: IO, slot: Slot) -> Tracked<IO> {
        Tracked {
            io,
            _slot: slot,
            idle: self.idle,
            deadline: (!self.idle.is_zero()).then(|| Box::pin(tokio::time::sleep(self.idle))),
            streams: Arc::default(),
            preface: None,
        }
    }
}

/// One open connection of a [`Port`]; frees its place when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    port: Arc<Port>,
    reserved: bool,
}

impl Slot {
    /// Whether this is one of the places given only while the port is full.
    pub(crate) fn is_reserved(&self) -> bool {
        self.reserved
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let open = match self.reserved {
            true => &self.port.reserved_open,
            false => &self.port.open,
        };
        open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection that fails its reads (so the server closes it) once no request has been open
/// on it for the port's idle time.
#[derive(Debug)]
pub(crate) struct Tracked<IO> {
    io: IO,
    _slot: Slot,
    idle: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
    streams: Arc<Streams>,
    /// Until the HTTP/2 preface and first frame have arrived (plain gRPC connections).
    preface: Option<Preface>,
}

impl<IO> Tracked<IO> {
    /// Closed unless the HTTP/2 preface and first frame arrive within `within` (zero: no
    /// deadline).
    pub(crate) fn with_preface_deadline(mut self, within: Duration) -> Self {
        self.preface = Preface::within(within);
        self
    }

    /// Where the server reports this connection's requests.
    pub(crate) fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    // The idle timer is tokio's own (real time, like every socket wait): it is re-armed on its clock.
    #[allow(clippy::disallowed_methods)]
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if let Some(p) = &mut this.preface {
                    if p.saw(&buf.filled()[before..]) {
                        this.preface = None;
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if this.preface.as_mut().is_some_and(|p| p.expired(cx)) {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no HTTP/2 preface in time",
                    )));
                }
                let Some(deadline) = this.deadline.as_mut() else {
                    return Poll::Pending;
                };
                // Re-armed lazily: a request does not touch the timer, only its expiry does.
                while deadline.as_mut().poll(cx).is_ready() {
                    if !this.streams.busy_since_check() {
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "connection idle",
                        )));
                    }
                    let next = tokio::time::Instant::now() + this.idle;
                    deadline.as_mut().reset(next);
                }
                Poll::Pending
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Tracked<TcpStream> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnInfo {
            streams: self.streams.clone(),
        }
    }
}

/// The accepted connections of `listener` within `port`'s limits, for tonic's
/// `serve_with_incoming_shutdown` (dropping the stream closes the listener).
/// Each is closed unless its HTTP/2 preface arrives within `preface` (see [`Preface`]).
pub(crate) fn incoming(
    listener: TcpListener,
    port: Arc<Port>,
    preface: Duration,
) -> impl futures::Stream<Item = Result<Tracked<TcpStream>, std::io::Error>> {
    futures::stream::unfold((listener, port), move |(listener, port)| async move {
        let (tcp, _, slot) = port.accept(&listener).await;
        let io = port.track(tcp, slot).with_preface_deadline(preface);
        Some((Ok(io), (listener, port)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[tokio::test]
    async fn the_cap_closes_connections_beyond_it_and_frees_on_close() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let port = Port::new("test", 1, Duration::ZERO, Arc::new(ManualClock::default()));
        let _a = TcpStream::connect(addr).await.unwrap();
        let (_, _, first) = port.accept(&listener).await;
        assert_eq!(port.open(), 1);
        let _b = TcpStream::connect(addr).await.unwrap();
        let _c = TcpStream::connect(addr).await.unwrap();
        // b is refused while a holds the only place; after a closes, c gets in.
        let accepted =
            tokio::time::timeout(Duration::from_millis(300), port.accept(&listener)).await;
        assert!(accepted.is_err(), "nothing fits while full");
        assert!(port.refused() >= 1);
        drop(first);
        let _d = TcpStream::connect(addr).await.unwrap();
        let (_, _, _second) = port.accept(&listener).await;
        assert_eq!(port.open(), 1);
    }

    #[tokio::test]
    async fn reserved_places_only_once_full() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let port = Port::with_reserve(
            "test",
            1,
            1,
            Duration::ZERO,
            Arc::new(ManualClock::default()),
        );
        let _clients: Vec<_> =
            futures::future::join_all((0..3).map(|_| TcpStream::connect(addr))).await;
        let (_, _, regular) = port.accept(&listener).await;
        let (_, _, reserved) = port.accept(&listener).await;
        assert!(!regular.is_reserved() && reserved.is_reserved());
        let third = tokio::time::timeout(Duration::from_millis(300), port.accept(&listener)).await;
        assert!(third.is_err(), "nothing fits past the reserve");
        drop(reserved);
        let _e = TcpStream::connect(addr).await.unwrap();
        let (_, _, again) = port.accept(&listener).await;
        assert!(again.is_reserved(), "the regular place is still taken");
    }
}
