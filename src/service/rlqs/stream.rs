//! One RLQS stream (one Envoy): its domain and buckets, the reports it sends, and the
//! assignments sent back on each report, when a grant's window ends, and after a reload.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::KeyValue;
use prost::Message;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use super::assign::{self, BucketState, Cause, Context};
use super::bucket::{self, Key, Pending};
use super::budget::{self, Account};
use super::Rlqs;
use crate::model::{Micros, MICROS_PER_SEC};
use crate::proto::rlqs::RateLimitQuotaUsageReports;
use crate::store::Store;

/// Where a stream's answers go: their bucket actions, built as wire messages once tonic takes
/// them to encode (`Rlqs::stream_rate_limit_quotas`; [`bucket::Pending`] says why).
pub(crate) type Outbound = mpsc::Sender<Result<Vec<bucket::Pending>, Status>>;

/// A stream's state.
pub(crate) struct Stream<S> {
    rlqs: Rlqs<S>,
    id: u64,
    domain: Option<String>,
    /// Seeded (ids come from clients), not SipHash: a bucket is looked up on each report.
    buckets: HashMap<Key, BucketState, foldhash::quality::RandomState>,
    /// The bytes of `buckets`, within both caps.
    account: Account,
    /// Bucket actions of the message being built, by `bucket::Assignment::index`: counted
    /// once per message (an attribute set's lookup per bucket was a measurable part of a
    /// bucket's cost).
    sent: [u64; LABELS.len()],
}

/// The `action` labels of `sluice_rlqs_assignments_total`, in [`Stream::sent`]'s order.
const LABELS: [&str; 4] = ["allow_all", "deny_all", "token_bucket", "abandon"];

impl<S: Store> Stream<S> {
    pub(crate) fn new(rlqs: Rlqs<S>, id: u64) -> Self {
        let account = Account::new(
            rlqs.shared.clone(),
            rlqs.metrics.clone(),
            rlqs.options.max_bytes_per_stream,
            rlqs.options.max_bytes,
        );
        Stream {
            rlqs,
            id,
            domain: None,
            buckets: HashMap::default(),
            account,
            sent: [0; LABELS.len()],
        }
    }

    /// Serves the stream until the client ends it, it breaks a bound, or sluice drains.
    /// Returns the status it ended with.
    pub(crate) async fn run(
        mut self,
        mut inbound: Streaming<RateLimitQuotaUsageReports>,
        out: Outbound,
    ) -> tonic::Code {
        let mut rules_changed = self.rlqs.limiter.rules_changed();
        let mut stop = self.rlqs.stop.clone();
        let code = loop {
            let wake = self.next_wake();
            let result = tokio::select! {
                msg = inbound.message() => match msg {
                    Ok(Some(reports)) => {
                        self.account.message(reports.encoded_len(), 0);
                        self.report(reports).await
                    }
                    Ok(None) => break tonic::Code::Ok,
                    // The client went away, or sent what tonic cannot decode (too large).
                    Err(status) => Err(status),
                },
                changed = rules_changed.changed() => match changed {
                    Ok(()) => self.renew_all(true).await,
                    Err(_) => break tonic::Code::Ok,
                },
                _ = sleep_for(wake) => self.renew_all(false).await,
                () = stopped(&mut stop) => break tonic::Code::Unavailable,
            };
            self.count_sent();
            match result {
                Ok(actions) if actions.is_empty() => {}
                Ok(actions) => {
                    let ttl = self.rlqs.options.assignment_ttl;
                    let len = actions.iter().map(|a| a.encoded_len(ttl)).sum::<usize>();
                    self.account.message(0, len);
                    if out.send(Ok(actions)).await.is_err() {
                        break tonic::Code::Cancelled;
                    }
                }
                Err(status) => {
                    let code = status.code();
                    let _ = out.send(Err(status)).await;
                    break code;
                }
            }
        };
        self.forget_demands();
        code
    }

