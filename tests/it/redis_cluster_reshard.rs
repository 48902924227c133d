//! A reshard of a `redis_hash_tag: domain` slot under load on a real 6-node Cluster: the
//! domain's keys all live on one slot, so a serving thread's decisions of a tick share one
//! `FCALL` per slot, and during the migration Redis refuses such a batch whole (`TRYAGAIN`
//! when some of its keys have moved and others not, `ASK` when none is left). Each request so
//! refused is sent again alone (`ASK` followed), so none fails, and counts stay exact.
//! Runs on whichever server `SLUICE_REDIS_SERVER` names (redis-server or valkey-server).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::poll::wait_until;
use crate::support::redis::{self as redis_support, cli, connected, RedisCluster};
use sluice::algorithm::{Ask, Limit};
use sluice::model::Micros;
use sluice::store::key::{self, HashTag, Part};
use sluice::store::redis::{ClockSource, RedisStore};
use sluice::store::{Check, Deadline};

const SEC: Micros = 1_000_000;
const T0: Micros = 1_700_000_000 * SEC;
/// Requests in flight on the serving thread.
const IN_FLIGHT: usize = 16;
/// Users (descriptors) of the domain; the second half first appear once the slot migrates,
/// so their keys are created on the importing node (by `ASK`) while the others are not moved.
const USERS: usize = 16;
const LIMIT: u64 = 40;

/// The key of `user=<i>` in domain `tenant` with the domain's hash tag.
fn key_of(i: usize, limit: &Limit) -> Vec<u8> {
    let mut out = Vec::new();
    let value = i.to_string();
    key::build_tagged(
        &mut out,
        b"",
        "tenant",
        HashTag::Domain,
        [Part::Value {
            key: b"user",
            value: value.as_bytes(),
        }],
        limit,
        None,
    );
    out
}

/// What the load saw: admitted per key, and every request's error.
#[derive(Default)]
struct Seen {
    admitted: Vec<u64>,
    rejected: Vec<u64>,
    errors: Vec<String>,
}

/// `IN_FLIGHT` tasks on one serving thread (its own connections: one `FCALL` per slot and
/// tick), each deciding one take of a user's key after another until `stop`; users
/// `USERS / 2..` only once `all_users` is set.
fn load(
    store: RedisStore,
    keys: Arc<Vec<Vec<u8>>>,
    limit: Limit,
    all_users: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            store.attach_thread().unwrap();
            let tasks: Vec<_> = (0..IN_FLIGHT)
                .map(|t| {
                    let (store, keys, limit, all_users, stop, done, seen) = (
                        store.clone(),
                        keys.clone(),
                        limit.clone(),
                        all_users.clone(),
                        stop.clone(),
                        done.clone(),
                        seen.clone(),
                    );
                    tokio::spawn(async move {
                        let mut n = t;
                        while !stop.load(Ordering::Relaxed) {
                            let users = if all_users.load(Ordering::Relaxed) {
                                USERS
                            } else {
                                USERS / 2
                            };
                            let i = n % users;
                            n += IN_FLIGHT + 1;
                            let check = Check::new(&keys[i], &limit, Ask::take(1));
                            let v = store.decide_checks(&[check], T0, Deadline::NONE).await;
                            let mut seen = seen.lock().unwrap();
                            match v {
                                Ok(v) if v[0].allowed => seen.admitted[i] += 1,
                                Ok(_) => seen.rejected[i] += 1,
                                Err(e) => seen.errors.push(e.to_string()),
                            }
                            drop(seen);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        })
    })
}

/// The primaries' ports and node ids.
fn primaries(cluster: &RedisCluster) -> Vec<(u16, String)> {
    cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["ROLE"]).starts_with("master"))
        .map(|n| (n.port, n.cli(&["CLUSTER", "MYID"])))
        .collect()
}

