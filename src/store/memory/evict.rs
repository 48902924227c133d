//! Making room in a shard: expired entries reclaimed, victims chosen in the order the store's
//! module doc gives, and the table's own bytes re-read after it changes.

use std::sync::atomic::Ordering;

use super::{size, MemoryStats, MemoryStore, Shard, Slot, EVICTION_PROBE};
use crate::model::Micros;

/// Reads the table's allocation into the shard's and the store's bytes.
pub(super) fn reread_table(shard: &mut Shard, stats: &MemoryStats) {
    let table = size::allocated(shard.map.allocation_size());
    if table != shard.table {
        shard.bytes = shard.bytes - shard.table + table;
        stats.bytes.fetch_add(table, Ordering::Relaxed);
        stats.bytes.fetch_sub(shard.table, Ordering::Relaxed);
        shard.table = table;
    }
}

pub(super) fn reclaim_expired(shard: &mut Shard, now: Micros, stats: &MemoryStats) -> usize {
    let before = shard.map.len();
    let mut freed = 0;
    shard.map.retain(|(_, slot)| {
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
pub(super) fn evict_one(
    shard: &mut Shard,
    now: Micros,
    store: &MemoryStore,
    keep: Option<&[u8]>,
) -> bool {
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
        .filter(|(k, _)| keep != Some(&**k))
        .take(EVICTION_PROBE)
        .min_by_key(|(_, slot)| rank(slot))
        .map(|(k, slot)| (k.clone(), rank(slot).0));
    let Some((key, class)) = victim else {
        return false;
    };
    if let Ok(entry) = shard.map.find_entry(store.hash(&key), |e| e.0 == key) {
        let ((_, slot), _) = entry.remove();
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
