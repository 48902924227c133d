//! The store's background care, one task per store: readiness (connected, library loaded),
//! `PING` probes of open breakers every `probe_every` (so traffic resumes as soon as Redis
//! answers, even when no request comes), and in Cluster mode the slot map kept current.

use std::sync::Weak;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::watch;

use super::link::Link;
use super::nodes::{self, Nodes};
use super::resp::Frame;
use super::{Inner, Links};

/// How long a probe `PING` may wait: long enough that a `PING` sent during a stall answers
/// the moment the stall ends (it is queued behind it), short enough to notice a dead server.
const PING_TIMEOUT: Duration = Duration::from_millis(250);

/// How long the slot map's `CLUSTER SLOTS` may take per node asked.
const REFRESH_TIMEOUT: Duration = Duration::from_millis(500);

/// How often "not reachable yet" is logged while the store waits for Redis.
const WARN_EVERY: Duration = Duration::from_secs(5);

/// How often the monitor looks (readiness, the slot map's schedule); probes follow their own
/// interval, `probe_every`, when it is longer.
const TICK: Duration = Duration::from_millis(20);

// Probes and warnings are paced in real time on tokio's timers, which ManualClock cannot drive.
#[allow(clippy::disallowed_methods)]
pub(super) async fn run(store: Weak<Inner>, ready: watch::Sender<bool>) {
    let probe_every = match store.upgrade() {
        Some(inner) => inner.breaker_opts.probe_every,
        None => return,
    };
    let mut tick = tokio::time::interval(TICK.min(probe_every).max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = crate::clock::monotonic();
    let mut warned = started;
    let mut refreshed: Option<std::time::Instant> = None;
    let mut probed: Option<std::time::Instant> = None;
    loop {
        tick.tick().await;
        let Some(inner) = store.upgrade() else {
            return;
        };
        let is_ready = *ready.borrow();
        let probe = probed.is_none_or(|at| at.elapsed() >= probe_every);
        if probe {
            probed = Some(crate::clock::monotonic());
        }
        match &inner.links {
            Links::Shared(set) => {
                if !is_ready && set.is_up() {
                    tracing::info!(target: "sluice::store::redis", "connected to redis");
                    let _ = ready.send(true);
                }
                if probe && inner.breaker.is_open() && ping(set.next()).await {
                    inner.breaker.success();
                }
            }
            Links::Cluster(nodes) => {
                let due = match refreshed {
                    None => true,
                    Some(at) if nodes.unhealthy() => at.elapsed() >= nodes::REFRESH_UNHEALTHY,
                    Some(at) => at.elapsed() >= nodes::REFRESH_HEALTHY,
                };
                if nodes.take_stale() || due {
                    refreshed = Some(crate::clock::monotonic());
                    if let Err(e) = nodes.refresh(REFRESH_TIMEOUT).await {
                        tracing::debug!(target: "sluice::store::redis", error = %e, "cannot read the cluster slot map");
                    }
                }
                care_for_nodes(nodes, probe).await;
                if !is_ready && nodes.ready() {
                    tracing::info!(target: "sluice::store::redis", "connected to every redis cluster primary");
                    let _ = ready.send(true);
                }
            }
        }
        if !*ready.borrow() && warned.elapsed() >= WARN_EVERY {
            warned = crate::clock::monotonic();
            tracing::warn!(
                target: "sluice::store::redis",
                waited = ?started.elapsed(),
                "redis not ready yet; retrying in the background"
            );
        }
    }
}

/// PINGs the connected primaries whose breaker is open (when `probe`), all at once.
async fn care_for_nodes(nodes: &Nodes, probe: bool) {
    let all = nodes.all();
    let work = all.iter().map(|n| async move {
        let link = n.links.next();
        if !link.is_up() {
            return;
        }
        if probe && n.breaker.is_open() && ping(link).await {
            n.breaker.success();
        }
    });
    join_all(work).await;
}

/// True when the server answers a `PING` in time; at once false when not connected.
async fn ping(link: &Link) -> bool {
    matches!(
        link.call("PING", &[], PING_TIMEOUT).await,
        Ok(Frame::Simple(_) | Frame::Bulk(_))
    )
}
