//! One hot `sliding_log` key full at 10,000 entries, hammered beside other tenants: a call on
//! it costs O(log n) of Redis CPU (a sorted set, `sliding_log.lua`), not a walk of the log, so
//! the tenants' error rate with it is what it is without it.

use super::*;
use sluice::algorithm::Algorithm;
use std::sync::atomic::AtomicU64;

const FULL: u64 = 10_000;

/// Tenants' calls that failed, of those that ended.
fn error_rate(outcomes: &[Outcome]) -> f64 {
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    failed as f64 / outcomes.len().max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_sliding_log_key_full_at_10000_entries_leaves_other_tenants_unharmed() {
    let redis = RedisNode::start();
    // A tight command timeout: a Redis busy with one key's work shows at once as tenants' errors.
    let store = connected(options(&redis.url(), Duration::from_millis(50))).await;
    let hot_limit = Limit::new(Algorithm::SlidingLog, FULL, 3_600 * SEC).unwrap();
    let hot = key_of("hot:", "scraper", &hot_limit);
    for _ in 0..FULL / 500 {
        let fill = [Check::new(&hot, &hot_limit, Ask::take(500))];
        let v = store
            .decide_checks(&fill, T0, Deadline::NONE)
            .await
            .unwrap();
        assert!(v[0].allowed, "{v:?}");
    }
    let hot_name = std::str::from_utf8(&hot).unwrap();
    assert_eq!(redis.cli(&["ZCARD", hot_name]), FULL.to_string());

    let tenants: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..50)
            .map(|i| key_of("tenant:", &format!("t{i}"), &roomy()))
            .collect(),
    );
    // Without the hot key.
    let load = Load::start(&store, tenants.clone(), 4, Duration::from_millis(1));
    load.more(2_000).await;
    let before = load.stop().await;

    // With it: two clients calling it back to back, every call rejected.
    let load = Load::start(&store, tenants, 4, Duration::from_millis(1));
    let stop = Arc::new(AtomicBool::new(false));
    let (hot_calls, hot_errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let hammers: Vec<_> = (0..2)
        .map(|_| {
            let (store, hot, limit) = (store.clone(), hot.clone(), hot_limit.clone());
            let (stop, calls, errors) = (stop.clone(), hot_calls.clone(), hot_errors.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let c = [Check::new(&hot, &limit, Ask::take(1))];
                    match store.decide_checks(&c, T0, Deadline::NONE).await {
                        Ok(v) => assert!(!v[0].allowed, "the key is full: {v:?}"),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    load.more(2_000).await;
    wait_until("2,000 calls on the hot key", || {
        hot_calls.load(Ordering::Relaxed) >= 2_000
    });
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        h.await.unwrap();
    }
    let opened = load.opened.load(Ordering::Relaxed);
    let during = load.stop().await;

    let (rate_before, rate_during) = (error_rate(&before), error_rate(&during));
    assert!(
        rate_during <= rate_before + 0.01,
        "tenants' errors: {:.2}% with the hot key, {:.2}% without",
        100.0 * rate_during,
        100.0 * rate_before
    );
    assert!(!opened, "the breaker opened while the hot key was hammered");
    let errors = hot_errors.load(Ordering::Relaxed);
    assert!(
        errors * 100 <= hot_calls.load(Ordering::Relaxed),
        "{errors} of the hot key's own calls failed"
    );
    assert_eq!(redis.cli(&["ZCARD", hot_name]), FULL.to_string());
}
