//! One round trip per request, exact limits across instances sharing one Redis, and the
//! Redis clock.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_five_descriptors_is_one_fcall() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Redis)).await;
    let limit = Limit::fixed_window(3, 3_600 * SEC).unwrap();
    let keys: Vec<Vec<u8>> = (0..5)
        .map(|i| key_of("rt:", &format!("v{i}"), &limit))
        .collect();
    let checks: Vec<Check<'_>> = (0..5u32)
        .map(|i| take(&keys[i as usize], &limit, 1, i))
        .collect();
    // Warm up: a shared link is up by then whatever the order of events.
    store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();

    let before = redis.decision_calls();
    let v = store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();
    assert_eq!(redis.decision_calls() - before, 1);
    assert!(v.iter().all(|v| v.allowed && v.charged && v.remaining == 1));

    // The rejecting path too: one descriptor over its limit, still one round trip.
    let mut checks = checks;
    checks[2].ask = Ask::take(5);
    let before = redis.decision_calls();
    let v = store
        .decide_checks(&checks, 0, Deadline::NONE)
        .await
        .unwrap();
    assert_eq!(redis.decision_calls() - before, 1);
    assert!(!v[2].allowed);
    assert!(
        v.iter().all(|v| !v.charged),
        "a rejected request charges nothing"
    );
    assert_eq!(
        v[0].remaining, 1,
        "uncharged checks show their unchanged allowance"
    );
}

/// A request of several fixed_window takes is charged one HINCRBY per check in the window
/// each key holds; a key of another type among them fails the request with nothing charged,
/// as the general path (which reads every key before it writes) does.
#[tokio::test]
async fn a_key_of_another_type_fails_a_request_of_several_takes_without_charging_it() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Local)).await;
    let limit = Limit::fixed_window(10, 3_600 * SEC).unwrap();
    let keys: Vec<Vec<u8>> = (0..3)
        .map(|i| key_of("type:", &format!("v{i}"), &limit))
        .collect();
    let checks: Vec<Check<'_>> = (0..3u32)
        .map(|i| take(&keys[i as usize], &limit, 1, i))
        .collect();
    let now = T0 + 5 * SEC;
    let v = store
        .decide_checks(&checks, now, Deadline::NONE)
        .await
        .unwrap();
    assert!(v.iter().all(|v| v.allowed && v.charged && v.remaining == 9));
    let state =
        |k: &[u8]| fixed_window_state(&redis.cli(&["HGETALL", std::str::from_utf8(k).unwrap()]));
    let before: Vec<_> = keys.iter().map(|k| state(k)).collect();

    redis.cli(&["DEL", std::str::from_utf8(&keys[2]).unwrap()]);
    redis.cli(&["SET", std::str::from_utf8(&keys[2]).unwrap(), "not a hash"]);
    let e = store
        .decide_checks(&checks, now + SEC, Deadline::NONE)
        .await
        .expect_err("a key of another type");
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    for (k, was) in keys.iter().zip(&before).take(2) {
        assert_eq!(&state(k), was, "nothing charged");
    }

    // The same keys all hashes again: the next request is charged on each.
    redis.cli(&["DEL", std::str::from_utf8(&keys[2]).unwrap()]);
    let v = store
        .decide_checks(&checks, now + 2 * SEC, Deadline::NONE)
        .await
        .unwrap();
    let remaining: Vec<u64> = v.iter().map(|v| v.remaining).collect();
    assert_eq!(remaining, [8, 8, 9]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_sharing_one_redis_admit_exactly_the_limit() {
    const LIMIT: u64 = 50;
    let redis = RedisNode::start();
    let a = connected(options(&redis.url(), ClockSource::Local)).await;
    let b = connected(options(&redis.url(), ClockSource::Local)).await;
    let limit = Limit::fixed_window(LIMIT, 3_600 * SEC).unwrap();
    let key = key_of("share:", "one", &limit);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let store = if t % 2 == 0 { a.clone() } else { b.clone() };
        let (key, limit) = (key.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..20 {
                let c = [take(&key, &limit, 1, 0)];
                if store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, LIMIT, "320 requests for a limit of {LIMIT}");
}

#[tokio::test]
async fn the_redis_clock_decides_by_default() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Redis)).await;
    let limit = Limit::fixed_window(2, 3_600 * SEC).unwrap();
    let k = key_of("clock:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    // The `now` given is ignored: a timestamp of 0 would otherwise be a window of 1970.
    let v = store.decide_checks(&c, 0, Deadline::NONE).await.unwrap();
    assert!(v[0].allowed && v[0].remaining == 1);
    assert!(v[0].reset > 0 && v[0].reset <= 3_600 * SEC);
    let stored = redis.cli(&["HGETALL", std::str::from_utf8(c[0].key).unwrap()]);
    let (window_start, _) = fixed_window_state(&stored).expect("a window");
    assert!(
        window_start > T0,
        "the window comes from Redis' TIME: {stored}"
    );
    let ttl: i64 = redis
        .cli(&["PTTL", std::str::from_utf8(c[0].key).unwrap()])
        .parse()
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 3_601_000,
        "keys expire by themselves: {ttl}"
    );
}