/// Moves `slot` from `from` to `to` as `redis-cli --cluster reshard` does, one key per
/// `MIGRATE`, letting the load make progress between steps (`progress` waits for it).
fn move_slot(
    cluster: &RedisCluster,
    slot: u16,
    from: &(u16, String),
    to: &(u16, String),
    progress: &dyn Fn(),
    migrating: &dyn Fn(),
) {
    let slot = slot.to_string();
    assert_eq!(
        cli(to.0, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from.1]),
        "OK"
    );
    assert_eq!(
        cli(from.0, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to.1]),
        "OK"
    );
    migrating();
    progress();
    loop {
        let keys = cli(from.0, &["CLUSTER", "GETKEYSINSLOT", &slot, "1"]);
        let Some(key) = keys.lines().next().filter(|k| !k.is_empty()) else {
            break;
        };
        let port = to.0.to_string();
        let out = cli(from.0, &["MIGRATE", "127.0.0.1", &port, key, "0", "5000"]);
        assert!(out == "OK" || out == "NOKEY", "MIGRATE {key}: {out}");
        progress();
    }
    for (port, _) in [to, from] {
        assert_eq!(
            cli(*port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to.1]),
            "OK"
        );
    }
    for n in &cluster.nodes {
        n.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to.1]);
    }
}

#[test]
fn a_domain_slot_resharded_under_load_fails_no_request_and_counts_exactly() {
    let cluster = RedisCluster::start();
    let limit = Limit::fixed_window(LIMIT, 3_600 * SEC);
    let keys: Vec<Vec<u8>> = (0..USERS).map(|i| key_of(i, &limit)).collect();
    let slots: HashSet<u16> = keys.iter().map(|k| cluster.keyslot(k)).collect();
    assert_eq!(slots.len(), 1, "the domain's keys share one slot");
    let slot = *slots.iter().next().unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let opts =
        redis_support::store_options(&cluster.url(), ClockSource::Local, Duration::from_secs(1));
    let store = rt.block_on(connected(opts));

    let keys = Arc::new(keys);
    let all_users = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Seen {
        admitted: vec![0; USERS],
        rejected: vec![0; USERS],
        errors: Vec::new(),
    }));
    let thread = load(
        store.clone(),
        keys.clone(),
        limit,
        all_users.clone(),
        stop.clone(),
        done.clone(),
        seen.clone(),
    );
    let progress = || {
        let at = done.load(Ordering::Relaxed);
        wait_until("the load to make progress", || {
            done.load(Ordering::Relaxed) >= at + 2 * IN_FLIGHT
        });
    };
    progress();

    // There and back: the second move reshards keys created on the importing node.
    let masters = primaries(&cluster);
    let owner = cluster.owner(&keys[0]);
    let from = masters.iter().find(|m| m.0 == owner).unwrap().clone();
    let to = masters.iter().find(|m| m.0 != owner).unwrap().clone();
    let migrating = || all_users.store(true, Ordering::Relaxed);
    move_slot(&cluster, slot, &from, &to, &progress, &migrating);
    progress();
    move_slot(&cluster, slot, &to, &from, &progress, &|| {});

    // Until every key is full: admission is checked at the limit too.
    wait_until("every key rejected once", || {
        seen.lock().unwrap().rejected.iter().all(|&r| r > 0)
    });
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();

    let seen = seen.lock().unwrap();
    assert!(
        seen.errors.is_empty(),
        "{} of {} requests failed, e.g. {:?}",
        seen.errors.len(),
        done.load(Ordering::Relaxed),
        seen.errors.first()
    );
    for (i, key) in keys.iter().enumerate() {
        let stored = cluster.fixed_window_state(key).map_or(0, |(_, c)| c);
        assert!(
            seen.admitted[i] <= LIMIT,
            "user {i}: {seen:?}",
            seen = seen.admitted
        );
        assert_eq!(
            stored, seen.admitted[i],
            "user {i}: stored count = admitted"
        );
        // No key without a TTL (`PTTL` -1), wherever it ended.
        let key = String::from_utf8(key.clone()).unwrap();
        let pttl: i64 = cli(from.0, &["PTTL", &key]).parse().unwrap();
        assert!(pttl > 0, "user {i}: PTTL {pttl}");
    }
    assert_eq!(
        cli(to.0, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        "0"
    );
    assert!(
        cluster.command_calls("fcall") > 0,
        "the load went on the serving thread's own connections"
    );
    rt.block_on(async move { drop(store) });
}
