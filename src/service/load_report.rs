//! What a config reload reports to the service: the `/rlconfig` status, readiness (published to
//! gRPC health) and the load metrics. `config/` sits below the service and sees this only as
//! its [`LoadReport`] seam.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use opentelemetry::KeyValue;

use super::ServiceState;
use crate::config::LoadReport;
use crate::metrics::Metrics;
use crate::model::Micros;

/// The service's side of a reload.
pub(crate) struct ServiceLoadReport {
    pub state: Arc<ServiceState>,
    pub metrics: Arc<Metrics>,
}

impl LoadReport for ServiceLoadReport {
    fn loaded(&self) -> u64 {
        let generation = self.state.record_load();
        self.metrics
            .gauges
            .generation
            .store(generation, Ordering::Relaxed);
        self.state.mark_config_loaded();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let state = self.state.clone();
            rt.spawn(async move { state.publish().await });
        }
        generation
    }

    fn clear_failure(&self) {
        self.state.clear_load_error();
    }

    fn rejected(&self, errors: &str, now: Micros) {
        self.state.record_load_error(errors.to_string(), now);
    }

    fn counted(&self, result: &'static str, seconds: f64) {
        let attrs = [KeyValue::new("result", result)];
        self.metrics.config_load_duration.record(seconds, &attrs);
        self.metrics.config_loads.add(1, &attrs);
    }

    fn generation(&self) -> u64 {
        self.state.config_status().generation
    }

    fn serving(&self) -> bool {
        self.state.is_serving()
    }
}
