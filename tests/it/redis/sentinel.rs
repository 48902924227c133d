//! The Redis store through Sentinel: a primary watched by one Sentinel, reached with
//! `redis-sentinel://h:p?sentinelServiceName=NAME`.

use crate::support::redis as redis_support;

use std::time::Duration;

use redis_support::RedisSentinel;
use sluice::algorithm::{Ask, Limit};
use sluice::model::Micros;
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore, Topology};
use sluice::store::{Check, Deadline};

const SEC: Micros = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_finds_the_primary_through_sentinel_and_decides() {
    let redis = RedisSentinel::start();
    let store = RedisStore::connect(RedisOptions {
        connect: ConnectOptions {
            url: redis.url(),
            tls_ca: None,
            tls_client: None,
            username: None,
            password: None,
            password_file: None,
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
        },
        command_timeout: Duration::from_secs(2),
        clock: ClockSource::Redis,
        breaker: BreakerOptions::default(),
    })
    .unwrap();
    assert_eq!(store.topology(), Topology::Sentinel);
    tokio::time::timeout(Duration::from_secs(60), store.ready())
        .await
        .expect("connects through the sentinel");

    let limit = Limit::fixed_window(1, 3_600 * SEC).unwrap();
    let mut k = Vec::new();
    key::build(
        &mut k,
        b"",
        "d",
        [Part::Value {
            key: b"k",
            value: b"v",
        }],
        &limit,
        None,
    );
    let c = [Check::new(&k, &limit, Ask::take(1))];
    let v = store.decide_checks(&c, 0, Deadline::NONE).await.unwrap();
    assert!(v[0].allowed && v[0].charged);
    let v = store.decide_checks(&c, 0, Deadline::NONE).await.unwrap();
    assert!(!v[0].allowed, "the limit of 1 holds");
    // The state lives on the primary the sentinel named.
    let stored = redis
        .master
        .cli(&["HGETALL", std::str::from_utf8(&k).unwrap()]);
    let state = crate::support::redis::fixed_window_state(&stored);
    assert_eq!(state.map(|(_, count)| count), Some(1), "{stored}");
}
