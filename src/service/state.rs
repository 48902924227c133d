//! Readiness shared by gRPC health and the HTTP `/healthcheck`, and the status of config
//! loads shown by `/rlconfig`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::model::Micros;

/// The service names gRPC health answers for: the server, envoyproxy/ratelimit's name, and
/// each API by its full name.
pub(crate) const HEALTH_SERVICES: [&str; 5] = [
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
    super::rlqs::SERVICE_NAME,
    "sluice.v1.RateLimiter",
];

/// What the last config loads did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigStatus {
    /// Rule sets loaded so far; the one in use is the latest (0: none yet).
    pub generation: u64,
    /// When the last load failed and why (cleared by the next good load).
    pub last_error: Option<(Micros, String)>,
}

pub struct ServiceState {
    config_loaded: AtomicBool,
    draining: AtomicBool,
    /// The store can answer: false until the Redis store is ready (unless
    /// `--ready-before-store`), and while it fails with `--health-requires-store`.
    store_ok: AtomicBool,
    config: Mutex<ConfigStatus>,
    health: HealthReporter,
}

impl ServiceState {
    pub fn new(health: HealthReporter) -> Self {
        ServiceState {
            config_loaded: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            store_ok: AtomicBool::new(true),
            config: Mutex::new(ConfigStatus::default()),
            health,
        }
    }

    /// Serving once a config is loaded, until shutdown starts.
    pub fn is_serving(&self) -> bool {
        self.config_loaded.load(Ordering::SeqCst)
            && !self.draining.load(Ordering::SeqCst)
            && self.store_ok.load(Ordering::SeqCst)
    }

    /// Records that a config is loaded; [`Self::publish`] tells gRPC health.
    pub fn mark_config_loaded(&self) {
        self.config_loaded.store(true, Ordering::SeqCst);
    }

    /// Records a good load; returns its generation.
    pub fn record_load(&self) -> u64 {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        c.generation += 1;
        c.last_error = None;
        c.generation
    }

    /// Forgets the last failed load (a good one is being swapped in).
    pub fn clear_load_error(&self) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        c.last_error = None;
    }

    /// Records a failed load (the rules in use stay).
    pub fn record_load_error(&self, error: String, at: Micros) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        c.last_error = Some((at, error));
    }

    pub fn config_status(&self) -> ConfigStatus {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets whether the store is usable; true when it changed.
    pub fn set_store_ok(&self, ok: bool) -> bool {
        self.store_ok.swap(ok, Ordering::SeqCst) != ok
    }

    /// Publishes NOT_SERVING before anything else happens (tonic-health's default is SERVING).
    pub async fn set_draining_if(&self, draining: bool) {
        self.draining.store(draining, Ordering::SeqCst);
        self.publish().await;
    }

    pub async fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.publish().await;
    }

    pub async fn publish(&self) {
        let status = if self.is_serving() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in HEALTH_SERVICES {
            self.health.set_service_status(name, status).await;
        }
    }
}