// ---------------------------------------------------------------------------------------------
// Faults.
// ---------------------------------------------------------------------------------------------

/// Every script sets a key's expiry to when its state stops counting plus the grace
/// (`expiry.lua`), in a shared link's lone `FCALL` and in the library's batch alike: a key gone early would
/// grant quota, one kept long holds memory. fixed_window.lua, sliding_log.lua, batch.lua's
/// short layout and its general path.
#[test]
fn every_script_expires_a_key_when_its_state_stops_counting() {
    let redis = RedisNode::start();
    let (rt, batched) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Local));
    let pooled = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let w = 60 * SEC;
    let now = T0 + 7_654_321;
    let grace_ms = 1_000;
    // A window ends at the next multiple of its length; a log counts an entry for a window.
    let window_ms = ((now / w + 1) * w - now + 999) / 1_000 + grace_ms;
    let log_ms = w / 1_000 + grace_ms;
    let fixed = Limit::fixed_window(100, w).unwrap();
    let log = Limit::new(Algorithm::SlidingLog, 100, w).unwrap();
    for (name, store) in [("pooled", &pooled), ("batch", &batched)] {
        let k = |v: &str, l: &Limit| key_of(&format!("{name}:"), v, l);
        let (a, b, c) = (k("a", &fixed), k("b", &fixed), k("c", &fixed));
        let (d, e, f) = (k("d", &fixed), k("e", &log), k("f", &log));
        // Each request, and the expiry (ms) of each key it writes.
        type Expiries<'a> = Vec<(&'a [u8], i64)>;
        let requests: [(Vec<Check<'_>>, Expiries<'_>); 4] = [
            (vec![take(&a, &fixed, 1, 0)], vec![(&a, window_ms)]),
            (
                vec![take(&b, &fixed, 1, 0), take(&c, &fixed, 2, 1)],
                vec![(&b, window_ms), (&c, window_ms)],
            ),
            (
                vec![take(&d, &fixed, 1, 0), take(&e, &log, 1, 1)],
                vec![(&d, window_ms), (&e, log_ms)],
            ),
            (vec![take(&f, &log, 1, 0)], vec![(&f, log_ms)]),
        ];
        for (checks, want) in requests {
            let v = rt
                .block_on(store.decide_checks(&checks, now, Deadline::NONE))
                .unwrap();
            assert!(v.iter().all(|v| v.allowed && v.charged), "{name}: {v:?}");
            for (key, ms) in want {
                let key = std::str::from_utf8(key).unwrap();
                let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().unwrap();
                // Read a moment after the write: at most that moment less.
                assert!(
                    (ms - 500..=ms).contains(&ttl),
                    "{name}: {key} expires in {ttl} ms, not {ms}"
                );
            }
        }
    }
}
