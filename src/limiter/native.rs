//! The stages of the native API (`sluice.v1.RateLimiter`), over the same plan, store call and
//! assembly as RLS: Check (optionally a dry run: decided, nothing charged), Reserve (charged
//! at once, held as a [`Record`] in the store under a random id), Commit (the unused part
//! given back, an overrun charged as debt) and Cancel (everything given back). A reservation
//! not settled within its ttl expires in the store, and so counts as used. A settlement is
//! applied with the record replaced by a marker of it in one store step, or not at all (the
//! reservation stays settleable): never answered by a failure policy. The marker answers a
//! retry of the same settlement after a lost reply OK; it is dropped once a success is
//! answered, so a later settlement finds nothing.

use super::assemble::{self, reported};
use super::ietf_items;
use super::plan::Plan;
use super::reservation::{new_id, Record};
use super::resolve::Resolved;
use super::response::{ceil_millis, Code, Response};
use super::{LimitError, Limiter};
use crate::algorithm::{Algorithm, Limit};
use crate::excerpt::excerpt;
use crate::model::{Micros, Request};
use crate::store::records::SETTLED;
use crate::store::{key, Check, Deadline, Reservations, Store, Verdict};

/// The limit that decided a descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeLimit {
    pub name: String,
    pub requests: u64,
    pub window: Micros,
    pub algorithm: Algorithm,
}

/// One descriptor's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeStatus {
    pub allowed: bool,
    /// `None`: no limit applies (no rule, `unlimited`, replaced).
    pub limit: Option<NativeLimit>,
    /// Hits left after this request (`u64::MAX` for `unlimited`, 0 with no rule).
    pub remaining: u64,
    pub reset_after: Option<Micros>,
    /// Set when rejected: how long until the same request can pass.
    pub retry_after: Option<Micros>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeResponse {
    pub allowed: bool,
    pub statuses: Vec<NativeStatus>,
    /// The IETF `RateLimit-Policy` and `RateLimit` fields (name, value).
    pub headers: Vec<(String, String)>,
}

/// The native answer to (plan, verdicts), from the RLS assembly (shadow mode, quota mode and
/// the admission rule stay defined once there).
fn native(plan: &Plan<'_>, verdicts: &[Verdict], r: &Response) -> NativeResponse {
    let mut statuses: Vec<NativeStatus> = plan
        .resolved
        .iter()
        .map(|res| NativeStatus {
            allowed: true,
            limit: None,
            remaining: if matches!(res, Resolved::Unlimited(_)) {
                u64::MAX
            } else {
                0
            },
            reset_after: None,
            retry_after: None,
        })
        .collect();
    for (i, range) in plan.groups() {
        let pick = range.start + reported(&verdicts[range]);
        let v = &verdicts[pick];
        let limit = plan.limit(&plan.planned[pick]);
        let allowed = r.statuses[i].code == Code::Ok;
        statuses[i] = NativeStatus {
            allowed,
            limit: Some(NativeLimit {
                name: limit.name.clone().unwrap_or_default(),
                requests: limit.limit.requests(),
                window: limit.limit.window(),
                algorithm: limit.limit.algorithm(),
            }),
            remaining: if v.allowed { v.remaining } else { 0 },
            reset_after: Some(ceil_millis(v.reset)),
            retry_after: (!allowed).then(|| ceil_millis(v.reset)),
        };
    }
    NativeResponse {
        allowed: r.overall == Code::Ok,
        statuses,
        headers: ietf_items::fields(plan, verdicts),
    }
}

impl<S: Store> Limiter<S> {
    /// Check: decides `req`, charging it unless `dry_run`.
    pub async fn check(
        &self,
        req: &Request,
        dry_run: bool,
        deadline: Deadline,
    ) -> Result<NativeResponse, LimitError> {
        let rules = self.loaded_rules()?;
        let mut plan = self.plan(&rules, req, deadline)?;
        plan.dry_run = dry_run;
        let verdicts = self.run(&plan, deadline).await?;
        // A dry run is not a request: it stays out of the per-rule statistics.
        let response = if dry_run {
            assemble::assemble(&plan, &verdicts, self.options())
        } else {
            self.assemble(&plan, &verdicts)
        };
        Ok(native(&plan, &verdicts, &response))
    }
}

impl<S: Store + Reservations> Limiter<S> {
    /// Reserve: decides and charges `req` as Check does and, when allowed, holds what was
    /// charged under a new reservation id for `ttl`. FAILED_PRECONDITION for a domain without
    /// `allow_reservations: true`.
    pub async fn reserve(
        &self,
        req: &Request,
        ttl: Micros,
        deadline: Deadline,
    ) -> Result<(NativeResponse, Option<String>), LimitError> {
        let rules = self.loaded_rules()?;
        if !rules
            .domain(&req.domain)
            .is_some_and(|d| d.allow_reservations)
        {
            return Err(LimitError::FailedPrecondition(format!(
                "reservations are not allowed for domain '{}' (set `allow_reservations: true` in its config to accept them)",
                excerpt(&req.domain)
            )));
        }
        let plan = self.plan(&rules, req, deadline)?;
        let verdicts = self.run(&plan, deadline).await?;
        let response = native(&plan, &verdicts, &self.assemble(&plan, &verdicts));
        if !response.allowed {
            return Ok((response, None));
        }
        let now = self.clock().now();
        let expires_at = now.saturating_add(ttl);
        let record = Record::of(&plan, &verdicts, expires_at);
        let encoded = record.encode();
        let max = self.options().max_reservation_bytes;
        if max > 0 && encoded.len() > max {
            self.give_back(&record, deadline).await;
            return Err(LimitError::ResourceExhausted(format!(
                "the reservation's record would take {} bytes, more than {max} (--max-reservation-bytes)",
                encoded.len()
            )));
        }
        let random = new_id().map_err(LimitError::Unavailable)?;
        // The record shares its first counter's Redis Cluster slot: settling the record and
        // giving that counter back are then one atomic script call.
        let counters: Vec<&[u8]> = record.holds.iter().map(|h| h.key.as_slice()).collect();
        let id = match counters.first() {
            Some(near) => key::reservation_id(&random, near),
            None => random,
        };
        let key = key::reservation(&self.options().key_prefix, &id)
            .ok_or_else(|| LimitError::Unavailable("invalid reservation id".into()))?;
        let held = self
            .store()
            .hold(&key, encoded, &counters, expires_at, now, deadline)
            .await;
        if let Err(e) = held {
            self.give_back(&record, deadline).await;
            return Err(e.into());
        }
        Ok((response, Some(id)))
    }

