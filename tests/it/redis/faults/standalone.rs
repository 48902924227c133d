//! A standalone Redis stalled, killed and restarted, and the start-up race.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shorter_than_the_timeout_opens_nothing_and_a_longer_one_recovers_within_100ms() {
    let redis = RedisNode::start();
    let store = connected(options(&redis.url(), Duration::from_millis(300))).await;
    let limit = roomy();
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..16)
            .map(|i| key_of("stall:", &i.to_string(), &limit))
            .collect(),
    );
    let load = Load::start(&store, keys, 8, Duration::from_millis(2));
    load.more(50).await;

    // 100 ms: shorter than the 300 ms command timeout. Calls wait, none fails.
    let before = load.outcomes().len();
    debug_sleep(redis.port, "0.1").await;
    load.more(50).await;
    let short: Vec<Outcome> = load.outcomes()[before..].to_vec();
    assert!(
        short.iter().all(|o| o.ok),
        "{} calls failed in a stall shorter than the timeout",
        short.iter().filter(|o| !o.ok).count()
    );
    assert!(!load.opened.load(Ordering::Relaxed), "the breaker opened");

    // 1.5 s: the calls time out, the breaker opens, and closes as soon as Redis answers.
    let ended = debug_sleep(redis.port, "1.5").await;
    load.more(100).await;
    let outcomes = load.stop().await;
    assert!(
        outcomes.iter().any(|o| !o.ok),
        "a stall longer than the timeout fails calls"
    );
    let late = recovered(&outcomes, ended, |_| true);
    eprintln!("recovered {late:?} after the stall ended");
    assert!(
        late <= Duration::from_millis(100),
        "recovered {late:?} after the stall ended"
    );
    assert!(!store.status().breaker_open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_redis_is_used_again_within_a_second() {
    let mut redis = RedisNode::start();
    let store = connected(options(&redis.url(), Duration::from_millis(300))).await;
    let limit = roomy();
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..8)
            .map(|i| key_of("restart:", &i.to_string(), &limit))
            .collect(),
    );
    let load = Load::start(&store, keys, 4, Duration::from_millis(2));
    load.more(20).await;
    redis.kill();
    wait_until_async("the breaker to open", || async {
        store.status().breaker_open
    })
    .await;
    redis.restart();
    let back = crate::support::poll::real_now();
    wait_until_async("calls to succeed again", || async {
        load.outcomes().iter().any(|o| o.ok && o.at > back)
    })
    .await;
    let outcomes = load.stop().await;
    let first_ok = outcomes
        .iter()
        .filter(|o| o.ok && o.at > back)
        .map(|o| o.at)
        .min()
        .unwrap();
    let late = first_ok - back;
    eprintln!("recovered {late:?} after redis answered PING again");
    assert!(
        late <= Duration::from_secs(1),
        "recovered only after {late:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Start-up: SERVING only once the store answers.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_the_moment_health_says_serving_all_succeed() {
    let mut redis = RedisNode::start();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n",
    )
    .unwrap();

    // The old fail-open readiness, on request: SERVING with Redis down.
    let eager = sluice::app::start(
        serve_args(&config, &redis.url(), &["--ready-before-store"]),
        Arc::new(ManualClock::new(T0)),
    )
    .await
    .unwrap();
    wait_until_async("SERVING before the store", || async {
        health(eager.grpc_addr).await == ServingStatus::Serving as i32
    })
    .await;
    eager.shutdown();
    eager.wait().await.unwrap();

    let server = sluice::app::start(
        serve_args(&config, &redis.url(), &[]),
        Arc::new(ManualClock::new(T0)),
    )
    .await
    .unwrap();
    let addr = server.grpc_addr;
    // The config is loaded, Redis is not there: NOT_SERVING (for as long as that lasts).
    assert_eq!(health(addr).await, ServingStatus::NotServing as i32);
    redis.restart();
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    wait_until_async("SERVING once redis answers", || async {
        health(addr).await == ServingStatus::Serving as i32
    })
    .await;
    // A burst at once, over several connections (both serving threads).
    let burst = (0..300).map(|i| {
        let mut c = client.clone();
        async move {
            match c
                .should_rate_limit(req_k(&[&format!("v{}", i % 30)]).addend(1).to_proto())
                .await
            {
                Ok(r) => r.into_inner().overall_code == Code::Ok as i32,
                Err(_) => false,
            }
        }
    });
    let ok = futures::future::join_all(burst).await;
    let failed = ok.iter().filter(|o| !**o).count();
    assert_eq!(
        failed, 0,
        "{failed} of 300 requests failed right at SERVING"
    );
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Cluster: a primary killed, a reshard under load.
// ---------------------------------------------------------------------------------------------
