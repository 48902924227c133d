//! The bytes RLQS buckets hold, and their two caps: `--rlqs-max-bytes-per-stream` and
//! `--rlqs-max-bytes`. A bucket holds its id twice: the stream's map key and its share key (a
//! storage key: escaped, up to three bytes per id byte), with its demand entry; the request it
//! is assessed as is built for each assessment, and its limits are kept as a hash. Each of these heap blocks is counted as the
//! allocator rounds it ([`allocated`], the in-memory store's rule), with the table slots.
//!
//! A new bucket is counted before it is kept, its storage keys as planned then (so a report
//! cannot overshoot the caps by its keys); once assessed, by what it holds. A stream also keeps
//! buffers as large as the largest report it read and answer it sent (tonic's decode and
//! encode buffers, and the h2 frames): twice each is counted (measured: about that).

use std::mem::size_of;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tonic::Status;

use super::assign::{matched, BucketState, Matched};
use super::bucket::Key;
use super::Shared;
use crate::limiter::Limiter;
use crate::metrics::RlqsMetrics;
use crate::model::{Micros, Request};
use crate::rules::RuleSet;
use crate::store::memory::size::allocated;
use crate::store::{Deadline, Store};

/// A hash table keeps up to about twice as many slots as entries (it doubles when full).
const SLOTS_PER_ENTRY: usize = 2;
/// A demand list's first allocation (one stream: `Demands::set`).
const DEMAND_LIST: usize = size_of::<(u64, u64, Micros)>();

/// What `id` and its state `b` hold; `planned`: the storage keys' bytes of a bucket not yet
/// assessed ([`keys_bytes`] of its plan).
pub(crate) fn bucket_bytes(id: &[u8], b: &BucketState, planned: usize) -> usize {
    let slot = SLOTS_PER_ENTRY * (size_of::<(Key, BucketState)>() + 1);
    let keys = match &b.matched {
        None => planned,
        Some(m) => keys_bytes(m, b.share_key.as_ref().map_or(0, Vec::len)),
    };
    slot + allocated(id.len()) + keys
}

/// The bytes the storage keys of a new bucket's `request` will hold once it is assessed
/// ([`keys_bytes`] of its plan; 0 if it cannot be planned).
pub(crate) fn planned_key_bytes<S: Store>(
    limiter: &Limiter<S>,
    rules: &RuleSet,
    request: &Request,
) -> usize {
    let Ok(plan) = limiter.plan(rules, request, Deadline::NONE) else {
        return 0;
    };
    let share = plan.planned.first().map_or(0, |p| plan.key(p).len());
    keys_bytes(&matched(&plan, false), share)
}

/// What a bucket that matched `m` holds for its keys: its share key of `share` bytes twice (in
/// the bucket and in the shared demands, with a slot and a list there). Its limits and their
/// storage keys are only hashed ([`Matched`]).
pub(crate) fn keys_bytes(m: &Matched, share: usize) -> usize {
    if !matches!(m, Matched::Limited { .. }) {
        return 0;
    }
    let demand_slot = SLOTS_PER_ENTRY * (size_of::<(Vec<u8>, Vec<(u64, u64, Micros)>)>() + 1);
    2 * allocated(share) + demand_slot + allocated(DEMAND_LIST)
}

/// One stream's bytes, taken from both caps; given back when it is dropped.
pub(crate) struct Account {
    shared: Arc<Shared>,
    metrics: Arc<RlqsMetrics>,
    per_stream: usize,
    total: usize,
    held: usize,
    /// The largest encoded report read and answer sent.
    largest: (usize, usize),
}

impl Account {
    pub(crate) fn new(
        shared: Arc<Shared>,
        metrics: Arc<RlqsMetrics>,
        per_stream: usize,
        total: usize,
    ) -> Self {
        Account {
            shared,
            metrics,
            per_stream,
            total,
            held: 0,
            largest: (0, 0),
        }
    }

    /// Counts the buffers of a report of `read` bytes or an answer of `sent` (0: none).
    pub(crate) fn message(&mut self, read: usize, sent: usize) {
        let before = 2 * (self.largest.0 + self.largest.1);
        self.largest = (self.largest.0.max(read), self.largest.1.max(sent));
        self.recount(before, 2 * (self.largest.0 + self.largest.1));
    }

    /// Takes `n` bytes for a new bucket, or refuses (RESOURCE_EXHAUSTED naming the cap's flag)
    /// and takes nothing.
    pub(crate) fn take(&mut self, n: usize) -> Result<(), Status> {
        if self.held + n > self.per_stream {
            return Err(Status::resource_exhausted(format!(
                "the stream's buckets would hold {} bytes, more than {} (--rlqs-max-bytes-per-stream)",
                self.held + n,
                self.per_stream
            )));
        }
        let before = self.shared.bytes.fetch_add(n, Ordering::SeqCst);
        if before + n > self.total {
            self.shared.bytes.fetch_sub(n, Ordering::SeqCst);
            return Err(Status::resource_exhausted(format!(
                "the buckets of every RLQS stream would hold more than {} bytes (--rlqs-max-bytes)",
                self.total
            )));
        }
        self.held += n;
        self.metrics.bytes.add(n as i64, &[]);
        Ok(())
    }

    /// Re-counts a bucket that held `from` bytes and holds `to` now (an assessed bucket is
    /// counted by what it holds, even past a cap: the next new bucket is then refused).
    pub(crate) fn recount(&mut self, from: usize, to: usize) {
        if to >= from {
            self.shared.bytes.fetch_add(to - from, Ordering::SeqCst);
            self.held += to - from;
        } else {
            self.release(from - to);
            return;
        }
        self.metrics.bytes.add((to - from) as i64, &[]);
    }

    /// Gives back `n` bytes (a bucket dropped).
    pub(crate) fn release(&mut self, n: usize) {
        let n = n.min(self.held);
        self.held -= n;
        self.shared.bytes.fetch_sub(n, Ordering::SeqCst);
        self.metrics.bytes.add(-(n as i64), &[]);
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.release(self.held);
    }
}
