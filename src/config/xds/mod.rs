//! The xDS config source: rules from a control plane (Envoy Gateway, Envoy AI Gateway) over
//! the state-of-the-world Aggregated Discovery Service, as envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW`. [`convert`] turns each `RateLimitConfig` resource into the raw
//! types of a config file; the [`Reloader`] compiles a snapshot (the set of resources, one per
//! domain) and swaps it in whole, exactly as a file reload; [`client`] runs the stream: ACK by
//! echoing version and nonce, NACK with the errors (the running rules kept), reconnect with
//! jittered exponential backoff (the rules kept meanwhile), TLS files re-read on every connect.

mod client;
pub(crate) mod convert;

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::Counter;

use super::Reloader;

pub use client::spawn;
pub use convert::TYPE_URL;

/// Where the control plane is and how to talk to it.
#[derive(Clone, Debug)]
pub struct XdsOptions {
    /// `host:port` (plaintext, or TLS when `tls` is set) or an `http://` / `https://` URL.
    pub server: String,
    /// The node id the control plane keys its snapshots by.
    pub node_id: String,
    /// The node's metadata (string values).
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent with the stream.
    pub headers: Vec<(String, String)>,
    pub tls: Option<XdsTls>,
    /// Largest response accepted (a snapshot is one response).
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
    /// First reconnect delay; doubled after each failed attempt up to `backoff_max`, each
    /// delay jittered by ±50%. A response received resets it.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// TLS to the control plane. The files are read at every connect, so a rotated certificate
/// is used from the next connection on.
#[derive(Clone, Debug)]
pub struct XdsTls {
    /// CA certificates (PEM) that sign the control plane's certificate.
    pub ca: PathBuf,
    /// Client certificate and key (PEM), for a control plane that requires one.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name to verify the server's certificate against (default: the URL's host).
    pub server_name: Option<String>,
}

/// What the source reports besides the reloader's own load metrics and logs.
#[derive(Clone)]
pub struct XdsMetrics {
    /// `sluice.xds.updates` {result: applied, rejected}: snapshots ACKed and NACKed.
    pub updates: Counter<u64>,
    /// 1 while a stream to the control plane is open.
    pub connected: Arc<AtomicU64>,
}

/// The parts a running source needs.
pub struct XdsSource {
    pub opts: XdsOptions,
    pub reloader: Arc<Reloader>,
    pub metrics: XdsMetrics,
}

/// Reconnect delays: exponential from `initial` to `max`, each jittered by ±50% so that many
/// replicas do not reconnect in step.
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }

    fn delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (base * 2).min(self.max.max(self.initial));
        // A random point in [base/2, base*3/2); no randomness (never seen) means no jitter.
        let r = getrandom::u32().unwrap_or(u32::MAX / 2);
        base / 2 + base.mul_f64(f64::from(r) / f64::from(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let bases = [100, 200, 400, 400, 400];
        for base in bases {
            let d = b.delay().as_millis() as u64;
            assert!(
                (base / 2..=base * 3 / 2).contains(&d),
                "{d} not within ±50% of {base}"
            );
        }
        b.reset();
        assert!(b.delay() <= Duration::from_millis(150));
    }
}
