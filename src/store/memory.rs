//! The embedded in-memory store: sharded maps behind short synchronous locks.
//!
//! A request's checks lock the shards they touch in ascending order (so two requests can
//! never deadlock), run the shared [`batch`](super::batch) policy, and unlock; no lock is ever
//! held across an await.
//!
//! # Memory bound
//!
//! Two hard caps, split evenly over the shards: a number of keys (`--memory-max-entries`) and
//! an estimate of their bytes (key, state and bookkeeping; `--memory-max-bytes`), so that
//! neither many keys nor long keys chosen by clients can grow the process without bound.
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

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::{distinct, Ask, State};
use crate::model::Micros;

use super::batch::{self, StateTable, Verdict};
use super::{Check, Deadline, Store, StoreError};

const SHARDS: usize = 64;
/// Keys come from clients, so the maps keep a seeded hash with DoS resistance (foldhash's
/// quality variant: a fraction of SipHash's cost, which was ~1.5k instructions a request).
type RandomState = foldhash::quality::RandomState;
/// How many entries an eviction looks at to choose its victim.
pub const EVICTION_PROBE: usize = 16;
/// Bookkeeping bytes per entry besides its key and state (map slot, boxed key, slot fields).
const ENTRY_OVERHEAD: usize = std::mem::size_of::<(Box<[u8]>, Slot)>() + 16;

/// Limits and counters of the in-memory store.
#[derive(Debug, Default)]
pub struct MemoryStats {
    pub entries: AtomicUsize,
    /// Estimated bytes of every entry (key, state, bookkeeping).
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
    bytes: usize,
}

struct Shard {
    map: HashMap<Box<[u8]>, Slot, RandomState>,
    bytes: usize,
    /// Evictions left before the next full pass over the shard for expired entries.
    sweep_credit: usize,
}

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    cap_per_shard: usize,
    bytes_per_shard: usize,
    stats: MemoryStats,
}

impl MemoryStore {
    /// A store holding at most about `max_entries` keys (and no byte cap).
    pub fn new(max_entries: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::default(),
                    bytes: 0,
                    sweep_credit: 0,
                })
            })
            .collect();
        MemoryStore {
            shards,
            hasher: RandomState::default(),
            cap_per_shard: max_entries.div_ceil(SHARDS).max(1),
            bytes_per_shard: usize::MAX,
            stats: MemoryStats::default(),
        }
    }

    /// Caps the estimated bytes too. The cap is split over the shards, and a shard always
    /// keeps the entry just written, so the bound is the larger of `max_bytes` and 64 times the
    /// largest entry (which the request limits bound).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.bytes_per_shard = (max_bytes / SHARDS).max(1);
        self
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

    /// Estimated bytes held.
    pub fn bytes(&self) -> usize {
        self.stats.bytes.load(Ordering::Relaxed)
    }

    /// Drops every entry that has expired at `now`; returns how many.
    pub fn sweep(&self, now: Micros) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            removed += reclaim_expired(&mut lock(shard), now, &self.stats);
        }
        removed
    }

    /// Decides synchronously (the memory store never waits).
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
        let bytes = key.len() + state_bytes(&state) + ENTRY_OVERHEAD;
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
            shard.bytes = shard.bytes - old + bytes;
            store.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
            store.stats.bytes.fetch_sub(old, Ordering::Relaxed);
            while shard.bytes > store.bytes_per_shard && shard.map.len() > 1 {
                if !evict_one(shard, now, store, Some(key)) {
                    break;
                }
            }
            return;
        }
        while !shard.map.is_empty()
            && (shard.map.len() >= store.cap_per_shard
                || shard.bytes.saturating_add(bytes) > store.bytes_per_shard)
        {
            if !evict_one(shard, now, store, None) {
                break;
            }
        }
        shard.map.insert(key.into(), slot);
        shard.bytes += bytes;
        store.stats.entries.fetch_add(1, Ordering::Relaxed);
        store.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
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

