//! Settlements are never lost: a Commit or Cancel that Redis refuses (here: `maxmemory 1`
//! with `noeviction`, every write needing memory refused) fails and leaves the reservation
//! settleable, whatever `--on-store-error` says, and its retry gives the hits back once. On a
//! Cluster, a reservation over two slots settles each slot once across a failed try and its
//! retry.

use sluice::algorithm::{Ask, Limit};
use sluice::proto::sluice::v1 as pb;
use sluice::store::redis::ClockSource;
use sluice::store::{key, Check, Deadline, FailurePolicy, Reservations, Store};
use tonic::Code;

use super::{client, remaining, reserve, CONFIG};
use crate::support::redis as redis_support;
use crate::support::{Sluice, StoreKind, SEC};

/// What a Cancel leaves in its record's place.
const MARKER: &[u8] = b"settled:cancel";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_redis_refuses_fails_and_its_retry_gives_the_hits_back() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    // Fails open: a decision Redis cannot take is allowed, a settlement never is.
    let s = Sluice::start_with(StoreKind::Redis(url), Some(CONFIG), &[], |args| {
        args.redis.on_store_error = FailurePolicy::Allow;
    })
    .await;
    let mut c = client(&s).await;
    let r = reserve(&mut c, "native", "u", 5, 60_000)
        .await
        .expect("reserved");
    assert!(r.allowed);
    assert_eq!(remaining(&mut c, "u").await, 5);

    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let cancel = || pb::CancelRequest {
        reservation_id: r.reservation_id.clone(),
    };
    let refused = c.cancel(cancel()).await;
    assert!(
        refused.is_err(),
        "a cancel Redis could not apply is not OK: {refused:?}"
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);

    assert_eq!(remaining(&mut c, "u").await, 5, "nothing given back yet");
    c.cancel(cancel()).await.expect("the retry settles");
    assert_eq!(remaining(&mut c, "u").await, 10, "the 5 came back");
    let again = c.cancel(cancel()).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "settled once");
    assert_eq!(remaining(&mut c, "u").await, 10);
    s.stop().await;
}

/// The stored count of fixed_window `key` in the cluster (0 when absent).
fn count(cluster: &redis_support::RedisCluster, key: &[u8]) -> u64 {
    cluster.fixed_window_state(key).map_or(0, |(_, n)| n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_over_two_cluster_slots_applies_each_once_across_a_retry() {
    let cluster = redis_support::RedisCluster::start();
    let opts = redis_support::store_options(
        &cluster.url(),
        ClockSource::Redis,
        std::time::Duration::from_secs(2),
    );
    let store = redis_support::connected(opts).await;
    let limit = Limit::fixed_window(10, 3600 * SEC).unwrap();
    let home = redis_support::key_of("settle:", "home", &limit);
    // A descriptor whose slot another primary owns.
    let away = (0..)
        .map(|i| redis_support::key_of("settle:", &format!("away{i}"), &limit))
        .find(|k| cluster.owner(k) != cluster.owner(&home))
        .expect("a key on another primary");
    // The Redis clock decides; `now` sets only the record's ttl here.
    let now = 1_700_000_000 * SEC;
    let take = [
        Check::new(&home, &limit, Ask::take(5)),
        Check {
            group: 1,
            ..Check::new(&away, &limit, Ask::take(4))
        },
    ];
    let v = store
        .decide(&take, now, Deadline::NONE)
        .await
        .expect("taken");
    assert!(v.iter().all(|v| v.allowed && v.charged));

    let id = key::reservation_id("00112233445566778899aabbccddeeff", &home);
    let record = key::reservation(b"settle:", &id).expect("a valid id");
    assert_eq!(cluster.keyslot(&record), cluster.keyslot(&home));
    let held = store
        .hold(
            &record,
            b"r".to_vec(),
            &[&home, &away],
            now + 60 * SEC,
            now,
            Deadline::NONE,
        )
        .await;
    held.expect("held");

    let refund = [
        Check::new(&home, &limit, Ask::refund(5)),
        Check {
            group: 1,
            ..Check::new(&away, &limit, Ask::refund(4))
        },
    ];
    // The record's primary refuses writes: the other slot settles, the record's does not.
    let owner = cluster.owner(&home);
    let node = cluster.nodes.iter().find(|n| n.port == owner).unwrap();
    node.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    node.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let failed = store
        .settle(&record, &refund, MARKER, now, Deadline::NONE)
        .await;
    assert!(failed.is_err(), "refused: {failed:?}");
    node.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!((count(&cluster, &home), count(&cluster, &away)), (5, 0));

    // Charged again meanwhile: a second refund of `away` would take these 4.
    let again = [Check {
        group: 1,
        ..Check::new(&away, &limit, Ask::take(4))
    }];
    store
        .decide(&again, now, Deadline::NONE)
        .await
        .expect("taken");
    let settled = store
        .settle(&record, &refund, MARKER, now, Deadline::NONE)
        .await;
    assert!(settled.expect("the retry settles"), "the record was there");
    assert_eq!(
        (count(&cluster, &home), count(&cluster, &away)),
        (0, 4),
        "each slot given back once"
    );
    let twice = store
        .settle(&record, &refund, MARKER, now, Deadline::NONE)
        .await;
    assert!(!twice.expect("answered"), "settled already");
    assert_eq!((count(&cluster, &home), count(&cluster, &away)), (0, 4));
}

/// A settlement applied whose answer was lost leaves its marker (here written as such a try
/// leaves it, without its give-back, so that anything applied again would show): its retry
/// answers OK and applies nothing, a different settlement answers NOT_FOUND, and an answered
/// success leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_settlement_finds_its_marker_and_a_different_one_does_not() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(StoreKind::Redis(url), Some(CONFIG), &[]).await;
    let mut c = client(&s).await;
    let record_of = |id: &str| {
        let keys = redis.cli(&["KEYS", "*"]);
        // The key holds the id's random part (before its slot tag).
        let random = id.split('.').next().unwrap_or(id);
        let found = keys
            .lines()
            .find(|k| k.ends_with(random))
            .map(str::to_string);
        found.expect("the record is in Redis")
    };
    let id = reserve(&mut c, "native", "u", 5, 60_000)
        .await
        .expect("reserved")
        .reservation_id;
    let record = record_of(&id);
    redis.cli(&["SET", &record, "settled:cancel", "KEEPTTL"]);
    let commit = pb::CommitRequest {
        reservation_id: id.clone(),
        actual_hits: 2,
    };
    let other = c.commit(commit).await.unwrap_err();
    assert_eq!(other.code(), Code::NotFound, "not the settlement applied");
    let cancel = || pb::CancelRequest {
        reservation_id: id.clone(),
    };
    c.cancel(cancel()).await.expect("the retry succeeds");
    assert_eq!(remaining(&mut c, "u").await, 5, "nothing applied again");
    let again = c.cancel(cancel()).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "answered OK once");

    let id = reserve(&mut c, "native", "v", 5, 60_000)
        .await
        .expect("reserved")
        .reservation_id;
    let record = record_of(&id);
    c.cancel(pb::CancelRequest {
        reservation_id: id.clone(),
    })
    .await
    .expect("cancelled");
    assert_eq!(redis.cli(&["EXISTS", &record]), "0", "no marker left");
    s.stop().await;
}
