//! The local over-limit cache (`--local-cache N`): a key the backend found over its limit is
//! answered in process, without a round trip, until its retry time.
//!
//! * **What is cached**: a check the backend rejected, with the limit it was decided under (all
//!   of [`Limit`]: rate, window, algorithm, burst, precision, calendar), its hits and the time
//!   it could pass (`now + reset`, the retry-after). An entry answers a later check only if
//!   the limit is equal (so a raised limit after a reload, or a limit override, is never
//!   blocked by a stale entry: envoyproxy/ratelimit #1077), the ask is at least as many hits
//!   (more hits never pass sooner), and the time has not come.
//! * **When a request is answered locally**: only when *every* check of the request is known
//!   over. Such a request is rejected whatever the backend says (a rejected descriptor, or
//!   every quota descriptor rejected) and charges nothing, so the local answer is the one the
//!   backend would give. Any other request goes to the backend whole: one exact decision.
//! * **Never cached, never answered locally**: refunds, checks charged anyway (`charge:
//!   always`, `--charge-rejected`: every rejected request must be counted, which needs the
//!   backend), `distinct` limits (another value may pass), `concurrency` limits (a release
//!   at any instance frees leases long before the retry time), asks of 0 hits.
//! * **Invalidation**: a refund through this instance drops its key's entry, and so does any
//!   verdict of the backend that allows the key. Refunds through other instances are not seen:
//!   an entry may then reject until its retry time what the backend would admit (the price of
//!   not asking it).
//! * **Bounded**: at most `capacity` entries in 16 shards; a full shard first drops its expired
//!   entries (at most once a second), then an arbitrary one.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::Limit;
use crate::model::Micros;

use super::{Charge, Check, Deadline, Store, StoreError, Verdict};

const SHARDS: usize = 16;
const SWEEP_EVERY: Micros = 1_000_000;

struct Cached {
    limit: Limit,
    hits: u64,
    until: Micros,
}

#[derive(Default)]
struct Shard {
    map: HashMap<Box<[u8]>, Cached>,
    next_sweep: Micros,
}

/// A [`Store`] that answers known over-limit requests itself and passes the rest to `inner`.
pub struct LocalCache<S> {
    inner: S,
    per_shard: usize,
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
}

