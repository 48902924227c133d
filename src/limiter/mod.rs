//! The per-request policy: descriptors -> matched rules -> store checks -> response.
//!
//! Owns the parts of envoyproxy/ratelimit's semantics that do not depend on the store:
//! matching, `replaces`, unlimited rules, limit overrides, shadow mode (per rule and global),
//! quota mode, several limits per descriptor (`rate_limits`), refund permission, response
//! headers and metadata. The store decides and charges atomically.
//!
//! A decision runs in stages, each usable on its own (RLS, the JSON API and RLQS share them): [`resolve`] (descriptors -> limits) and [`plan`] (limits -> checks
//! with their keys) build a [`Plan`]; the [`Store`] decides its checks; [`assemble`] turns
//! (plan, verdicts) into a [`Response`]; [`explain`] and [`observe`] are derived from the
//! same (plan, verdicts) afterwards.

pub(crate) mod assemble;
pub(crate) mod explain;
pub(crate) mod ietf_headers;
pub(crate) mod ietf_items;
pub(crate) mod native;
pub(crate) mod observe;
pub(crate) mod plan;
pub(crate) mod reservation;
pub(crate) mod resolve;
pub(crate) mod response;
pub(crate) mod share;
#[cfg(test)]
mod testing;

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use opentelemetry::metrics::BoundHistogram;
use tracing::Instrument;

use crate::clock::Clock;
use crate::model::Request;
use crate::rules::RuleSet;
use crate::stats::StatsRegistry;
use crate::store::{Deadline, Store, StoreError, Verdict};

pub use explain::{Explanation, LimitExplanation};
pub use native::{NativeLimit, NativeResponse, NativeStatus};
pub use plan::Plan;
pub use response::{Code, CurrentLimit, HeaderNames, Response, Status};