    /// A usage report: every bucket in it is assessed and answered (which also renews its
    /// assignment's time to live).
    async fn report(
        &mut self,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<Vec<Pending>, Status> {
        let m = &self.rlqs.metrics;
        m.reports.add(1, &[]);
        match &self.domain {
            None if reports.domain.is_empty() => {
                return Err(Status::invalid_argument(
                    "the first usage report of a stream must name its domain",
                ))
            }
            None => self.domain = Some(reports.domain.clone()),
            Some(d) if !reports.domain.is_empty() && *d != reports.domain => {
                return Err(Status::invalid_argument(format!(
                    "this stream's domain is '{d}'; a report cannot change it to '{}'",
                    reports.domain
                )))
            }
            Some(_) => {}
        }
        let domain = self.domain.clone().unwrap_or_default();
        let Some(rules) = self.rlqs.limiter.rules() else {
            return Err(Status::unavailable("no rate limit configuration loaded"));
        };
        let opts = &self.rlqs.options;
        // Validate the whole report before assessing any of it.
        let mut usages = Vec::with_capacity(reports.bucket_quota_usages.len());
        let (mut all_allowed, mut all_denied) = (0u64, 0u64);
        for (i, u) in reports.bucket_quota_usages.into_iter().enumerate() {
            let id = u.bucket_id.map(|b| b.bucket).unwrap_or_default();
            let key = bucket::key_of(&id);
            if !self.buckets.contains_key(&key) {
                let request = bucket::request(&domain, &id, &opts.limits)
                    .map_err(|e| Status::invalid_argument(format!("bucket {i}: {e}")))?;
                // The map holds every bucket kept so far, this report's new ones included:
                // each is counted once.
                if self.buckets.len() >= opts.max_buckets_per_stream {
                    return Err(Status::resource_exhausted(format!(
                        "the stream reports more than {} buckets (--rlqs-max-buckets-per-stream)",
                        opts.max_buckets_per_stream
                    )));
                }
                let mut b = BucketState::new();
                let keys = budget::planned_key_bytes(&self.rlqs.limiter, &rules, &request);
                b.bytes = budget::bucket_bytes(&key, &b, keys);
                self.account.take(b.bytes)?;
                self.buckets.insert(key.clone(), b);
            }
            all_allowed = all_allowed.saturating_add(u.num_requests_allowed);
            all_denied = all_denied.saturating_add(u.num_requests_denied);
            usages.push((key, u.num_requests_allowed, u.num_requests_denied));
        }
        if !usages.is_empty() {
            m.requests
                .add(all_allowed, &[KeyValue::new("outcome", "allowed")]);
            m.requests
                .add(all_denied, &[KeyValue::new("outcome", "denied")]);
        }
        let now = self.rlqs.limiter.clock().now();
        let mut actions = Vec::with_capacity(usages.len());
        for (id, allowed, denied) in usages {
            let cause = Cause::Report { allowed, denied };
            actions.extend(self.assess(&rules, &id, cause, now, true).await);
        }
        Ok(actions)
    }

    /// Renews the buckets whose grant's window has ended, or (`reload`) re-assesses every
    /// bucket against the new rules; sends only what changed.
    async fn renew_all(&mut self, reload: bool) -> Result<Vec<Pending>, Status> {
        let Some(rules) = self.rlqs.limiter.rules() else {
            return Ok(Vec::new());
        };
        let now = self.rlqs.limiter.clock().now();
        let due: Vec<Key> = self
            .buckets
            .iter()
            .filter(|(_, b)| reload || b.ledger.ends.is_some_and(|e| e <= now))
            .map(|(id, _)| id.clone())
            .collect();
        let mut actions = Vec::new();
        for id in due {
            actions.extend(self.assess(&rules, &id, Cause::Renewal, now, false).await);
        }
        Ok(actions)
    }

    /// Assesses one bucket; what to send, if anything (`always`: even an unchanged
    /// assignment, to renew its time to live). A store failure sends nothing for the bucket: Envoy keeps its
    /// assignment until the TTL, then falls back as configured.
    async fn assess(
        &mut self,
        rules: &crate::rules::RuleSet,
        id: &[u8],
        cause: Cause,
        now: Micros,
        always: bool,
    ) -> Option<Pending> {
        let b = self.buckets.get_mut(id)?;
        let cx = Context {
            limiter: &self.rlqs.limiter,
            rules,
            demands: &self.rlqs.shared.demands,
            stream: self.id,
            demand_ttl: self.rlqs.options.assignment_ttl.as_micros() as Micros,
            now,
        };
        let generation = b.ledger.generation;
        let request = bucket::request_of(self.domain.as_deref().unwrap_or_default(), id);
        let assessed = assign::assess(&cx, &request, b, cause).await;
        if !matches!(assessed, Ok(None)) {
            let bytes = budget::bucket_bytes(id, b, 0);
            if bytes != b.bytes {
                self.account.recount(b.bytes, bytes);
                b.bytes = bytes;
            }
        }
        match assessed {
            Ok(Some(a)) => {
                let fresh = b.ledger.generation != generation;
                let changed = b.sent != Some(a) || fresh;
                b.sent = Some(a);
                if !(always || changed) {
                    return None;
                }
                self.sent[a.index()] += 1;
                Some(Pending {
                    key: id.into(),
                    assignment: Some(a),
                    fresh,
                })
            }
            Ok(None) => {
                if let Some(key) = b.share_key.take() {
                    self.rlqs.shared.forget(&key, self.id);
                }
                if let Some(b) = self.buckets.remove(id) {
                    self.account.release(b.bytes);
                }
                self.sent[LABELS.len() - 1] += 1;
                Some(Pending {
                    key: id.into(),
                    assignment: None,
                    fresh: false,
                })
            }
            Err(e) => {
                if let Some(held) = self
                    .rlqs
                    .shared
                    .store_failed
                    .due(self.rlqs.limiter.clock().monotonic())
                {
                    tracing::warn!(error = %e, held_back = held, "RLQS: cannot assess a bucket; Envoy keeps its assignment until its TTL");
                }
                // A renewal that failed is retried in a second, not at once (the timer would
                // spin on a window end that stays in the past).
                if b.ledger.ends.is_some_and(|end| end <= now) {
                    b.ledger.ends = Some(now + MICROS_PER_SEC);
                }
                None
            }
        }
    }

    /// Adds the bucket actions counted since the last call to their counters.
    fn count_sent(&mut self) {
        for (label, n) in LABELS.iter().zip(&mut self.sent) {
            if *n > 0 {
                let n = std::mem::take(n);
                self.rlqs
                    .metrics
                    .assignments
                    .add(n, &[KeyValue::new("action", *label)]);
            }
        }
    }

    /// When the earliest grant's window ends.
    fn next_wake(&self) -> Option<Duration> {
        let end = self.buckets.values().filter_map(|b| b.ledger.ends).min()?;
        let now = self.rlqs.limiter.clock().now();
        Some(Duration::from_micros((end - now).max(0) as u64))
    }

    fn forget_demands(&self) {
        for b in self.buckets.values() {
            if let Some(key) = &b.share_key {
                self.rlqs.shared.forget(key, self.id);
            }
        }
    }
}

/// Once the drain starts (the flag's `Ref` is not `Send`, so it is dropped here).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn sleep_for(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
