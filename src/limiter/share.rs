//! The RLQS share: how many requests one Envoy may admit for one bucket before it hears from
//! sluice again. Pure: no I/O, no clock (time is passed in); `service::rlqs` runs it against
//! the store. ALGORITHMS.md ("RLQS: shares and the bound") gives the reasoning; in short:
//!
//! - A **grant** of `k` tokens is charged to the store *when it is given* (a reservation, refused
//!   by the store when fewer than `k` remain), and handed to Envoy as a token bucket that does
//!   not refill. So the tokens of every grant in force, on every Envoy and every replica, never
//!   add up to more than the limit: the store's atomic charge is the only arbiter.
//! - A report's `num_requests_allowed` is first set against the stream's outstanding grant
//!   ([`Ledger::settle`]); what exceeds it was admitted without a grant (the first request of a
//!   new bucket, or Envoy's fallback behaviours) and is charged as consumed, never refused.
//! - A stream gets a new grant only when its last one is used up, or void because its window
//!   ended ([`Ledger::renew`]): Envoy keeps the tokens it holds until then, and replacing a
//!   bucket that still had tokens would lose them after they were charged.
//! - The size of a grant ([`share`]) is the stream's part of what remains in proportion to its
//!   demand (allowed + denied in its last report) against the demand of the other streams of
//!   the bucket, at least 1 while anything remains, and at most [`HEADROOM`] times its own
//!   demand or half of what remains, whichever is more, so that one Envoy does not hold what
//!   the others (including those not yet heard of) will ask for.

use std::collections::HashMap;

use crate::model::Micros;

/// A grant covers at most this many times the demand of the stream's last report interval
/// (or half of what remains, if that is more).
pub(crate) const HEADROOM: u64 = 2;

/// What sluice granted one stream for one bucket and has not yet seen used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ledger {
    /// Tokens granted and not yet reported used.
    pub outstanding: u64,
    /// When the grant's tokens stop counting against the window they were charged to (the end
    /// of a fixed or calendar window); `None` when they never do (token buckets, sliding
    /// windows: the store itself frees capacity over time).
    pub ends: Option<Micros>,
    /// Grants made so far: each grant's token bucket differs from the last by it, because
    /// Envoy keeps its bucket (and the tokens in it) when an assignment repeats the same one.
    pub generation: u64,
}

impl Ledger {
    /// Sets the `allowed` requests of a report against the outstanding grant; returns those
    /// admitted beyond it, to be charged as consumed.
    pub(crate) fn settle(&mut self, allowed: u64) -> u64 {
        let covered = allowed.min(self.outstanding);
        self.outstanding -= covered;
        allowed - covered
    }

    /// Whether a new grant should replace the current one at `now`: the current one is used
    /// up, or its window has ended.
    pub(crate) fn renew(&self, now: Micros) -> bool {
        self.outstanding == 0 || self.ends.is_some_and(|end| now >= end)
    }

    /// Records a new grant of `tokens` (0: a denial) whose tokens count until `ends`. Tokens
    /// left from a grant whose window ended are void (Envoy's bucket is replaced); any of
    /// them used meanwhile are reported later and charged to the new window.
    pub(crate) fn grant(&mut self, tokens: u64, ends: Option<Micros>) {
        self.outstanding = tokens;
        self.ends = ends;
        self.generation = self.generation.wrapping_add(1);
    }
}

/// The tokens to grant a stream whose last report showed `own` requests (allowed + denied)
/// when the bucket's other streams showed `others` and `remaining` is left of the limit: its
/// part of `remaining` in proportion to demand (rounded down), at least 1 while anything
/// remains (an Envoy with demand is never starved), at most [`HEADROOM`] × its demand or half
/// of `remaining`, whichever is more (a lone Envoy's first grant is not held to its one first
/// request, nor does it take everything).
pub(crate) fn share(remaining: u64, own: u64, others: u64) -> u64 {
    if remaining == 0 {
        return 0;
    }
    let own = own.max(1);
    let total = u128::from(own) + u128::from(others);
    let part = (u128::from(remaining) * u128::from(own) / total) as u64;
    let cap = own.saturating_mul(HEADROOM).max(remaining / 2);
    part.max(1).min(cap).min(remaining)
}

/// The demand of each stream per bucket, for [`share`]. Entries older than the `ttl` given to
/// [`Demands::others`] do not count; a stream that ends removes its own.
#[derive(Debug, Default)]
pub(crate) struct Demands {
    /// Bucket (its storage key) -> (stream, demand, when reported). Keys come from clients:
    /// a seeded hash (foldhash's, as the memory store's), cheaper than SipHash.
    by_bucket: HashMap<Vec<u8>, Vec<(u64, u64, Micros)>, foldhash::quality::RandomState>,
}

impl Demands {
    /// Records `stream`'s demand for `bucket` at `now`.
    pub(crate) fn set(&mut self, bucket: &[u8], stream: u64, demand: u64, now: Micros) {
        // Looked up before inserting: a bucket's key is copied once, not on every report. A
        // new list holds one stream (most buckets have one), not `Vec`'s first four.
        let Some(list) = self.by_bucket.get_mut(bucket) else {
            self.by_bucket
                .insert(bucket.to_vec(), vec![(stream, demand, now)]);
            return;
        };
        match list.iter_mut().find(|(s, ..)| *s == stream) {
            Some(e) => *e = (stream, demand, now),
            None => list.push((stream, demand, now)),
        }
    }

    /// The demand of the other streams of `bucket` reported within `ttl` of `now`.
    pub(crate) fn others(&self, bucket: &[u8], stream: u64, now: Micros, ttl: Micros) -> u64 {
        self.by_bucket.get(bucket).map_or(0, |list| {
            list.iter()
                .filter(|(s, _, at)| *s != stream && now - *at <= ttl)
                .fold(0u64, |sum, (_, d, _)| sum.saturating_add(*d))
        })
    }

    /// Forgets `stream`'s demand for `bucket` (the stream ended or dropped the bucket).
    pub(crate) fn remove(&mut self, bucket: &[u8], stream: u64) {
        if let Some(list) = self.by_bucket.get_mut(bucket) {
            list.retain(|(s, ..)| *s != stream);
            if list.is_empty() {
                self.by_bucket.remove(bucket);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_bucket.is_empty()
    }
}

#[cfg(test)]
mod tests;
