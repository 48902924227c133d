//! The deadline for a plain HTTP/2 connection's first bytes (`--grpc-preface-timeout`): the
//! client preface and the whole of its first frame (SETTINGS, as RFC 9113 §3.4 requires) must
//! arrive within it, or the connection is closed. Without it a client that connects and sends
//! nothing holds its place until the idle timeout (minutes), and enough of them lock the port.
//!
//! TLS connections have the handshake's own deadline ([`super::tls`]) for their first bytes;
//! after a completed handshake, silence is left to the idle timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

/// `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`.
const PREFACE: usize = 24;
/// A frame header: 24-bit length, type, flags, stream id.
const FRAME_HEADER: usize = 9;
/// Largest first-frame payload waited for (the default SETTINGS_MAX_FRAME_SIZE); h2 refuses
/// a larger one itself.
const MAX_PAYLOAD: usize = 16_384;

/// The bytes of a connection's beginning seen so far, against a deadline.
#[derive(Debug)]
pub(crate) struct Preface {
    deadline: Pin<Box<Sleep>>,
    head: [u8; PREFACE + FRAME_HEADER],
    seen: usize,
}

impl Preface {
    /// Starts the clock; `None` for a zero `within` (no deadline).
    pub(crate) fn within(within: Duration) -> Option<Preface> {
        (!within.is_zero()).then(|| Preface {
            deadline: Box::pin(tokio::time::sleep(within)),
            head: [0; PREFACE + FRAME_HEADER],
            seen: 0,
        })
    }

    /// Counts `bytes` just read; `true` once the preface and the first frame are complete.
    pub(crate) fn saw(&mut self, bytes: &[u8]) -> bool {
        let start = self.seen.min(self.head.len());
        let copy = bytes.len().min(self.head.len() - start);
        self.head[start..start + copy].copy_from_slice(&bytes[..copy]);
        self.seen = self.seen.saturating_add(bytes.len());
        self.seen >= self.needed()
    }

    /// Bytes the preface and first frame take, as far as known.
    fn needed(&self) -> usize {
        if self.seen < self.head.len() {
            return self.head.len();
        }
        let [a, b, c] = [
            self.head[PREFACE],
            self.head[PREFACE + 1],
            self.head[PREFACE + 2],
        ];
        let payload = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
        self.head.len() + payload.min(MAX_PAYLOAD)
    }

    /// Whether the deadline has passed (registering the waker if not).
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        matches!(self.deadline.as_mut().poll(cx), Poll::Ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn complete_once_the_first_frame_is_whole() {
        let mut p = Preface::within(Duration::from_secs(10)).expect("a deadline");
        assert!(!p.saw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        // A SETTINGS frame of 12 payload bytes, its header in two reads.
        assert!(!p.saw(&[0, 0, 12, 4]));
        assert!(!p.saw(&[0, 0, 0, 0, 0]));
        assert!(!p.saw(&[0; 11]));
        assert!(p.saw(&[0; 1]));
        assert!(Preface::within(Duration::ZERO).is_none());
    }
}