/// Server-wide policy switches.
#[derive(Clone, Debug, Default)]
pub struct LimiterOptions {
    /// Turn an OVER_LIMIT overall code into OK (per-descriptor codes are left alone).
    pub shadow_mode: bool,
    /// Put every limited descriptor in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`).
    pub quota_mode: bool,
    /// Charge rejected requests unless a rule says otherwise (envoyproxy/ratelimit's way).
    pub charge_rejected: bool,
    /// Add `RateLimit-Limit` / `-Remaining` / `-Reset` headers (draft 03, named here) from
    /// the tightest descriptor.
    pub response_headers: Option<HeaderNames>,
    /// Add the draft-10 `RateLimit-Policy` and `RateLimit` fields, one item per limit
    /// ([`ietf_items`]); after the draft-03 headers when both are on.
    pub ietf_headers: bool,
    /// Prefix of every storage key (`--key-prefix`).
    pub key_prefix: Vec<u8>,
    /// The largest reservation record, encoded (`--max-reservation-bytes`; 0: no cap).
    pub max_reservation_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{0}")]
    InvalidArgument(String),
    /// The request asks for something its domain does not allow (refunds).
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unavailable(String),
    /// The native API: a reservation that is unknown, expired or settled already.
    #[error("{0}")]
    NotFound(String),
    /// The native API: the domain does not accept what is asked (reservations).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The native API: a reservation larger than `--max-reservation-bytes`.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The caller's deadline passed before the decision (while matching).
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Metrics the limiter records (see [`crate::metrics`]).
pub struct LimiterMetrics {
    pub stats: Arc<StatsRegistry>,
    /// `sluice.store.duration`, bound to the store's `backend` (one series: no lookup per call).
    pub store_duration: BoundHistogram<f64>,
}

pub struct Limiter<S> {
    rules: ArcSwapOption<RuleSet>,
    store: S,
    clock: Arc<dyn Clock>,
    opts: LimiterOptions,
    metrics: Option<LimiterMetrics>,
    /// Counts rule sets published, so that long-lived RLQS streams re-evaluate on a reload.
    generation: tokio::sync::watch::Sender<u64>,
}

impl<S: Store> Limiter<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>, opts: LimiterOptions) -> Self {
        Limiter {
            rules: ArcSwapOption::empty(),
            store,
            clock,
            opts,
            metrics: None,
            generation: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Records per-rule statistics and store latency.
    pub fn with_metrics(mut self, metrics: LimiterMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Publishes a new rule set in one atomic swap; requests in flight finish on the old one,
    /// which is then freed off the request path (see [`retire`]).
    pub fn set_rules(&self, rules: Arc<RuleSet>) {
        if let Some(m) = &self.metrics {
            m.stats.prepare(&rules);
        }
        if let Some(old) = self.rules.swap(Some(rules)) {
            retire(old);
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Changes each time a rule set is published.
    pub fn rules_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub fn rules(&self) -> Option<Arc<RuleSet>> {
        self.rules.load_full()
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn options(&self) -> &LimiterOptions {
        &self.opts
    }

    /// The rules in use, or UNAVAILABLE before the first config loads.
    pub fn loaded_rules(&self) -> Result<Arc<RuleSet>, LimitError> {
        self.rules()
            .ok_or_else(|| LimitError::Unavailable("no rate limit configuration loaded".into()))
    }

    /// Stages 1 and 2: resolves `req` against `rules` into its checks.
    pub fn plan<'a>(
        &self,
        rules: &'a RuleSet,
        req: &'a Request,
        deadline: Deadline,
    ) -> Result<Plan<'a>, LimitError> {
        Plan::new(rules, req, &self.opts, deadline)
    }

    /// Stage 3: the store decides the plan's checks (timed, traced), giving up by `deadline`.
    pub async fn run(
        &self,
        plan: &Plan<'_>,
        deadline: Deadline,
    ) -> Result<Vec<Verdict>, LimitError> {
        let checks = plan.checks();
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let started = self.clock.monotonic();
        let span =
            tracing::trace_span!(target: "sluice::otel", "store.decide", checks = checks.len());
        let result = self
            .store
            .decide(&checks, self.clock.now(), deadline)
            .instrument(span)
            .await;
        self.record_store_time(started);
        Ok(result?)
    }

    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    fn record_store_time(&self, started: std::time::Instant) {
        if let Some(m) = &self.metrics {
            m.store_duration
                .record(self.clock.since(started).as_secs_f64());
        }
    }

    /// Stage 4: the response to the plan, recording per-rule statistics.
    pub fn assemble(&self, plan: &Plan<'_>, verdicts: &[Verdict]) -> Response {
        if let Some(m) = &self.metrics {
            observe::record(&m.stats, plan, verdicts);
        }
        assemble::assemble(plan, verdicts, &self.opts)
    }

    /// Per-rule statistics of what an RLQS client reported for the (one-descriptor) `plan`:
    /// `allowed` requests it admitted and `denied` it refused itself, `remaining` of the limit.
    pub fn record_reported(&self, plan: &Plan<'_>, allowed: u64, denied: u64, remaining: u64) {
        if let Some(m) = &self.metrics {
            observe::record_reported(&m.stats, plan, allowed, denied, remaining);
        }
    }

    /// Decides `req` (charging it) with every stage.
    pub async fn should_rate_limit(
        &self,
        req: &Request,
        deadline: Deadline,
    ) -> Result<Response, LimitError> {
        let rules = self.loaded_rules()?;
        let plan = self.plan(&rules, req, deadline)?;
        let verdicts = self.run(&plan, deadline).await?;
        Ok(self.assemble(&plan, &verdicts))
    }

    /// Decides `req` (charging it, as [`Self::should_rate_limit`]) and tells how each
    /// descriptor was decided.
    pub async fn explain(
        &self,
        req: &Request,
        deadline: Deadline,
    ) -> Result<(Response, Vec<Explanation>), LimitError> {
        let rules = self.loaded_rules()?;
        let plan = self.plan(&rules, req, deadline)?;
        let verdicts = self.run(&plan, deadline).await?;
        let response = self.assemble(&plan, &verdicts);
        let explanation = explain::explain(&plan, &verdicts, &response);
        Ok((response, explanation))
    }
}

/// Frees a replaced rule set on a thread of its own once no request holds it any more:
/// freeing 100,000 rules takes milliseconds, which the last request to finish on the old set
/// would otherwise spend before answering. Without a thread, it is freed here (on the reload).
fn retire(old: Arc<RuleSet>) {
    let _ = std::thread::Builder::new()
        .name("sluice-rules-drop".into())
        .spawn(move || {
            crate::background::lowest_priority();
            let mut old = old;
            let mut wait = std::time::Duration::from_millis(1);
            // Requests hold the set for their lifetime (bounded by their deadline); other
            // holders (`/rlconfig`, explain) as briefly.
            while let Err(still) = Arc::try_unwrap(old) {
                old = still;
                std::thread::sleep(wait);
                wait = (wait * 2).min(std::time::Duration::from_millis(100));
            }
        });
}