/// Heap bytes of a state beyond its inline size.
fn state_bytes(state: &State) -> usize {
    let words = |n: usize| n * 8;
    match state {
        State::FixedWindow(_) | State::Bucket(_) => 0,
        State::SlidingWindow(s) => words(s.counts.capacity()),
        State::SlidingLog(s) => words(s.log.capacity()),
        State::Distinct(s) => match &s.values {
            distinct::Values::Exact(v) => words(v.capacity()),
            distinct::Values::Hll(r) => r.len(),
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Ask, Limit};
    use crate::store::Charge;

    #[test]
    fn expired_entries_are_swept() {
        let s = MemoryStore::new(1000);
        let l = Limit::fixed_window(5, 1_000_000);
        let c = [Check {
            key: b"k",
            limit: &l,
            ask: Ask::take(1),
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error: None,
        }];
        s.decide_now(&c, 0);
        assert_eq!(s.len(), 1);
        assert_eq!(s.sweep(999_999), 0);
        assert_eq!(s.sweep(1_000_000), 1);
        assert!(s.is_empty());
    }

    #[test]
    fn the_cap_holds_and_evictions_are_counted() {
        let s = MemoryStore::new(SHARDS * 2);
        let l = Limit::fixed_window(5, 60_000_000);
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            let c = [Check {
                key: &key,
                limit: &l,
                ask: Ask::take(1),
                charge: Charge::IfAdmitted,
                group: 0,
                quota: false,
                on_error: None,
            }];
            assert!(s.decide_now(&c, 0)[0].allowed);
        }
        assert!(s.len() <= SHARDS * 2, "{} entries", s.len());
        assert!(s.stats().evictions.load(Ordering::Relaxed) >= 10_000 - (SHARDS as u64) * 2);
    }

    fn take_one(s: &MemoryStore, key: &[u8], l: &Limit, now: Micros) -> bool {
        let c = [Check {
            key,
            limit: l,
            ask: Ask::take(1),
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error: None,
        }];
        s.decide_now(&c, now)[0].allowed
    }

    /// A flood of fresh keys evicts keys within their limits, never one over its limit, as
    /// long as the probe finds another victim; over-limit keys stay limited.
    #[test]
    fn keys_over_their_limit_outlive_a_flood_of_new_keys() {
        let s = MemoryStore::new(SHARDS * 8);
        let strict = Limit::fixed_window(1, 60_000_000);
        let loose = Limit::fixed_window(100, 60_000_000);
        // 64 attackers, each now over its limit of 1.
        let attackers: Vec<Vec<u8>> = (0..64u32).map(|i| format!("a{i}").into_bytes()).collect();
        for a in &attackers {
            assert!(take_one(&s, a, &strict, 0));
            assert!(!take_one(&s, a, &strict, 1));
        }
        for i in 0..20_000u32 {
            take_one(&s, &i.to_be_bytes(), &loose, 2);
        }
        assert!(s.len() <= s.max_entries());
        assert!(s.stats().evictions.load(Ordering::Relaxed) > 10_000);
        let forgot = s.stats().evictions_over_limit.load(Ordering::Relaxed);
        let still_limited = attackers
            .iter()
            .filter(|a| !take_one(&s, a, &strict, 3))
            .count() as u64;
        // Every attacker either is still limited or was counted when forgotten.
        assert_eq!(still_limited + forgot, 64, "forgot {forgot}");
        assert!(still_limited >= 60, "only {still_limited} still limited");
    }

    /// When every probed entry is over its limit, one is evicted anyway and counted.
    #[test]
    fn evicting_an_over_limit_key_is_counted() {
        let s = MemoryStore::new(SHARDS);
        let zero_after_one = Limit::fixed_window(1, 60_000_000);
        for i in 0..1_000u32 {
            take_one(&s, &i.to_be_bytes(), &zero_after_one, 0);
        }
        assert!(s.len() <= SHARDS);
        assert_eq!(
            s.stats().evictions.load(Ordering::Relaxed),
            s.stats().evictions_over_limit.load(Ordering::Relaxed)
        );
        assert!(s.stats().evictions_over_limit.load(Ordering::Relaxed) >= 1_000 - SHARDS as u64);
    }

    /// Long keys hit the byte cap long before the key cap; expired entries go first.
    #[test]
    fn the_byte_cap_holds_for_long_keys() {
        // 256 KiB per shard: three of these keys each.
        let max_bytes = 16 << 20;
        let s = MemoryStore::new(1_000_000).with_max_bytes(max_bytes);
        let l = Limit::fixed_window(5, 1_000_000);
        for i in 0..2_000u32 {
            let mut key = vec![b'x'; 64 * 1024];
            key.extend_from_slice(&i.to_be_bytes());
            take_one(&s, &key, &l, 0);
            assert!(s.bytes() <= max_bytes, "{} bytes", s.bytes());
        }
        assert!(s.len() <= 3 * SHARDS, "{} entries", s.len());
        // A second later every entry has expired: new keys reclaim them instead of evicting
        // (three keys: even all in one shard they fit once its expired entries are gone).
        let evictions = s.stats().evictions.load(Ordering::Relaxed);
        for i in 0..3u32 {
            let mut key = vec![b'y'; 64 * 1024];
            key.extend_from_slice(&i.to_be_bytes());
            take_one(&s, &key, &l, 1_000_000);
        }
        assert_eq!(s.stats().evictions.load(Ordering::Relaxed), evictions);
        assert!(s.stats().expired_reclaimed.load(Ordering::Relaxed) > 0);
    }

    /// The accounted bytes of one active key per algorithm, for a typical 54-byte key and 100
    /// requests per second: the table of ALGORITHMS.md ("Memory per key"), which must change
    /// with it.
    #[test]
    fn accounted_bytes_per_key() {
        use crate::algorithm::Algorithm::*;
        // (algorithm, key length, accounted bytes)
        let table = [
            (FixedWindow, 54, 150),
            (SlidingWindow, 61, 245),
            (SlidingLog, 53, 157),
            (TokenBucket, 54, 150),
            (LeakyBucket, 54, 150),
            (Gcra, 46, 142),
            (Distinct, 50, 154),
        ];
        assert_eq!(table.len(), crate::algorithm::Algorithm::ALL.len());
        let mut key = Vec::new();
        let parts = [crate::store::key::Part::Value {
            key: b"api_key",
            value: b"k12345",
        }];
        for (algorithm, key_len, bytes) in table {
            let l = Limit::new(algorithm, 100, 1_000_000);
            crate::store::key::build(&mut key, b"", "bench0", parts, &l, None);
            let s = MemoryStore::new(1000);
            let c = [Check {
                key: &key,
                limit: &l,
                ask: Ask {
                    value: 7,
                    ..Ask::take(1)
                },
                charge: Charge::IfAdmitted,
                group: 0,
                quota: false,
                on_error: None,
            }];
            s.decide_now(&c, 0);
            assert_eq!(
                (key.len(), s.bytes()),
                (key_len, bytes),
                "{}",
                algorithm.as_str()
            );
        }
    }
}
