//! The Redis store on a real 6-node Redis Cluster (3 primaries, 3 replicas): keys of one
//! descriptor share a slot whatever its values, requests spanning several slots are decided
//! with one FCALL per slot, and the optimistic charge is given back when another descriptor
//! rejects. One test function: a cluster takes seconds to form on this small box.

use crate::support::redis as redis_support;

use std::collections::HashSet;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use redis_support::RedisCluster;
use sluice::algorithm::{Algorithm, Ask, Limit, Param};
use sluice::model::Micros;
use sluice::store::batch;
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore, Topology};
use sluice::store::{Charge, Check, Deadline, MapTable};

const SEC: Micros = 1_000_000;
const T0: Micros = 1_700_000_000 * SEC;

fn key_of(prefix: &str, entries: &[(&[u8], &[u8])], limit: &Limit, name: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    key::build(
        &mut out,
        prefix.as_bytes(),
        "d",
        entries
            .iter()
            .map(|&(key, value)| Part::Value { key, value }),
        limit,
        name,
    );
    out
}

fn check<'a>(key: &'a [u8], limit: &'a Limit, hits: u64, group: u32) -> Check<'a> {
    Check {
        group,
        ..Check::new(key, limit, Ask::take(hits))
    }
}

/// The stored count of a fixed_window key (0 when absent).
fn count(cluster: &RedisCluster, key: &[u8]) -> u64 {
    cluster
        .fixed_window_state(key)
        .map_or(0, |(_, count)| count)
}

