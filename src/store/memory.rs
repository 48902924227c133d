//! The embedded in-memory store: sharded maps behind short synchronous locks.
//!
//! A request's checks lock the shards they touch in ascending order (so two requests can
//! never deadlock), run the shared [`batch`] policy, and unlock; no lock is ever
//! held across an await.
//!
//! # Memory bound
//!
//! Two hard caps, split evenly over the shards: a number of keys (`--memory-max-entries`) and
//! their bytes (`--memory-max-bytes`), so that neither many keys nor long keys chosen by
//! clients can grow the process without bound. The bytes are those the process holds (see
//! [`size`]): every key's and state's heap block as the allocator rounds it, and each shard's
//! hash table as allocated, free slots included, read after every insert. A new key makes
//! room first for itself and for the table's growth when the table is full; a table that grew
//! anyway (hashbrown also grows when deleted slots fill it) gives back entries right after.
//! Entries carry an expiry after which they are equivalent to no state (a window that ended,
//! a bucket that refilled to full); [`MemoryStore::sweep`] reclaims them periodically. When a
//! shard is full, eviction picks, in this order:
//!
//! 1. expired entries: all of the shard's at once (at most once per eighth of its capacity of
//!    evictions, so a flood of new keys costs O(1) amortized per insert), else one found
//!    among a few probed entries; forgetting them changes no decision;
//! 2. among [`EVICTION_PROBE`] probed entries, one not over its limit, the one closest to
//!    expiring (forgetting it grants at most its remaining usage again);
//! 3. otherwise the probed entry over its limit that would be allowed again soonest. This
//!    one forgets a client that is being limited: it is counted in
//!    [`MemoryStats::evictions_over_limit`] and logged (logs at powers of two, so a flood
//!    cannot flood the log).
//!
//! Whether an entry is over its limit is computed when it is written (the limit is known
//! then) and kept as the time until which it stays over.

pub(crate) mod size;
#[cfg(test)]
mod tests;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::{Ask, State};
use crate::model::Micros;

use super::batch::{self, StateTable, Verdict};
use super::records::Records;
use super::{Check, Deadline, Store, StoreError};

const SHARDS: usize = 64;
/// Keys come from clients, so the maps keep a seeded hash with DoS resistance (foldhash's
/// quality variant: a fraction of SipHash's cost, which was ~1.5k instructions a request).
type RandomState = foldhash::quality::RandomState;
/// A table slot and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(Box<[u8]>, Slot)>() + 1;
/// How many entries an eviction looks at to choose its victim.
pub const EVICTION_PROBE: usize = 16;

/// Limits and counters of the in-memory store.
#[derive(Debug, Default)]
pub struct MemoryStats {
    pub entries: AtomicUsize,
    /// Bytes of every entry and table (see [`size`]).
    pub bytes: AtomicUsize,
    /// Entries evicted before they expired, because the store was full.
    pub evictions: AtomicU64,
    /// Evictions that forgot a key that was over its limit at the time.
    pub evictions_over_limit: AtomicU64,
    pub expired_reclaimed: AtomicU64,
}

struct Slot {
    state: State,
    expires_at: Micros,
    /// Until when the key is over its limit (in the past when it is not).
    over_until: Micros,
    /// The key's and state's heap blocks ([`size::entry_bytes`]).
    bytes: usize,
}

struct Shard {
    /// hashbrown's map rather than std's (the same table) for its `allocation_size`.
    map: hashbrown::HashMap<Box<[u8]>, Slot, RandomState>,
    /// Entries' bytes plus `table`.
    bytes: usize,
    /// The table's allocation when last read.
    table: usize,
    /// Evictions left before the next full pass over the shard for expired entries.
    sweep_credit: usize,
}

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    cap_per_shard: usize,
    /// `--memory-max-bytes`, shared by keys and reservation records.
    max_bytes: usize,
    stats: MemoryStats,
    /// The native API's reservation records ([`super::records`]).
    records: Records,
}