impl<S: Store> LocalCache<S> {
    /// A cache of at most `capacity` keys in front of `inner`; 0 turns it off.
    pub fn new(inner: S, capacity: usize) -> Self {
        LocalCache {
            inner,
            per_shard: capacity.div_ceil(SHARDS),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Keys held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        lock(&self.shards[i])
    }

    /// The verdicts of a request whose every check is known over its limit.
    fn lookup(&self, checks: &[Check<'_>], now: Micros) -> Option<Vec<Verdict>> {
        if self.per_shard == 0 || checks.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(checks.len());
        for c in checks {
            if !cacheable(c) {
                return None;
            }
            let shard = self.shard(c.key);
            let e = shard.map.get(c.key)?;
            if e.limit != *c.limit || c.ask.hits < e.hits || now >= e.until {
                return None;
            }
            out.push(Verdict {
                allowed: false,
                remaining: 0,
                reset: e.until - now,
                charged: false,
                cached: true,
            });
        }
        Some(out)
    }

    /// Drops `key`'s entry (its hits were given back).
    pub fn forget(&self, key: &[u8]) {
        let mut shard = self.shard(key);
        if !shard.map.is_empty() {
            shard.map.remove(key);
        }
    }

    /// Remembers what the backend rejected; forgets keys it allowed or refunded.
    fn learn(&self, checks: &[Check<'_>], verdicts: &[Verdict], now: Micros) {
        if self.per_shard == 0 {
            return;
        }
        for (c, v) in checks.iter().zip(verdicts) {
            if !v.allowed && v.reset > 0 && cacheable(c) {
                let mut shard = self.shard(c.key);
                if !shard.map.contains_key(c.key) && shard.map.len() >= self.per_shard {
                    make_room(&mut shard, now);
                }
                shard.map.insert(
                    c.key.into(),
                    Cached {
                        limit: c.limit.clone(),
                        hits: c.ask.hits,
                        until: now.saturating_add(v.reset),
                    },
                );
            } else if v.allowed || c.ask.refund {
                self.forget(c.key);
            }
        }
    }

    async fn decide_cached(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> Result<Vec<Verdict>, StoreError> {
        if let Some(v) = self.lookup(checks, now) {
            return Ok(v);
        }
        let verdicts = self.inner.decide(checks, now, deadline).await?;
        self.learn(checks, &verdicts, now);
        Ok(verdicts)
    }
}

/// Whether a check may be cached and answered from the cache (see the module docs).
fn cacheable(c: &Check<'_>) -> bool {
    !c.ask.refund && c.charge != Charge::Always && c.ask.hits > 0 && c.limit.algorithm().cacheable()
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // Entries are plain values, valid after any panic: ignore poisoning.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frees one place in a full shard: expired entries first (a scan at most once a second, so a
/// shard full of live entries costs O(1) per insert), else any entry.
fn make_room(shard: &mut Shard, now: Micros) {
    if now >= shard.next_sweep {
        shard.map.retain(|_, e| e.until > now);
        shard.next_sweep = now.saturating_add(SWEEP_EVERY);
    }
    if shard.map.is_empty() {
        return;
    }
    let victim = shard
        .map
        .iter()
        .find(|(_, e)| e.until <= now)
        .map(|(k, _)| k);
    let victim = victim.or_else(|| shard.map.keys().next()).cloned();
    if let Some(k) = victim {
        shard.map.remove(&k);
    }
}

impl<S: Store> Store for LocalCache<S> {
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> impl std::future::Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        self.decide_cached(checks, now, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Ask;
    use crate::store::MemoryStore;

    fn check<'a>(key: &'a [u8], limit: &'a Limit, hits: u64) -> Check<'a> {
        Check {
            key,
            limit,
            ask: Ask::take(hits),
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error: None,
        }
    }

    #[tokio::test]
    async fn over_limit_keys_are_answered_locally_until_their_retry_time() {
        let backend = std::sync::Arc::new(MemoryStore::new(100));
        let cache = LocalCache::new(backend.clone(), 100);
        let l = Limit::fixed_window(1, 60_000_000).unwrap();
        let now = 30_000_000;
        let c = [check(b"k", &l, 1)];
        let v = cache.decide(&c, now, Deadline::NONE).await.unwrap();
        assert!(v[0].allowed && !v[0].cached);
        let v = cache.decide(&c, now, Deadline::NONE).await.unwrap();
        assert!(!v[0].allowed && !v[0].cached, "the backend rejects first");
        let v = cache.decide(&c, now + 1, Deadline::NONE).await.unwrap();
        assert!(!v[0].allowed && v[0].cached);
        assert_eq!(v[0].reset, 30_000_000 - 1);
        // More hits are rejected too; fewer may pass, so they ask the backend.
        assert!(
            cache
                .decide(&[check(b"k", &l, 5)], now, Deadline::NONE)
                .await
                .unwrap()[0]
                .cached
        );
        let three = Limit::fixed_window(3, 60_000_000).unwrap();
        let five = [check(b"k5", &three, 5)];
        assert!(!cache.decide(&five, now, Deadline::NONE).await.unwrap()[0].cached);
        assert!(cache.decide(&five, now, Deadline::NONE).await.unwrap()[0].cached);
        let one = [check(b"k5", &three, 1)];
        assert!(cache.decide(&one, now, Deadline::NONE).await.unwrap()[0].allowed);
        // ...and an allowed verdict forgets the key.
        assert!(!cache.decide(&five, now, Deadline::NONE).await.unwrap()[0].cached);
        // A raised limit is not blocked by the entry of the old one.
        let raised = Limit::fixed_window(2, 60_000_000).unwrap();
        let v = cache
            .decide(&[check(b"k", &raised, 1)], now, Deadline::NONE)
            .await
            .unwrap();
        assert!(v[0].allowed && !v[0].cached);
        // A refund goes to the backend and drops the entry: the hit given back passes.
        // (The raised limit's hit counts against the old limit of 1 too: give back 2.)
        assert!(!cache.decide(&c, now, Deadline::NONE).await.unwrap()[0].cached);
        assert!(cache.decide(&c, now, Deadline::NONE).await.unwrap()[0].cached);
        let refund = Check {
            ask: Ask {
                refund: true,
                ..Ask::take(2)
            },
            ..check(b"k", &l, 2)
        };
        assert!(!cache.decide(&[refund], now, Deadline::NONE).await.unwrap()[0].cached);
        let v = cache.decide(&c, now, Deadline::NONE).await.unwrap();
        assert!(v[0].allowed && !v[0].cached);
        // The window ends: the backend decides again.
        let v = cache
            .decide(&c, now + 30_000_000, Deadline::NONE)
            .await
            .unwrap();
        assert!(v[0].allowed && !v[0].cached);
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = LocalCache::new(MemoryStore::new(10_000), 32);
        let l = Limit::fixed_window(0, 60_000_000).unwrap();
        for i in 0..1_000u32 {
            let k = i.to_be_bytes();
            cache
                .decide(&[check(&k, &l, 1)], 0, Deadline::NONE)
                .await
                .unwrap();
        }
        assert!(cache.len() <= 32, "{}", cache.len());
    }
}
