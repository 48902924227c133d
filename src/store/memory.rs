//! The embedded in-memory store: sharded maps behind short synchronous locks.
//!
//! A request's checks lock the shards they touch in ascending order (so two requests can
//! never deadlock), run the shared [`batch`](super::batch) policy, and unlock; no lock is ever
//! held across an await. Memory is bounded: entries carry an expiry after which they are
//! equivalent to no state, [`MemoryStore::sweep`] reclaims them, and a hard cap on entries
//! evicts (preferring expired entries, then entries that are not over their limit) and counts
//! every eviction.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::State;
use crate::model::Micros;

use super::batch::{self, StateTable, Verdict};
use super::{Check, Store, StoreError};

const SHARDS: usize = 64;
/// How many entries an eviction looks at to find one that is not over its limit.
const EVICTION_PROBE: usize = 16;

/// Limits and counters of the in-memory store.
#[derive(Debug, Default)]
pub struct MemoryStats {
    pub entries: AtomicUsize,
    pub evictions: AtomicU64,
    /// Evictions that forgot a key that was over its limit at the time.
    pub evictions_over_limit: AtomicU64,
    pub expired_reclaimed: AtomicU64,
}

struct Slot {
    state: State,
    expires_at: Micros,
}

struct Shard {
    map: HashMap<Box<[u8]>, Slot>,
}

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    cap_per_shard: usize,
    stats: MemoryStats,
}

impl MemoryStore {
    /// A store holding at most about `max_entries` keys.
    pub fn new(max_entries: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::new(),
                })
            })
            .collect();
        MemoryStore {
            shards,
            hasher: RandomState::new(),
            cap_per_shard: max_entries.div_ceil(SHARDS).max(1),
            stats: MemoryStats::default(),
        }
    }

    pub fn stats(&self) -> &MemoryStats {
        &self.stats
    }

    pub fn len(&self) -> usize {
        self.stats.entries.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry that has expired at `now`; returns how many.
    pub fn sweep(&self, now: Micros) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let before = shard.map.len();
            shard.map.retain(|_, slot| slot.expires_at > now);
            removed += before - shard.map.len();
        }
        self.stats.entries.fetch_sub(removed, Ordering::Relaxed);
        self.stats
            .expired_reclaimed
            .fetch_add(removed as u64, Ordering::Relaxed);
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
        (self.hasher.hash_one(key) as usize) % self.shards.len()
    }
}

impl Store for MemoryStore {
    async fn decide(&self, checks: &[Check<'_>], now: Micros) -> Result<Vec<Verdict>, StoreError> {
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
        let cap = self.store.cap_per_shard;
        let stats = &self.store.stats;
        let checks = self.checks;
        let Some((_, shard)) = self.guards.iter_mut().find(|(i, _)| *i == id) else {
            return;
        };
        if let Some(slot) = shard.map.get_mut(key) {
            slot.state = state;
            slot.expires_at = expires_at;
            return;
        }
        if shard.map.len() >= cap {
            evict_one(shard, now, stats, checks);
        }
        shard.map.insert(key.into(), Slot { state, expires_at });
        stats.entries.fetch_add(1, Ordering::Relaxed);
    }
}

/// Makes room for one entry in a full shard.
fn evict_one(shard: &mut Shard, now: Micros, stats: &MemoryStats, checks: &[Check<'_>]) {
    let before = shard.map.len();
    shard.map.retain(|_, slot| slot.expires_at > now);
    let reclaimed = before - shard.map.len();
    if reclaimed > 0 {
        stats.entries.fetch_sub(reclaimed, Ordering::Relaxed);
        stats
            .expired_reclaimed
            .fetch_add(reclaimed as u64, Ordering::Relaxed);
        return;
    }
    // No expired entry: prefer a victim that is not over its limit. The store does not keep
    // each entry's limit, so "over its limit" is judged by whether the state is at its cap for
    // any check of this request that shares the key, else by a remaining allowance under a
    // limit of the same algorithm; entries whose state says nothing are evicted first.
    let victim = shard
        .map
        .iter()
        .take(EVICTION_PROBE)
        .find(|(k, slot)| !looks_over_limit(k, &slot.state, now, checks))
        .or_else(|| shard.map.iter().next())
        .map(|(k, slot)| (k.clone(), looks_over_limit(k, &slot.state, now, checks)));
    if let Some((key, over)) = victim {
        shard.map.remove(&key);
        stats.entries.fetch_sub(1, Ordering::Relaxed);
        stats.evictions.fetch_add(1, Ordering::Relaxed);
        if over {
            stats.evictions_over_limit.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(
            target: "sluice::store::memory",
            "in-memory store is full: evicted one key (raise --memory-max-entries)"
        );
    }
}

fn looks_over_limit(key: &[u8], state: &State, now: Micros, checks: &[Check<'_>]) -> bool {
    checks
        .iter()
        .find(|c| c.key == key)
        .is_some_and(|c| crate::algorithm::is_over_limit(c.limit, state, c.limit.frame(now)))
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
}
