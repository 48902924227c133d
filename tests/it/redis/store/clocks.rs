//! Exact under every clock: a key holding a later window than the deciding clock (an instance
//! on `--clock local` running ahead, a Redis clock stepped back, a failover to a node behind)
//! admits at most its limit per window, plain takes included. The instance ahead is a store
//! on `ClockSource::Local` given a time ahead of Redis'; the other decides on a serving
//! thread's own connection (Redis' clock, plain takes).

use super::*;
use sluice::clock::{Clock, SystemClock};
use sluice::store::Verdict;

fn admitted(vs: &[Verdict]) -> usize {
    vs.iter().filter(|v| v.allowed).count()
}

/// The count a fixed_window key holds for the window starting at `start` (0 when absent).
fn count_of(redis: &RedisNode, key: &[u8], start: Micros) -> u64 {
    let all = redis.cli(&[
        "HGET",
        std::str::from_utf8(key).unwrap(),
        &start.to_string(),
    ]);
    all.trim().parse::<u64>().map_or(0, |v| v - 1)
}

#[test]
fn a_window_replaced_mid_way_by_an_instance_ahead_admits_at_most_the_limit() {
    const LIMIT: u64 = 5;
    let window = 4 * SEC;
    let redis = RedisNode::start();
    let (rt, behind) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let ahead = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::fixed_window(LIMIT, window).unwrap();
    let key = key_of("replaced:", "x", &limit);
    let checks = [take(&key, &limit, 1, 0)];
    // Early in a window by Redis' clock, so that everything below happens in it. Waited for
    // on the runtime, which drives the thread's connection (left undriven for seconds, its
    // stall check would take it for dead on the next call).
    rt.block_on(wait_until_async("early in a window", || async {
        redis_now(&redis) % window < window / 4
    }));
    let ws = redis_now(&redis) / window * window;

    // Two hits in Redis' window: the script's, then a plain take (the key learnt charged).
    let fcalls = redis.command_calls("fcall");
    for _ in 0..2 {
        let v = rt.block_on(behind.decide_checks(&checks, 0, Deadline::NONE));
        assert!(v.unwrap()[0].allowed);
    }
    assert_eq!(
        redis.command_calls("fcall"),
        fcalls + 1,
        "the second went plain"
    );
    assert_eq!(count_of(&redis, &key, ws), 2);

    // The instance ahead takes one in the next window: a later window wins, from 0.
    let next = ws + window;
    let v = rt.block_on(ahead.decide_checks(&checks, next + 1, Deadline::NONE));
    assert!(v.unwrap()[0].allowed);

    // 16 takes in flight at once on the connection that still takes the key plain, twice.
    let mut later = Vec::new();
    for _ in 0..2 {
        let got = rt.block_on(futures::future::join_all(
            (0..16).map(|_| behind.decide_checks(&checks, 0, Deadline::NONE)),
        ));
        for v in got {
            let v = v.unwrap().remove(0);
            // Counted in the later window: its end is more than a window away.
            assert!(v.reset > window || !v.allowed, "{v:?}");
            later.push(v);
        }
    }
    assert!(redis_now(&redis) < next, "the test ran in Redis' window");
    assert_eq!(
        1 + admitted(&later) as u64,
        LIMIT,
        "the later window admits its limit, once"
    );
    assert_eq!(count_of(&redis, &key, next), LIMIT, "and counts it exactly");
}

/// Two instances on one key, one on Redis' clock (plain takes on a serving thread), one on
/// its own clock 300 ms ahead, 8 takes in flight on each, over window edges: each window of
/// the key admits at most its limit.
#[test]
fn two_instances_with_clocks_300_ms_apart_admit_at_most_the_limit_per_window() {
    const LIMIT: u64 = 5;
    const SKEW: Micros = 300_000;
    let redis = RedisNode::start();
    let (rt, on_redis) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Redis));
    let ahead = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let limit = Limit::fixed_window(LIMIT, SEC).unwrap();
    let key = key_of("skewed:", "x", &limit);
    let checks = [take(&key, &limit, 1, 0)];
    // Per window of the key (its end, to the nearest second), what each answer counted in.
    let mut windows: std::collections::BTreeMap<i64, Vec<Verdict>> = Default::default();
    let start = crate::support::poll::real_now();
    while windows.len() < 6 {
        assert!(
            crate::support::poll::real_since(start) < Duration::from_secs(30),
            "6 windows in 30 s"
        );
        let local = SystemClock.now();
        let got = rt.block_on(async {
            let redis_side = futures::future::join_all(
                (0..8).map(|_| on_redis.decide_checks(&checks, 0, Deadline::NONE)),
            );
            let ahead_side = futures::future::join_all(
                (0..8).map(|_| ahead.decide_checks(&checks, local + SKEW, Deadline::NONE)),
            );
            futures::future::join(redis_side, ahead_side).await
        });
        let after = SystemClock.now();
        // This machine's clock is Redis'; the instance ahead decided at `local + SKEW`.
        for (v, now) in got
            .0
            .into_iter()
            .map(|v| (v, after))
            .chain(got.1.into_iter().map(|v| (v, local + SKEW)))
        {
            let v = v.unwrap().remove(0);
            windows
                .entry((now + v.reset + SEC / 2) / SEC)
                .or_default()
                .push(v);
        }
    }
    let admitted: Vec<usize> = windows.values().map(|vs| admitted(vs)).collect();
    assert!(
        admitted.iter().all(|&n| n as u64 <= LIMIT),
        "admitted per window of the key: {admitted:?}"
    );
    assert!(
        admitted[1..admitted.len() - 1]
            .iter()
            .any(|&n| n as u64 == LIMIT),
        "the limit is reached: {admitted:?}"
    );
}
