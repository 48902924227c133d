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

mod evict;
pub(crate) mod size;
#[cfg(test)]
mod tests;

use evict::{evict_one, reclaim_expired, reread_table};

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::{Ask, State};
use crate::model::Micros;

use super::batch::{self, StateTable, Verdict};
use super::records::Records;
use super::{Check, Deadline, Store, StoreError};

const SHARDS: usize = 64;
/// Where in a key's hash its shard is read: bits the shard's table reads neither for its
/// bucket (the low bits) nor for its control byte (the top 7), so that one hash per key
/// serves both without the keys of a shard sharing either.
const SHARD_SHIFT: u32 = 40;
/// Keys come from clients, so the maps keep a seeded hash with DoS resistance (foldhash's
/// quality variant: a fraction of SipHash's cost, which was ~1.5k instructions a request).
type RandomState = foldhash::quality::RandomState;
/// A key and its slot, as a shard's table holds them.
type Entry = (Box<[u8]>, Slot);
/// A table slot and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<Entry>() + 1;
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
    /// hashbrown's table rather than std's map (the same table): lookups by a hash computed
    /// once per request, and its `allocation_size`.
    map: hashbrown::HashTable<Entry>,
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
                    map: hashbrown::HashTable::new(),
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
                    shard.map.shrink_to(len * 2, |e| self.hash(&e.0));
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
                shard.map.shrink_to(len * 2, |e| self.hash(&e.0));
                reread_table(&mut shard, &self.stats);
            }
        }
        removed
    }

    /// Decides synchronously (the memory store never waits).
    #[inline(never)] // a stage the profile counts (bench/profile_memory.py)
    pub fn decide_now(&self, checks: &[Check<'_>], now: Micros) -> Vec<Verdict> {
        let mut at: Vec<(u64, usize)> = checks
            .iter()
            .map(|c| {
                let hash = self.hash(c.key);
                (hash, shard_of(hash))
            })
            .collect();
        let mut order: Vec<usize> = at.iter().map(|&(_, shard)| shard).collect();
        order.sort_unstable();
        order.dedup();
        for (_, shard) in &mut at {
            *shard = order.partition_point(|&s| s < *shard);
        }
        let guards = order.iter().map(|&i| lock(&self.shards[i])).collect();
        let mut table = Locked {
            store: self,
            guards,
            at,
            now,
            checks,
        };
        batch::decide(&mut table, checks, now)
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }
}

fn shard_of(hash: u64) -> usize {
    (hash >> SHARD_SHIFT) as usize % SHARDS
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
    /// The shards the checks' keys are in, locked in ascending order.
    guards: Vec<MutexGuard<'s, Shard>>,
    /// Per check: its key's hash and the index of its shard's guard.
    at: Vec<(u64, usize)>,
    now: Micros,
    checks: &'c [Check<'c>],
}

impl StateTable for Locked<'_, '_> {
    fn get(&self, i: usize, key: &[u8]) -> Option<&State> {
        let &(hash, guard) = self.at.get(i)?;
        self.guards[guard]
            .map
            .find(hash, |e| *e.0 == *key)
            .filter(|e| e.1.expires_at > self.now)
            .map(|e| &e.1.state)
    }

    fn put(&mut self, i: usize, key: &[u8], mut state: State, expires_at: Micros, open: bool) {
        let (Some(&(hash, guard)), Some(check)) = (self.at.get(i), self.checks.get(i)) else {
            return;
        };
        let now = self.now;
        let store = self.store;
        let over_until = if open {
            Micros::MIN
        } else {
            over_until(check, &state, now)
        };
        state.shrink();
        let bytes = size::entry_bytes(key, &state);
        let shard = &mut *self.guards[guard];
        let slot = Slot {
            state,
            expires_at,
            over_until,
            bytes,
        };
        if let Some((_, existing)) = shard.map.find_mut(hash, |e| *e.0 == *key) {
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
        shard
            .map
            .insert_unique(hash, (key.into(), slot), |e| store.hash(&e.0));
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

/// Until when `state` (about to be stored by check `c`) is over its limit: the retry-after
/// of one more hit, judged with the check's limit.
fn over_until(c: &Check<'_>, state: &State, now: Micros) -> Micros {
    let o = crate::algorithm::evaluate(c.limit, Some(state), c.limit.frame(now), Ask::take(1));
    if o.allowed {
        Micros::MIN
    } else {
        now.saturating_add(o.reset.max(1))
    }
}