    /// A reservation that was charged but not held is never settled: give its charge back now
    /// (best effort; if this fails too, the hits stay charged until their windows pass).
    async fn give_back(&self, record: &Record, deadline: Deadline) {
        if let Ok(limits) = record.limits() {
            let checks = settlement(record, &limits, 0);
            let _ = self
                .store()
                .decide(&checks, self.clock().now(), deadline)
                .await;
        }
    }

    /// Commit: settles reservation `id` at `actual` hits per descriptor.
    pub async fn commit(
        &self,
        id: &str,
        actual: u64,
        deadline: Deadline,
    ) -> Result<(), LimitError> {
        let marker = [SETTLED, format!("commit:{actual}").as_bytes()].concat();
        self.settle(id, actual, &marker, deadline).await
    }

    /// Cancel: gives back everything reservation `id` holds.
    pub async fn cancel(&self, id: &str, deadline: Deadline) -> Result<(), LimitError> {
        let marker = [SETTLED, b"cancel"].concat();
        self.settle(id, 0, &marker, deadline).await
    }

    /// Settles reservation `id` at `actual` hits: reads its record, then has the store apply
    /// the settlement and replace the record by `marker` in one step (see
    /// [`Reservations::settle`]). Once: a second settle finds nothing and changes nothing,
    /// except that a retry of this settlement after a lost reply finds `marker` and succeeds.
    /// A failure leaves it settleable.
    async fn settle(
        &self,
        id: &str,
        actual: u64,
        marker: &[u8],
        deadline: Deadline,
    ) -> Result<(), LimitError> {
        if id.is_empty() {
            return Err(LimitError::InvalidArgument(
                "reservation_id must not be empty".into(),
            ));
        }
        let not_found = || {
            LimitError::NotFound(format!(
                "no reservation '{}': unknown, expired (settled as used) or settled already",
                excerpt(id)
            ))
        };
        let key = key::reservation(&self.options().key_prefix, id).ok_or_else(not_found)?;
        let now = self.clock().now();
        let bytes = self
            .store()
            .read(&key, now, deadline)
            .await?
            .ok_or_else(not_found)?;
        if bytes.starts_with(SETTLED) {
            return self
                .applied(&key, &bytes, marker, deadline)
                .await
                .ok_or_else(not_found);
        }
        let record = Record::decode(&bytes).map_err(|e| {
            LimitError::Unavailable(format!("reservation '{}' unreadable: {e}", excerpt(id)))
        })?;
        // Expired: settled as used (the store drops it soon by itself).
        if record.expires_at <= now {
            return Err(not_found());
        }
        let limits = record.limits().map_err(LimitError::Unavailable)?;
        let checks = settlement(&record, &limits, actual);
        let settled = self
            .store()
            .settle(&key, &checks, marker, self.clock().now(), deadline)
            .await?;
        if settled {
            self.answered(&key, deadline).await;
            return Ok(());
        }
        // Settled meanwhile: by a concurrent call, or by this one's own try whose reply the
        // store's link lost and sent again.
        let now = self.clock().now();
        match self.store().read(&key, now, deadline).await? {
            Some(bytes) => self.applied(&key, &bytes, marker, deadline).await,
            None => None,
        }
        .ok_or_else(not_found)
    }

    /// A settlement found the marker `bytes`: `Some` (answered OK) if it is this settlement's,
    /// applied by a try whose answer was lost.
    async fn applied(
        &self,
        key: &[u8],
        bytes: &[u8],
        marker: &[u8],
        deadline: Deadline,
    ) -> Option<()> {
        if bytes != marker {
            return None;
        }
        self.answered(key, deadline).await;
        Some(())
    }

    /// A success is being answered: drop the marker, so a later settlement finds nothing.
    /// Best effort: a marker left answers only the same settlement, and expires with the
    /// record's ttl.
    async fn answered(&self, key: &[u8], deadline: Deadline) {
        let _ = self.store().drop_marker(key, deadline).await;
    }
}

/// The checks that settle every hold of `record` at `actual` hits (`limits`: its holds').
fn settlement<'a>(record: &'a Record, limits: &'a [Limit], actual: u64) -> Vec<Check<'a>> {
    record
        .holds
        .iter()
        .zip(limits)
        .enumerate()
        .filter_map(|(i, (h, l))| h.settle(l, actual, i as u32))
        .collect()
}

#[cfg(test)]
mod tests;
