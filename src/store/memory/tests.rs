//! The in-memory store's caps, eviction order and accounting.

use super::*;
use crate::algorithm::{Ask, Limit};
use crate::store::Charge;

#[test]
fn expired_entries_are_swept() {
    let s = MemoryStore::new(1000);
    let l = Limit::fixed_window(5, 1_000_000).unwrap();
    let c = [Check::new(b"k", &l, Ask::take(1))];
    s.decide_now(&c, 0);
    assert_eq!(s.len(), 1);
    assert_eq!(s.sweep(999_999), 0);
    assert_eq!(s.sweep(1_000_000), 1);
    assert!(s.is_empty());
}

#[test]
fn the_cap_holds_and_evictions_are_counted() {
    let s = MemoryStore::new(SHARDS * 2);
    let l = Limit::fixed_window(5, 60_000_000).unwrap();
    for i in 0..10_000u32 {
        let key = i.to_be_bytes();
        let c = [Check::new(&key, &l, Ask::take(1))];
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
    let strict = Limit::fixed_window(1, 60_000_000).unwrap();
    let loose = Limit::fixed_window(100, 60_000_000).unwrap();
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
    let zero_after_one = Limit::fixed_window(1, 60_000_000).unwrap();
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
    let l = Limit::fixed_window(5, 1_000_000).unwrap();
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

/// The accounted bytes of one active key per algorithm (ALGORITHMS.md, "Memory per key"),
/// for a typical 54-byte key and 100 requests per second; fixed_window must stay under 250.
#[test]
fn accounted_bytes_per_key() {
    let mut key = Vec::new();
    let mut figures = Vec::new();
    let keys = 10_000u32;
    let nominal_table =
        hashbrown::HashMap::<Box<[u8]>, Slot, RandomState>::with_capacity_and_hasher(
            224,
            RandomState::default(),
        )
        .allocation_size();
    for algorithm in crate::algorithm::Algorithm::ALL {
        let l = Limit::new(algorithm, 100, 1_000_000).unwrap();
        let s = MemoryStore::new(2 * keys as usize);
        for i in 0..keys {
            let value = format!("k{i:05}");
            let parts = [crate::store::key::Part::Value {
                key: b"api_key",
                value: value.as_bytes(),
            }];
            crate::store::key::build(&mut key, b"", "bench0", parts, &l, None);
            let c = [Check::new(
                &key,
                &l,
                Ask {
                    value: 7,
                    ..Ask::take(1)
                },
            )];
            s.decide_now(&c, 0);
        }
        assert_eq!(s.len(), keys as usize);
        // The shards' tables as if each had its usual 256 slots: the hasher's seed is random,
        // and a shard that drew 112 keys or fewer (about one run in ten) has only 128.
        let tables: usize = s.shards.iter().map(|shard| lock(shard).table).sum();
        let bytes = s.bytes() - tables + SHARDS * nominal_table;
        figures.push((algorithm.as_str(), key.len(), bytes / s.len()));
    }
    // (algorithm, key bytes, counted bytes per key) with 10,000 keys, ~156 per shard in tables
    // of 256 slots, so the figures are exact. ALGORITHMS.md's table is the same
    // accounting at 200,000 keys (fuller tables, fewer bytes per key); the differences between
    // algorithms, their states, are the same.
    let expected = [
        ("fixed_window", 54, 196),
        ("sliding_window", 61, 308),
        ("sliding_log", 53, 228),
        ("token_bucket", 54, 196),
        ("leaky_bucket", 54, 196),
        ("gcra", 46, 196),
        ("distinct", 50, 228),
        ("concurrency", 53, 228),
    ];
    assert_eq!(figures, expected);
}

/// Many short keys: the tables are most of the bytes, and the cap holds with them counted.
#[test]
fn the_byte_cap_counts_the_tables() {
    let max_bytes = 1 << 20;
    let s = MemoryStore::new(1_000_000).with_max_bytes(max_bytes);
    let l = Limit::fixed_window(5, 60_000_000).unwrap();
    for i in 0..50_000u32 {
        take_one(&s, &i.to_be_bytes(), &l, 0);
        assert!(s.bytes() <= max_bytes, "{} bytes", s.bytes());
    }
    // A 4-byte key takes a 32-byte block; its slot takes a table slot and a control byte.
    let per_key = s.bytes() / s.len();
    assert!(per_key >= 32 + SLOT_BYTES, "{per_key} bytes per key");
    // Sweeping an expired store gives the tables back.
    let n = s.len();
    assert_eq!(s.sweep(60_000_000), n);
    assert_eq!(s.bytes(), 0);
}

/// Reservation records share the byte cap: holding them evicts keys so that keys and records
/// together stay within it, and records past half of it are refused.
#[test]
fn records_share_the_byte_cap_with_the_keys() {
    use crate::store::{ErrorKind, Reservations};
    let cap = 4 << 20;
    let s = MemoryStore::new(1_000_000).with_max_bytes(cap);
    let l = Limit::fixed_window(5, 60_000_000).unwrap();
    for i in 0..200_000u32 {
        take_one(&s, &i.to_be_bytes(), &l, 0);
    }
    let keys_before = s.len();
    let hold = |i: u32| {
        let key = i.to_be_bytes();
        futures::executor::block_on(s.hold(&key, vec![0; 100_000], &[], 1_000, 0, Deadline::NONE))
    };
    let mut held = 0;
    let refused = loop {
        match hold(held) {
            Ok(()) => held += 1,
            Err(e) => break e,
        }
        assert!(s.bytes() <= cap, "{} bytes with {held} records", s.bytes());
    };
    assert_eq!(refused.kind(), ErrorKind::Full);
    assert!(
        refused.to_string().contains("--memory-max-bytes"),
        "{refused}"
    );
    assert!(s.records().bytes() <= cap / 2);
    // Refused at the cap: another would not fit (a record is about 115 KiB as allocated).
    assert!(s.records().bytes() > cap / 2 - 120_000, "only {held} held");
    assert!(s.len() < keys_before, "no key made room");
    // Settled, they give their bytes back.
    for i in 0..held {
        let key = i.to_be_bytes();
        let settled =
            futures::executor::block_on(s.settle(&key, &[], b"settled:cancel", 0, Deadline::NONE));
        assert!(settled.expect("settled"), "record {i} held");
        futures::executor::block_on(s.drop_marker(&key, Deadline::NONE)).expect("dropped");
    }
    assert_eq!(s.records().bytes(), 0);
}

proptest::proptest! {
    /// The memory store is `batch::decide` over its shards: for requests of up to six checks
    /// over a few keys (a key twice in one request included), several algorithms and groups,
    /// it answers as the reference table does, request after request. What this guards is the
    /// store's own table: each check's hash and shard prepared once, found again by index.
    #[test]
    fn answers_as_the_reference_table(
        requests in proptest::collection::vec(
            proptest::collection::vec((0u8..5, 1u64..3, 0u32..3), 1..7),
            1..40,
        ),
    ) {
        use crate::algorithm::Algorithm;
        use crate::store::MapTable;
        const S: Micros = 1_000_000;
        let limits = [
            Limit::fixed_window(4, 2 * S).unwrap(),
            Limit::new(Algorithm::SlidingLog, 3, 3 * S).unwrap(),
            Limit::new(Algorithm::TokenBucket, 5, 2 * S).unwrap(),
        ];
        // One algorithm per key, as storage keys name their algorithm.
        let keys: Vec<Vec<u8>> = (0..5u8).map(|k| format!("key-{k}").into_bytes()).collect();
        let store = MemoryStore::new(10_000);
        let mut reference = MapTable::default();
        for (n, request) in requests.iter().enumerate() {
            let now = n as Micros * S / 4;
            let checks: Vec<Check<'_>> = request
                .iter()
                .map(|&(k, hits, group)| Check {
                    group,
                    ..Check::new(&keys[k as usize], &limits[k as usize % 3], Ask::take(hits))
                })
                .collect();
            let want = batch::decide(&mut reference, &checks, now);
            let got = store.decide_now(&checks, now);
            proptest::prop_assert_eq!(got, want, "request {} at {}", n, now);
        }
    }
}
