//! Readiness shared by gRPC health and the HTTP `/healthcheck`.

use std::sync::atomic::{AtomicBool, Ordering};

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// The service names gRPC health answers for.
pub const HEALTH_SERVICES: [&str; 2] = ["", "ratelimit"];

pub struct ServiceState {
    config_loaded: AtomicBool,
    draining: AtomicBool,
    health: HealthReporter,
}

impl ServiceState {
    pub fn new(health: HealthReporter) -> Self {
        ServiceState {
            config_loaded: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            health,
        }
    }

    /// Serving once a config is loaded, until shutdown starts.
    pub fn is_serving(&self) -> bool {
        self.config_loaded.load(Ordering::SeqCst) && !self.draining.load(Ordering::SeqCst)
    }

    /// Records that a config is loaded; [`Self::publish`] tells gRPC health.
    pub fn mark_config_loaded(&self) {
        self.config_loaded.store(true, Ordering::SeqCst);
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