#[test]
fn cluster_keys_slots_round_trips_and_optimistic_refunds() {
    let cluster = RedisCluster::start();

    // Hostile values never break the hash tag: every key of a descriptor is in one slot,
    // the one sluice computes, and different descriptors have different keys.
    let long = vec![b'x'; 5_000];
    let hostile: Vec<Vec<(&[u8], &[u8])>> = vec![
        vec![(b"k", b"a:b")],
        vec![(b"k", b"{a}")],
        vec![(b"k", b"}{")],
        vec![(b"k_x", b"y"), (b"k", b"x_y")],
        vec![(b"k", &long)],
        vec![(b"k", b"\xff\xfe{\x00}")],
        vec![(b"{", b"}"), (b"}", b"{")],
    ];
    let windows = [
        Limit::fixed_window(1, SEC).unwrap(),
        Limit::fixed_window(5, 3_600 * SEC).unwrap(),
    ];
    let mut all_keys = HashSet::new();
    for entries in &hostile {
        let mut slots = HashSet::new();
        for limit in &windows {
            for name in [None, Some("a{b}:c")] {
                let k = key_of("", entries, limit, name);
                let slot = cluster.keyslot(&k);
                assert_eq!(slot, sluice::store::redis::key_slot(&k));
                slots.insert(slot);
                assert!(all_keys.insert(k), "no two keys collide");
            }
        }
        assert_eq!(slots.len(), 1, "one slot per descriptor: {entries:?}");
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(async {
        let store = RedisStore::connect(RedisOptions {
            connect: ConnectOptions {
                url: cluster.url(),
                tls_ca: None,
                tls_client: None,
                username: None,
                password: None,
                password_file: None,
                pool_size: 2,
                connect_timeout: Duration::from_secs(2),
            },
            command_timeout: Duration::from_secs(2),
            clock: ClockSource::Local,
            breaker: BreakerOptions::default(),
        })
        .unwrap();
        tokio::time::timeout(Duration::from_secs(60), store.ready())
            .await
            .expect("connects to the cluster");
        store
    });
    assert_eq!(store.topology(), Topology::Cluster);

    // Four descriptors on four slots (on more than one primary).
    let limit = Limit::fixed_window(3, 3_600 * SEC).unwrap();
    let tight = Limit::fixed_window(1, 3_600 * SEC).unwrap();
    let values = ["alpha", "bravo", "charlie", "delta"];
    let keys: Vec<Vec<u8>> = values
        .iter()
        .map(|v| key_of("c:", &[(b"k", v.as_bytes())], &limit, None))
        .collect();
    let tight_key = key_of("c:", &[(b"k", b"echo")], &tight, None);
    let slots: HashSet<u16> = keys.iter().map(|k| cluster.keyslot(k)).collect();
    assert_eq!(slots.len(), 4);
    let owners: HashSet<u16> = keys.iter().map(|k| cluster.owner(k)).collect();
    assert!(owners.len() >= 2, "the request spans several primaries");

    // All admitted: one FCALL per slot, every count charged.
    let checks: Vec<Check<'_>> = (0..4)
        .map(|i| check(&keys[i], &limit, 1, i as u32))
        .collect();
    let before = cluster.command_calls("fcall");
    let v = rt
        .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
        .unwrap();
    assert_eq!(cluster.command_calls("fcall") - before, 4);
    assert!(v.iter().all(|v| v.allowed && v.charged && v.remaining == 2));
    assert!(keys.iter().all(|k| count(&cluster, k) == 1));

    // One descriptor rejects: the others were charged optimistically and are given back.
    let mut checks: Vec<Check<'_>> = checks;
    checks.push(check(&tight_key, &tight, 2, 4));
    let v = rt
        .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[4].allowed && !v[4].charged);
    for v in &v[..4] {
        assert!(v.allowed && !v.charged, "{v:?}");
        assert_eq!(v.remaining, 2, "the allowance without this request");
    }
    assert!(
        keys.iter().all(|k| count(&cluster, k) == 1),
        "counts restored"
    );

    // `charge: always` stays charged when the request is rejected.
    checks[0].charge = Charge::Always;
    let v = rt
        .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
        .unwrap();
    assert!(v[0].charged && !v[1].charged);
    assert_eq!(count(&cluster, &keys[0]), 2);
    assert_eq!(count(&cluster, &keys[1]), 1);

    // Quota mode across slots: one quota descriptor within its limit admits the request.
    let mut quota: Vec<Check<'_>> = vec![
        check(&keys[2], &limit, 1, 0),
        check(&tight_key, &tight, 2, 1),
    ];
    quota.iter_mut().for_each(|c| c.quota = true);
    let v = rt
        .block_on(store.decide_checks(&quota, T0, Deadline::NONE))
        .unwrap();
    assert!(v[0].allowed && v[0].charged && !v[1].allowed);
    assert_eq!(count(&cluster, &keys[2]), 2);
    // Every quota descriptor over: rejected, and the optimistic charge given back.
    quota[0].ask = Ask::take(5);
    quota.push(check(&keys[3], &limit, 1, 2));
    let v = rt
        .block_on(store.decide_checks(&quota, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[0].allowed && !v[1].allowed);
    assert!(v[2].allowed && !v[2].charged);
    assert_eq!(count(&cluster, &keys[3]), 1, "given back");

    // A token bucket and a sliding window on other slots, charged optimistically and given
    // back when the tight descriptor rejects: the next request sees them untouched.
    let bucket = Limit::new(Algorithm::TokenBucket, 3, 3_600 * SEC).unwrap();
    let sliding = Limit::new(Algorithm::SlidingWindow, 3, 3_600 * SEC).unwrap();
    let sliding = sliding.with_precision(60).unwrap();
    let bucket_key = key_of("c:", &[(b"k", b"foxtrot")], &bucket, None);
    let sliding_key = key_of("c:", &[(b"k", b"golf")], &sliding, None);
    let tight_key2 = key_of("c:", &[(b"k", b"hotel")], &tight, None);
    let slots: HashSet<u16> = [&bucket_key, &sliding_key, &tight_key2]
        .iter()
        .map(|k| cluster.keyslot(k))
        .collect();
    assert_eq!(slots.len(), 3);
    let mixed = [
        check(&bucket_key, &bucket, 2, 0),
        check(&sliding_key, &sliding, 2, 1),
        check(&tight_key2, &tight, 2, 2),
    ];
    let v = rt
        .block_on(store.decide_checks(&mixed, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[2].allowed);
    for v in &v[..2] {
        assert!(v.allowed && !v.charged && v.remaining == 3, "{v:?}");
    }
    let v = rt
        .block_on(store.decide_checks(&mixed[..2], T0, Deadline::NONE))
        .unwrap();
    for v in &v {
        assert!(
            v.allowed && v.charged && v.remaining == 1,
            "given back: {v:?}"
        );
    }
    // A distinct value cannot be given back (a refund of distinct changes nothing): it stays
    // counted, and the verdict says so.
    let ips = Limit::new(Algorithm::Distinct, 5, 3_600 * SEC).unwrap();
    let ips_key = key_of("c:", &[(b"k", b"india")], &ips, None);
    assert_ne!(cluster.keyslot(&ips_key), cluster.keyslot(&tight_key2));
    let mut ip = check(&ips_key, &ips, 1, 0);
    ip.ask.value = sluice::algorithm::distinct::hash(b"10.0.0.1");
    let v = rt
        .block_on(store.decide_checks(
            &[ip.clone(), check(&tight_key2, &tight, 2, 1)],
            T0,
            Deadline::NONE,
        ))
        .unwrap();
    assert!(v[0].allowed && v[0].charged && v[0].remaining == 4 && !v[1].allowed);

    // Random timelines over four algorithms on four slots: with no concurrent request, the
    // cluster answers as one node would.
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 24,
        failure_persistence: crate::support::seeds::regressions(
            "cluster_keys_slots_round_trips_and_optimistic_refunds",
        ),
        ..ProptestConfig::default()
    });
    let step = (
        0..(90 * SEC),
        prop::collection::vec(
            (
                0..6u64,
                0..9u64,
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.2),
                prop::bool::weighted(0.3),
            ),
            4,
        ),
        prop::sample::subsequence(vec![0usize, 1, 2, 3], 1..=4),
    );
    runner
        .run(&prop::collection::vec(step, 1..8), |steps| {
            let prefix = format!(
                "p{}:",
                case.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            // One algorithm per descriptor, so every slot runs a different one; the undo of
            // each (a refund of what was charged) must restore what one node would have.
            let algorithms = [
                Algorithm::TokenBucket,
                Algorithm::SlidingWindow,
                Algorithm::SlidingLog,
                Algorithm::FixedWindow,
            ];
            let limits: Vec<Vec<Limit>> = algorithms
                .iter()
                .map(|&a| {
                    (0..6)
                        .map(|r| {
                            let l = Limit::new(a, r, 60 * SEC).unwrap();
                            match a.param() {
                                Some(Param::Precision) => l.with_precision(6).unwrap(),
                                _ => l,
                            }
                        })
                        .collect()
                })
                .collect();
            let keys: Vec<Vec<u8>> = values
                .iter()
                .zip(&limits)
                .map(|(v, l)| key_of(&prefix, &[(b"k", v.as_bytes())], &l[0], None))
                .collect();
            let mut table = MapTable::default();
            let mut now = T0;
            for (dt, specs, present) in &steps {
                now += dt;
                // Each descriptor (and so each slot) at most once per request.
                let checks: Vec<Check<'_>> = present
                    .iter()
                    .map(|&d| {
                        let (requests, hits, refund, always, quota) = specs[d];
                        Check {
                            key: &keys[d],
                            limit: &limits[d][requests as usize],
                            ask: Ask {
                                hits,
                                refund,
                                value: 0,
                                dry_run: false,
                            },
                            charge: if always {
                                Charge::Always
                            } else {
                                Charge::IfAdmitted
                            },
                            group: d as u32,
                            quota,
                            on_error: None,
                        }
                    })
                    .collect();
                let want = batch::decide(&mut table, &checks, now);
                let got = rt
                    .block_on(store.decide_checks(&checks, now, Deadline::NONE))
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                prop_assert_eq!(got, want, "at {}: {:?}", now, checks);
            }
            Ok(())
        })
        .unwrap();

    // `redis_hash_tag: domain`: every key of the domain in one slot, so a request of several
    // descriptors is one FCALL and its rejection exact (nothing charged, nothing undone).
    let tagged = |value: &[u8], limit: &Limit| {
        let mut out = Vec::new();
        key::build_tagged(
            &mut out,
            b"t:",
            "d",
            key::HashTag::Domain,
            [Part::Value { key: b"k", value }],
            limit,
            None,
        );
        out
    };
    let tagged_keys: Vec<Vec<u8>> = values
        .iter()
        .map(|v| tagged(v.as_bytes(), &limit))
        .collect();
    let tagged_tight = tagged(b"echo", &tight);
    let slots: HashSet<u16> = tagged_keys
        .iter()
        .chain([&tagged_tight])
        .map(|k| cluster.keyslot(k))
        .collect();
    assert_eq!(slots.len(), 1, "one slot for the domain");
    let mut checks: Vec<Check<'_>> = (0..4)
        .map(|i| check(&tagged_keys[i], &limit, 1, i as u32))
        .collect();
    checks.push(check(&tagged_tight, &tight, 2, 4));
    let before = cluster.command_calls("fcall");
    let v = rt
        .block_on(store.decide_checks(&checks, T0, Deadline::NONE))
        .unwrap();
    assert_eq!(cluster.command_calls("fcall") - before, 1, "one round trip");
    assert!(!v[4].allowed && v.iter().all(|v| !v.charged));
    assert!(v[..4].iter().all(|v| v.allowed && v.remaining == 3));
    assert!(tagged_keys.iter().all(|k| count(&cluster, k) == 0));

    // A primary dies: its replica is promoted (the cluster notices after
    // cluster-node-timeout) and decisions on its slots recover (the library was replicated
    // with `FUNCTION LOAD`, and would be loaded again if not). Polled, never slept for: a starved box may even fail over early.
    let mut cluster = cluster;
    let victim = cluster.owner(&keys[0]);
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == victim)
        .expect("the owner is one of ours")
        .kill();
    let survivors: Vec<&redis_support::RedisNode> =
        cluster.nodes.iter().filter(|n| n.port != victim).collect();
    crate::support::poll::wait_until(
        "a replica to be promoted for the dead primary's slots",
        || {
            survivors.iter().all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok")
            }) && survivors
                .iter()
                .filter(|n| n.cli(&["ROLE"]).starts_with("master"))
                .count()
                == 3
        },
    );
    // The slot now answers on a promoted replica (asked without following redirections).
    let key0 = String::from_utf8(keys[0].clone()).unwrap();
    let owner_now = crate::support::poll::wait_until_value("the slot to move", || {
        let answer = survivors[0].cli(&["EXISTS", &key0]);
        match answer.strip_prefix("MOVED ") {
            Some(rest) => rest
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|&p| p != victim),
            // Served here: 0 or 1; anything else is an error reply.
            None if answer.is_empty() || answer.starts_with(|c: char| c.is_ascii_digit()) => {
                Some(survivors[0].port)
            }
            None => None,
        }
    });
    assert_ne!(owner_now, victim);
    let fresh = key_of("failover:", &[(b"k", b"alpha")], &tight, None);
    assert_eq!(
        sluice::store::redis::key_slot(&fresh),
        sluice::store::redis::key_slot(&keys[0]),
        "on the dead primary's slot"
    );
    let c = [check(&fresh, &tight, 1, 0)];
    let first = std::cell::Cell::new(None);
    crate::support::poll::wait_until("decisions on the promoted replica", || {
        match rt.block_on(store.decide_checks(&c, T0, Deadline::NONE)) {
            Ok(v) => {
                first.set(Some(v[0]));
                true
            }
            Err(_) => false,
        }
    });
    assert!(first.get().unwrap().allowed);
    let v = rt
        .block_on(store.decide_checks(&c, T0, Deadline::NONE))
        .unwrap();
    assert!(!v[0].allowed, "the limit of 1 holds on the new primary");
}