impl MemoryStore {
    /// A store holding at most about `max_entries` keys (and no byte cap).
    pub fn new(max_entries: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: hashbrown::HashMap::default(),
                    bytes: 0,
                    table: 0,
                    sweep_credit: 0,
                })
            })
            .collect();
        MemoryStore {
            shards,
            hasher: RandomState::default(),
            cap_per_shard: max_entries.div_ceil(SHARDS).max(1),
            max_bytes: usize::MAX,
            stats: MemoryStats::default(),
            records: Records::new(max_entries),
        }
    }

    pub fn records(&self) -> &Records {
        &self.records
    }

    /// Caps the bytes too. The cap is split over the shards, and a shard always keeps the
    /// entry just written, so the bound is the larger of `max_bytes` and 64 times the largest
    /// entry (which the request limits bound). Reservation records may take half of it; the
    /// keys get what they leave.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self.records = self.records.with_max_bytes(max_bytes / 2);
        self
    }

    /// A shard's share of the bytes the records leave.
    fn bytes_per_shard(&self) -> usize {
        (self.max_bytes.saturating_sub(self.records.bytes()) / SHARDS).max(1)
    }

    /// Evicts keys from the shards over their share (records took more of the cap).
    pub fn make_room(&self, now: Micros) {
        if self.stats.bytes.load(Ordering::Relaxed)
            <= self.max_bytes.saturating_sub(self.records.bytes())
        {
            return;
        }
        let cap = self.bytes_per_shard();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            while shard.bytes > cap && !shard.map.is_empty() {
                if !evict_one(&mut shard, now, self, None) {
                    break;
                }
                // The table is most of a shard of short keys: it must shrink too.
                if shard.map.len() * 4 * SLOT_BYTES < shard.table {
                    let len = shard.map.len();
                    shard.map.shrink_to(len * 2);
                    reread_table(&mut shard, &self.stats);
                }
            }
        }
    }

    pub fn stats(&self) -> &MemoryStats {
        &self.stats
    }

    /// The key cap (rounded up to a multiple of the shard count).
    pub fn max_entries(&self) -> usize {
        self.cap_per_shard * SHARDS
    }

    pub fn len(&self) -> usize {
        self.stats.entries.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held by entries, tables and reservation records.
    pub fn bytes(&self) -> usize {
        self.stats.bytes.load(Ordering::Relaxed) + self.records.bytes()
    }

    /// Drops every entry (and reservation record) that has expired at `now`, and halves tables
    /// left mostly empty; returns how many.
    pub fn sweep(&self, now: Micros) -> usize {
        let mut removed = self.records.sweep(now);
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            removed += reclaim_expired(&mut shard, now, &self.stats);
            // By bytes: `capacity()` omits the slots that deleted entries still block.
            if shard.map.len() * 4 * SLOT_BYTES < shard.table {
                let len = shard.map.len();
                shard.map.shrink_to(len * 2);
                reread_table(&mut shard, &self.stats);
            }
        }
        removed
    }

    /// Decides synchronously (the memory store never waits).
    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    pub fn decide_now(&self, checks: &[Check<'_>], now: Micros) -> Vec<Verdict> {
        let mut order: Vec<usize> = checks.iter().map(|c| self.shard_of(c.key)).collect();
        order.sort_unstable();
        order.dedup();
        let guards: Vec<(usize, MutexGuard<'_, Shard>)> = order
            .into_iter()
            .map(|i| (i, lock(&self.shards[i])))
            .collect();
        let mut table = Locked {
            store: self,
            guards,
            now,
            checks,
        };
        batch::decide(&mut table, checks, now)
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        // The high bits (multiply-shift), so the shard says nothing about the low bits the
        // shard's own map indexes by, even if the seeds were equal.
        let h = u128::from(self.hasher.hash_one(key));
        ((h * self.shards.len() as u128) >> 64) as usize
    }
}

impl Store for MemoryStore {
    async fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        _: Deadline,
    ) -> Result<Vec<Verdict>, StoreError> {
        Ok(self.decide_now(checks, now))
    }
}

/// Locks a shard; a poisoned lock (a panic elsewhere while holding it) still holds valid
/// counters, so keep serving.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Locked<'s, 'c> {
    store: &'s MemoryStore,
    guards: Vec<(usize, MutexGuard<'s, Shard>)>,
    now: Micros,
    checks: &'c [Check<'c>],
}

impl Locked<'_, '_> {
    fn shard(&self, key: &[u8]) -> Option<&Shard> {
        let id = self.store.shard_of(key);
        self.guards
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, g)| &**g)
    }
}

impl StateTable for Locked<'_, '_> {
    fn get(&self, key: &[u8]) -> Option<&State> {
        self.shard(key)?
            .map
            .get(key)
            .filter(|slot| slot.expires_at > self.now)
            .map(|slot| &slot.state)
    }

    fn put(&mut self, key: &[u8], state: State, expires_at: Micros) {
        let id = self.store.shard_of(key);
        let now = self.now;
        let store = self.store;
        let over_until = over_until(key, &state, now, self.checks);
        let bytes = size::entry_bytes(key, &state);
        let Some((_, shard)) = self.guards.iter_mut().find(|(i, _)| *i == id) else {
            return;
        };
        let slot = Slot {
            state,
            expires_at,
            over_until,
            bytes,
        };
        if let Some(existing) = shard.map.get_mut(key) {
            let old = std::mem::replace(existing, slot).bytes;
            // A state that grew (a longer log) may push the shard past its byte cap.
            if old == bytes {
                // The commonest put (a counter bumped in place): no shared write.
                return;
            }
            shard.bytes = shard.bytes - old + bytes;
            store.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
            store.stats.bytes.fetch_sub(old, Ordering::Relaxed);
            while shard.bytes > store.bytes_per_shard() && shard.map.len() > 1 {
                if !evict_one(shard, now, store, Some(key)) {
                    break;
                }
            }
            return;
        }
        loop {
            // A full table doubles on insert: count the new table too (the old one goes).
            let growth = if shard.map.len() >= shard.map.capacity() {
                shard.table
            } else {
                0
            };
            let over = shard.map.len() >= store.cap_per_shard
                || shard.bytes + bytes + growth > store.bytes_per_shard();
            if shard.map.is_empty() || !over || !evict_one(shard, now, store, None) {
                break;
            }
        }
        shard.map.insert(key.into(), slot);
        shard.bytes += bytes;
        store.stats.entries.fetch_add(1, Ordering::Relaxed);
        store.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        reread_table(shard, &store.stats);
        while shard.bytes > store.bytes_per_shard() && shard.map.len() > 1 {
            if !evict_one(shard, now, store, Some(key)) {
                break;
            }
        }
    }
}

