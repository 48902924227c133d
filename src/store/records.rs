//! Reservation records of the native API (`sluice.v1` Reserve / Commit / Cancel): opaque bytes
//! held under a random id until a ttl, and claimed at most once.
//!
//! A separate trait from [`Store`](super::Store), not a second decision call: a record is not a
//! rate-limit decision, and settling one gives hits back through the one `Store::decide` (with
//! refund checks). Both stores implement it, so reservations live where the counters do: in
//! process for memory, in Redis (standalone, Sentinel, Cluster) so that any replica can settle
//! a reservation another one made, and a restart of sluice loses none.

use std::collections::HashMap;
use std::future::Future;
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::memory::size::allocated;
use super::{Check, Deadline, ErrorKind, Fallback, LocalCache, MemoryStore, StoreError};
use crate::model::Micros;

/// Where reservation records are kept.
pub trait Reservations: Send + Sync + 'static {
    /// Keeps `record` under `key` (built by [`key::reservation`](super::key::reservation) from
    /// a random id: none is held already) until `expires_at`. `counters`: the keys its holds
    /// charged (Redis Cluster keeps a claim in each of their slots besides the record's).
    fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        counters: &[&[u8]],
        expires_at: Micros,
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The record of `key`, left where it is: a settled one's marker (see [`SETTLED`]) until
    /// it is dropped. `None`: unknown, expired or settled already.
    fn read(
        &self,
        key: &[u8],
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Settles the record of `key`: decides `checks` (its refunds and overruns) and replaces
    /// the record by `marker` (starting with [`SETTLED`]), both or neither, so a settlement
    /// that fails leaves the reservation settleable, one that succeeds cannot be applied
    /// twice, and a retry after a lost reply finds what was applied. `Ok(false)`: the record
    /// was gone or a marker (settled by a concurrent call, or expired), nothing was applied.
    /// Never answered by a failure policy: what the store did not apply is an error.
    fn settle(
        &self,
        key: &[u8],
        checks: &[Check<'_>],
        marker: &[u8],
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Drops the marker a settlement left under `key`, once its success was answered: a
    /// settlement after that finds nothing.
    fn drop_marker(
        &self,
        key: &[u8],
        deadline: Deadline,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// How a settlement's marker starts (batch.lua's settle scope matches it too); a record is
/// JSON, so it never does.
pub(crate) const SETTLED: &[u8] = b"settled:";

/// Key -> (expiry, record).
type RecordMap = HashMap<Box<[u8]>, (Micros, Vec<u8>)>;

/// A record's table slot, twice: a table keeps up to about twice as many slots as entries.
const SLOT_BYTES: usize = 2 * (size_of::<(Box<[u8]>, (Micros, Vec<u8>))>() + 1);

/// The bytes a record under `key` holds: its key's and record's heap blocks, as the allocator
/// rounds them, and its slot.
fn record_bytes(key: &[u8], record: &[u8]) -> usize {
    SLOT_BYTES + allocated(key.len()) + allocated(record.len())
}

/// The in-memory store's records: a map with expiries, capped like the store's keys (a client
/// that reserves without settling cannot grow it past `--memory-max-entries`) and in bytes
/// (half of `--memory-max-bytes`: the store's counters get what the records leave).
#[derive(Debug)]
pub struct Records {
    map: Mutex<RecordMap>,
    cap: usize,
    /// What the records hold ([`record_bytes`]), at most `max_bytes`.
    bytes: AtomicUsize,
    max_bytes: usize,
}

/// Why a record was not held: the cap it would pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    Entries(usize),
    Bytes(usize),
}

impl Records {
    pub fn new(cap: usize) -> Self {
        Records {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
            bytes: AtomicUsize::new(0),
            max_bytes: usize::MAX,
        }
    }

    /// Caps the records' bytes too.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    fn lock(&self) -> MutexGuard<'_, RecordMap> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        expires_at: Micros,
        now: Micros,
    ) -> Result<(), Full> {
        let n = record_bytes(key, &record);
        let mut map = self.lock();
        let fits = |map: &RecordMap, bytes: usize| {
            if map.len() >= self.cap {
                Err(Full::Entries(self.cap))
            } else if bytes + n > self.max_bytes {
                Err(Full::Bytes(self.max_bytes))
            } else {
                Ok(())
            }
        };
        if fits(&map, self.bytes()).is_err() {
            self.retain_unexpired(&mut map, now);
            fits(&map, self.bytes())?;
        }
        self.bytes.fetch_add(n, Ordering::Relaxed);
        map.insert(key.into(), (expires_at, record));
        Ok(())
    }

    pub fn read(&self, key: &[u8], now: Micros) -> Option<Vec<u8>> {
        let map = self.lock();
        let (expiry, record) = map.get(key)?;
        (*expiry > now).then(|| record.clone())
    }

    /// Claims the record of `key` for a settlement: replaces it by `marker`. `false`: gone,
    /// expired or a marker already.
    pub fn claim(&self, key: &[u8], marker: &[u8], now: Micros) -> bool {
        let mut map = self.lock();
        let Some((expiry, record)) = map.get_mut(key) else {
            return false;
        };
        if *expiry <= now || record.starts_with(SETTLED) {
            return false;
        }
        self.bytes
            .fetch_sub(record_bytes(key, record), Ordering::Relaxed);
        *record = marker.to_vec();
        self.bytes
            .fetch_add(record_bytes(key, record), Ordering::Relaxed);
        true
    }

    /// Drops the marker under `key`, if a marker is there.
    pub fn drop_marker(&self, key: &[u8]) {
        let mut map = self.lock();
        if map.get(key).is_some_and(|(_, r)| r.starts_with(SETTLED)) {
            if let Some((key, (_, marker))) = map.remove_entry(key) {
                self.bytes
                    .fetch_sub(record_bytes(&key, &marker), Ordering::Relaxed);
            }
        }
    }

    /// Drops the records expired at `now` (with the store's sweep); returns how many.
    pub fn sweep(&self, now: Micros) -> usize {
        self.retain_unexpired(&mut self.lock(), now)
    }

    fn retain_unexpired(&self, map: &mut RecordMap, now: Micros) -> usize {
        let before = map.len();
        let mut freed = 0;
        map.retain(|key, (expiry, record)| {
            let keep = *expiry > now;
            if !keep {
                freed += record_bytes(key, record);
            }
            keep
        });
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
        before - map.len()
    }

    /// What the records hold, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Reservations for MemoryStore {
    async fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        _: &[&[u8]],
        expires_at: Micros,
        now: Micros,
        _: Deadline,
    ) -> Result<(), StoreError> {
        let message = match self.records().hold(key, record, expires_at, now) {
            Ok(()) => {
                self.make_room(now);
                return Ok(());
            }
            Err(Full::Entries(n)) => {
                format!("{n} reservations held, the most --memory-max-entries allows")
            }
            Err(Full::Bytes(n)) => format!(
                "reservation records would hold more than {n} bytes, the half of --memory-max-bytes they may take"
            ),
        };
        Err(StoreError::new("memory", ErrorKind::Full, message))
    }

    async fn read(
        &self,
        key: &[u8],
        now: Micros,
        _: Deadline,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.records().read(key, now))
    }

    async fn settle(
        &self,
        key: &[u8],
        checks: &[Check<'_>],
        marker: &[u8],
        now: Micros,
        _: Deadline,
    ) -> Result<bool, StoreError> {
        // Of concurrent settles one claims the record; deciding in memory cannot fail.
        if !self.records().claim(key, marker, now) {
            return Ok(false);
        }
        self.decide_now(checks, now);
        Ok(true)
    }

    async fn drop_marker(&self, key: &[u8], _: Deadline) -> Result<(), StoreError> {
        self.records().drop_marker(key);
        Ok(())
    }
}

impl<S: Reservations + super::Store> Reservations for LocalCache<S> {
    fn hold(
        &self,
        key: &[u8],
        record: Vec<u8>,
        counters: &[&[u8]],
        expires_at: Micros,
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner()
            .hold(key, record, counters, expires_at, now, deadline)
    }

    fn read(
        &self,
        key: &[u8],
        now: Micros,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send {
        self.inner().read(key, now, deadline)
    }

    async fn settle(
        &self,
        key: &[u8],
        checks: &[Check<'_>],
        marker: &[u8],
        now: Micros,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let settled = self
            .inner()
            .settle(key, checks, marker, now, deadline)
            .await?;
        if settled {
            // As a refund decided through the cache: the hits given back may pass now.
            for c in checks.iter().filter(|c| c.ask.refund) {
                self.forget(c.key);
            }
        }
        Ok(settled)
    }

    fn drop_marker(
        &self,
        key: &[u8],
        deadline: Deadline,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner().drop_marker(key, deadline)
    }
}

/// Forwards every call of a wrapper to the store it wraps.
macro_rules! forward {
    ($(impl[$($g:tt)*] $ty:ty => $inner:ident;)*) => {$(
        impl<$($g)*> Reservations for $ty {
            fn hold(
                &self,
                key: &[u8],
                record: Vec<u8>,
                counters: &[&[u8]],
                expires_at: Micros,
                now: Micros,
                deadline: Deadline,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                self.$inner().hold(key, record, counters, expires_at, now, deadline)
            }

            fn read(
                &self,
                key: &[u8],
                now: Micros,
                deadline: Deadline,
            ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send {
                self.$inner().read(key, now, deadline)
            }

            fn settle(
                &self,
                key: &[u8],
                checks: &[Check<'_>],
                marker: &[u8],
                now: Micros,
                deadline: Deadline,
            ) -> impl Future<Output = Result<bool, StoreError>> + Send {
                self.$inner().settle(key, checks, marker, now, deadline)
            }

            fn drop_marker(
                &self,
                key: &[u8],
                deadline: Deadline,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                self.$inner().drop_marker(key, deadline)
            }
        }
    )*};
}

// The failure policy answers decisions only: a record is kept, and a settlement applied, by
// the primary store or not at all (a reservation held in one instance's memory could not be
// settled through another, and a settlement answered by a policy would be lost).
forward! {
    impl[S: Reservations + super::Store] Fallback<S> => primary;
    impl[S: Reservations] std::sync::Arc<S> => as_ref;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_claimed_once_and_not_after_its_expiry() {
        let r = Records::new(2);
        let marker = b"settled:cancel";
        assert_eq!(r.hold(b"a", b"x".to_vec(), 100, 0), Ok(()));
        assert!(r.claim(b"a", marker, 50));
        assert_eq!(
            r.read(b"a", 50),
            Some(marker.to_vec()),
            "the marker is read"
        );
        assert!(!r.claim(b"a", marker, 50), "claimed already");
        r.drop_marker(b"a");
        assert_eq!(r.read(b"a", 50), None);
        assert_eq!(r.hold(b"b", b"y".to_vec(), 100, 0), Ok(()));
        assert!(!r.claim(b"b", marker, 100), "expired");
        r.drop_marker(b"b");
        assert_eq!(
            r.read(b"b", 0),
            Some(b"y".to_vec()),
            "a record is no marker"
        );
        assert!(!r.claim(b"nope", marker, 0));
    }

    #[test]
    fn the_cap_makes_room_from_expired_records_only() {
        let r = Records::new(2);
        assert_eq!(r.hold(b"a", vec![], 10, 0), Ok(()));
        assert_eq!(r.hold(b"b", vec![], 100, 0), Ok(()));
        let full = r.hold(b"c", vec![], 100, 5);
        assert_eq!(full, Err(Full::Entries(2)), "full, none expired");
        assert_eq!(r.hold(b"c", vec![], 100, 10), Ok(()), "a expired at 10");
        assert_eq!(r.len(), 2);
        assert_eq!(r.sweep(100), 2);
        assert!(r.is_empty());
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn records_are_held_within_their_bytes_and_give_them_back() {
        let one = record_bytes(b"a", &[0; 1000]);
        let r = Records::new(100).with_max_bytes(3 * one);
        for k in [b"a", b"b", b"c"] {
            assert_eq!(r.hold(k, vec![0; 1000], 100, 0), Ok(()));
        }
        assert_eq!(r.bytes(), 3 * one);
        let full = r.hold(b"d", vec![0; 1000], 100, 0);
        assert_eq!(full, Err(Full::Bytes(3 * one)));
        assert!(r.claim(b"a", b"settled:cancel", 0));
        r.drop_marker(b"a");
        assert_eq!(r.bytes(), 2 * one);
        assert_eq!(r.hold(b"d", vec![0; 1000], 100, 0), Ok(()));
        assert_eq!(r.sweep(100), 3);
        assert_eq!(r.bytes(), 0);
    }
}
