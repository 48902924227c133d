//! The background tasks of a running server: the in-memory sweeper, the runtime report, the
//! TLS file poller and the store's health. Each ends with the server (its stop signal, or the
//! store it holds weakly going away).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::service::overload::InFlight;
use crate::service::tls::ReloadingTls;
use crate::service::ServiceState;
use crate::store::{MemoryStore, RedisStore};

/// How often the runtime report is logged (debug level).
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How often expired in-memory entries are reclaimed.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How often `--health-requires-store` looks at the store's state.
const STORE_HEALTH_EVERY: Duration = Duration::from_millis(500);

/// The server's stop signal: `true` once the drain starts.
pub(crate) type Stop = watch::Receiver<bool>;

/// Reclaims expired in-memory entries every [`SWEEP_EVERY`].
pub(crate) fn spawn_sweeper(store: &Arc<MemoryStore>, clock: Arc<dyn Clock>) {
    // Weak, so the sweeper ends with the server instead of keeping the store alive.
    let store = Arc::downgrade(store);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            match store.upgrade() {
                Some(store) => {
                    store.sweep(clock.now());
                }
                None => break,
            }
        }
    });
}

/// Logs the runtime's live tasks and the in-flight gate every [`REPORT_EVERY`] at debug level
/// (target `sluice::runtime`), for soak runs to see that nothing accumulates.
pub(crate) fn spawn_runtime_report(in_flight: Arc<InFlight>, mut stop: Stop) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REPORT_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
                    tracing::debug!(
                        target: "sluice::runtime",
                        tasks,
                        in_flight = in_flight.current(),
                        refused = in_flight.rejected(),
                        "runtime"
                    );
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    });
}

/// Checks the TLS files every `every` (at least 100 ms) until the server stops.
pub(crate) fn spawn_tls_poller(tls: Arc<ReloadingTls>, every: Duration, mut stop: Stop) {
    let every = every.max(Duration::from_millis(100));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => tls.reload_logged(),
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    });
}

/// With `--health-requires-store`: NOT_SERVING while Redis is down or its breaker open.
pub(crate) fn spawn_store_health(redis: RedisStore, state: Arc<ServiceState>, mut stop: Stop) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(STORE_HEALTH_EVERY);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            let s = redis.status();
            if state.set_store_ok(redis.is_ready() && s.connected && !s.breaker_open) {
                state.publish().await;
            }
        }
    });
}