/// Until when `state` (about to be stored under `key`) is over its limit: the retry-after of
/// one more hit, judged with the limit of the check that wrote it.
fn over_until(key: &[u8], state: &State, now: Micros, checks: &[Check<'_>]) -> Micros {
    let Some(c) = checks.iter().rev().find(|c| c.key == key) else {
        return Micros::MIN;
    };
    let o = crate::algorithm::evaluate(c.limit, Some(state), c.limit.frame(now), Ask::take(1));
    if o.allowed {
        Micros::MIN
    } else {
        now.saturating_add(o.reset.max(1))
    }
}

/// Reads the table's allocation into the shard's and the store's bytes.
fn reread_table(shard: &mut Shard, stats: &MemoryStats) {
    let table = size::allocated(shard.map.allocation_size());
    if table != shard.table {
        shard.bytes = shard.bytes - shard.table + table;
        stats.bytes.fetch_add(table, Ordering::Relaxed);
        stats.bytes.fetch_sub(shard.table, Ordering::Relaxed);
        shard.table = table;
    }
}

fn reclaim_expired(shard: &mut Shard, now: Micros, stats: &MemoryStats) -> usize {
    let before = shard.map.len();
    let mut freed = 0;
    shard.map.retain(|_, slot| {
        let keep = slot.expires_at > now;
        if !keep {
            freed += slot.bytes;
        }
        keep
    });
    let removed = before - shard.map.len();
    shard.bytes -= freed;
    stats.entries.fetch_sub(removed, Ordering::Relaxed);
    stats.bytes.fetch_sub(freed, Ordering::Relaxed);
    stats
        .expired_reclaimed
        .fetch_add(removed as u64, Ordering::Relaxed);
    removed
}

/// Makes room in a full shard (see the module doc for the order); false when nothing could
/// be evicted (only `keep` is left).
fn evict_one(shard: &mut Shard, now: Micros, store: &MemoryStore, keep: Option<&[u8]>) -> bool {
    let stats = &store.stats;
    if shard.sweep_credit == 0 {
        shard.sweep_credit = store.cap_per_shard / 8 + 1;
        if reclaim_expired(shard, now, stats) > 0 {
            return true;
        }
    }
    // Rank: expired, then not over the limit (soonest to expire first), then over the limit
    // (soonest allowed again first).
    let rank = |slot: &Slot| {
        if slot.expires_at <= now {
            (0, slot.expires_at)
        } else if slot.over_until <= now {
            (1, slot.expires_at)
        } else {
            (2, slot.over_until)
        }
    };
    let victim = shard
        .map
        .iter()
        .filter(|(k, _)| keep != Some(&***k))
        .take(EVICTION_PROBE)
        .min_by_key(|(_, slot)| rank(slot))
        .map(|(k, slot)| (k.clone(), rank(slot).0));
    let Some((key, class)) = victim else {
        return false;
    };
    if let Some(slot) = shard.map.remove(&key) {
        shard.bytes -= slot.bytes;
        stats.bytes.fetch_sub(slot.bytes, Ordering::Relaxed);
    }
    stats.entries.fetch_sub(1, Ordering::Relaxed);
    if class == 0 {
        stats.expired_reclaimed.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    shard.sweep_credit -= 1;
    let n = stats.evictions.fetch_add(1, Ordering::Relaxed) + 1;
    if class == 2 {
        let over = stats.evictions_over_limit.fetch_add(1, Ordering::Relaxed) + 1;
        if over.is_power_of_two() {
            tracing::warn!(
                target: "sluice::store::memory",
                evictions_over_limit = over,
                "in-memory store is full: forgot a key that was over its limit (raise --memory-max-entries / --memory-max-bytes)"
            );
        }
    } else if n.is_power_of_two() {
        tracing::warn!(
            target: "sluice::store::memory",
            evictions = n,
            "in-memory store is full: evicted keys before they expired (raise --memory-max-entries / --memory-max-bytes)"
        );
    }
    true
}
