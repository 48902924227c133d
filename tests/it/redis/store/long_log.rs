//! A sliding_log of thousands of entries beside fixed windows of one descriptor (issue 32,
//! item 6): `batch.lua` decides it from counts and ranks of the sorted set, never reading the
//! whole log, and the verdicts are still exactly the in-memory policy's, on the shared pool's
//! lone `FCALL`s and in a serving thread's batches alike: takes of thousands of hits at a
//! time, single hits, refunds and charge-always checks (the general path), time moving on so
//! that much of the log expires, and now and then stepping back.

use super::*;

/// A small deterministic generator: the timeline is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const STEPS: usize = 120;

/// Decides the same timeline with `store` and in memory, step by step, and returns the most
/// entries the log held.
fn run(rt: &tokio::runtime::Runtime, store: &RedisStore, redis: &RedisNode, prefix: &str) -> u64 {
    let log = Limit::new(Algorithm::SlidingLog, 10_000, 5 * SEC).unwrap();
    let day = Limit::fixed_window(1_000_000_000, 86_400 * SEC).unwrap();
    let minute = Limit::fixed_window(30_000, 60 * SEC).unwrap();
    let keys = [
        named_key_of(prefix, "one", &log, "log"),
        named_key_of(prefix, "one", &day, "day"),
        named_key_of(prefix, "one", &minute, "minute"),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut table = MapTable::default();
    let mut now = T0 + 1_234_567;
    let mut most = 0;
    for step in 0..STEPS {
        now += match rng.below(10) {
            0..=2 => 0,
            3..=5 => rng.below(1_000) as i64,
            6..=8 => rng.below(1_500_000) as i64,
            _ => -(rng.below(100_000) as i64),
        };
        let hits = match rng.below(4) {
            0 => 500 + rng.below(2_500),
            _ => 1 + rng.below(3),
        };
        let mut first = take(&keys[0], &log, hits, 0);
        match rng.below(10) {
            0 => first.ask.refund = true,
            1 => first.charge = Charge::Always,
            _ => {}
        }
        let mut checks = vec![first, take(&keys[1], &day, 1, 0)];
        if rng.below(2) == 0 {
            checks.push(take(&keys[2], &minute, 1, 0));
        }
        let want = batch::decide(&mut table, &checks, now);
        let got = rt
            .block_on(store.decide_checks(&checks, now, Deadline::NONE))
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(got, want, "step {step} at {now}: hits {hits}");
        let key = std::str::from_utf8(&keys[0]).unwrap();
        let held: u64 = redis.cli(&["ZCARD", key]).trim().parse().unwrap();
        most = most.max(held);
    }
    most
}

#[test]
fn a_long_log_beside_fixed_windows_decides_as_rust_on_the_shared_pool() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisNode::start();
    let store = rt.block_on(connected(options(&redis.url(), ClockSource::Local)));
    let most = run(&rt, &store, &redis, "longlog:");
    // The timeline did fill the log: thousands of entries, near its limit.
    assert!(most >= 5_000, "the log held at most {most} entries");
}

#[test]
fn a_long_log_beside_fixed_windows_decides_as_rust_in_the_library() {
    let redis = RedisNode::start();
    let (rt, store) =
        redis_support::on_a_serving_thread(&redis, options(&redis.url(), ClockSource::Local));
    let most = run(&rt, &store, &redis, "longlog:");
    assert!(most >= 5_000, "the log held at most {most} entries");
    assert_eq!(redis.command_calls("evalsha"), 0);
}
