//! `--backend redis` end to end: start-up with Redis down, TLS, ACL, every algorithm, the
//! gRPC deadline and the local over-limit cache.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_starts_with_redis_down_then_decides_in_redis() {
    // Take a port for Redis, and keep it down while sluice starts.
    let mut redis = RedisNode::start();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    let args = serve_on_redis(
        &config,
        &redis.url(),
        &[
            "--redis-command-timeout",
            "2s",
            "--on-store-error",
            "allow",
            "--clock",
            "local",
        ],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .expect("starts with redis down");
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let status = server.redis_status().unwrap();
    assert!(!status.connected);
    // Three hits against a limit of two: only the allow policy says OK.
    let over = req_k(&["a"]).addend(3).to_proto();
    let r = client.should_rate_limit(over.clone()).await.unwrap();
    assert_eq!(r.into_inner().overall_code, Code::Ok as i32);

    redis.restart();
    wait_until_async("sluice to decide in redis", || {
        let mut client = client.clone();
        let over = over.clone();
        async move {
            let r = client.should_rate_limit(over).await.unwrap().into_inner();
            r.overall_code == Code::OverLimit as i32
        }
    })
    .await;
    // "Connected" is the shared pool's; a serving thread's own connection may decide first.
    wait_until_async("the shared pool to connect", || async {
        server.redis_status().unwrap().connected
    })
    .await;

    let five = req_k(&["1", "2", "3", "4", "5"]).addend(1).to_proto();
    let before = redis.decision_calls();
    let r = client
        .should_rate_limit(five.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(redis.decision_calls() - before, 1, "one round trip");
    let codes = |r: &sluice::proto::RateLimitResponse| {
        r.statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect::<Vec<_>>()
    };
    assert_eq!(codes(&r), vec![(Code::Ok as i32, 1); 5]);
    client.should_rate_limit(five.clone()).await.unwrap();
    let r = client.should_rate_limit(five).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// TLS with a custom CA, and ACL credentials.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_custom_ca() {
    let redis = RedisNode::start_tls();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let mut opts = options(&url, ClockSource::Local);
    opts.connect.tls_ca = Some(redis.tls_ca().unwrap().to_path_buf());
    let store = connected(opts).await;
    let limit = Limit::fixed_window(1, 3_600 * SEC).unwrap();
    let k = key_of("tls:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    let stored = redis.cli(&["HGETALL", std::str::from_utf8(&k).unwrap()]);
    assert_eq!(fixed_window_state(&stored).map(|(_, count)| count), Some(1));

    // A CA file without certificates is a configuration error, not an outage.
    let empty = redis.dir().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let mut opts = options(&url, ClockSource::Local);
    opts.connect.tls_ca = Some(empty);
    assert!(RedisStore::connect(opts).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_username_and_password_from_the_url() {
    let redis = RedisNode::start_with(&[
        "--user", "default", "off", "--user", "sluice", "on", ">s3cret", "~*", "&*", "+@all",
    ]);
    let url = format!("redis://sluice:s3cret@127.0.0.1:{}", redis.port);
    let store = connected(options(&url, ClockSource::Local)).await;
    let limit = Limit::fixed_window(1, 3_600 * SEC).unwrap();
    let k = key_of("acl:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
    // The default user is off: the state was written by `sluice`.
    let got = redis.cli(&[
        "--user",
        "sluice",
        "--pass",
        "s3cret",
        "--no-auth-warning",
        "HGETALL",
        std::str::from_utf8(&k).unwrap(),
    ]);
    assert_eq!(
        fixed_window_state(&got).map(|(_, count)| count),
        Some(1),
        "{got}"
    );
}

/// Every algorithm loads and serves on the Redis backend: config/algorithms.yaml (one
/// descriptor per algorithm, `rate_limits` with a calendar day, refunds allowed) served by a
/// Redis-backed and a memory-backed server on the same manual clock gives identical responses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_serves_on_redis_as_in_memory() {
    let redis = RedisNode::start();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/algorithms.yaml");
    let clock = Arc::new(ManualClock::new(T0));
    let start = |backend: &[&str]| {
        let args = crate::support::parse_serve(std::path::Path::new(config), backend);
        sluice::app::start(args, clock.clone())
    };
    let url = redis.url();
    let on_redis = start(&[
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--clock",
        "local",
        "--redis-command-timeout",
        "2s",
    ])
    .await
    .expect("every algorithm loads");
    let in_memory = start(&[]).await.expect("starts");
    let connect = |addr| async move {
        RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
    };
    let mut a = connect(on_redis.grpc_addr).await;
    let mut b = connect(in_memory.grpc_addr).await;

    let descriptor = |entries: &[(&str, &str)]| RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect(),
        ..Default::default()
    };
    // The store connects in the background: wait until it decides (a key of its own).
    let warm_up = RateLimitRequest {
        domain: "algorithms".into(),
        descriptors: vec![descriptor(&[("api_key", "warm-up")])],
        hits_addend: 1,
    };
    wait_until_async("sluice to decide in redis", || {
        let (mut a, warm_up) = (a.clone(), warm_up.clone());
        async move { a.should_rate_limit(warm_up).await.is_ok() }
    })
    .await;
    let (mut checked, mut over) = (0, 0);
    for round in 0..12u32 {
        let ip = format!("10.0.0.{}", round % 7);
        let d = [
            descriptor(&[("api_key", "k")]),
            descriptor(&[("search", "q")]),
            descriptor(&[("password_reset", "me")]),
            descriptor(&[("upload", "u")]),
            descriptor(&[("webhook", "w")]),
            descriptor(&[("sms", "s")]),
            descriptor(&[("user", "alice"), ("ip", &ip)]),
            descriptor(&[("login", "bob")]),
            descriptor(&[("backend", "reports")]),
        ];
        for (i, d) in d.into_iter().enumerate() {
            // Alone, and with the next descriptor (several descriptors, one request).
            for hits in [1u32, 7] {
                let mut req = RateLimitRequest {
                    domain: "algorithms".into(),
                    descriptors: vec![d.clone()],
                    hits_addend: hits,
                };
                if round % 3 == 2 {
                    req.descriptors.push(descriptor(&[("login", "carol")]));
                }
                let ra = a.should_rate_limit(req.clone()).await.unwrap().into_inner();
                let rb = b.should_rate_limit(req).await.unwrap().into_inner();
                assert_eq!(ra, rb, "round {round}, descriptor {i}, hits {hits}");
                checked += 1;
                over += u64::from(ra.overall_code == Code::OverLimit as i32);
            }
        }
        clock.advance(700_000);
    }
    assert_eq!(checked, 12 * 9 * 2);
    assert!(
        over > 0 && over < checked,
        "{over} of {checked} over the limit"
    );
    assert!(redis.decision_calls() >= checked);
    for s in [on_redis, in_memory] {
        s.shutdown();
        s.wait().await.unwrap();
    }
}

/// The command timeout never outlives the request's gRPC deadline: with a command timeout of
/// 30 s and a stalled Redis, a call with a 1.5 s `grpc-timeout` is answered by the failure
/// policy before its deadline instead of failing with DEADLINE_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_grpc_deadline_caps_the_command_timeout() {
    let redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        &config,
        &url,
        &[
            "--redis-command-timeout",
            "30s",
            "--on-store-error",
            "allow",
            "--clock",
            "local",
        ],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .unwrap();
    server.store_ready().await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    // Three hits against a limit of two: only the allow policy says OK.
    let over = req_k(&["a"]).addend(3).to_proto();
    let with_deadline = || {
        let mut r = tonic::Request::new(over.clone());
        r.set_timeout(Duration::from_millis(1_500));
        r
    };
    let r = client.should_rate_limit(with_deadline()).await.unwrap();
    assert_eq!(
        r.into_inner().overall_code,
        Code::OverLimit as i32,
        "redis decides"
    );

    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "8"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("redis to stall", || !ping(redis.port));
    let r = client.should_rate_limit(with_deadline()).await;
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "redis was stalled for the whole call"
    );
    let r = r.expect("answered before the deadline");
    assert_eq!(
        r.into_inner().overall_code,
        Code::Ok as i32,
        "the failure policy answered"
    );
    sleeper.wait().unwrap();
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The local over-limit cache.
// ---------------------------------------------------------------------------------------------

/// The `over_limit_with_local_cache` counter of rule `d.k` in the server's /metrics.
fn with_local_cache(server: &sluice::app::Server) -> u64 {
    let text = server.metrics().render();
    text.lines()
        .find(|l| {
            l.starts_with("sluice_rate_limit_over_limit_with_local_cache_total{")
                && l.contains("key=\"d.k\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|n| n.parse::<f64>().unwrap() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_over_limit_keys_are_answered_without_redis_until_their_retry_time() {
    let redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let limit_of = |n: u32| {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}\n")
    };
    std::fs::write(&config, limit_of(2)).unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        &config,
        &url,
        &[
            "--redis-command-timeout",
            "2s",
            "--clock",
            "local",
            "--local-cache",
            "1000",
            "--watch-config",
            "false",
        ],
    );
    let clock = ManualClock::new(T0);
    let server = sluice::app::start(args, Arc::new(clock.clone()))
        .await
        .unwrap();
    server.store_ready().await;
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let code = |req: RateLimitRequest| {
        let mut client = client.clone();
        async move {
            client
                .should_rate_limit(req)
                .await
                .unwrap()
                .into_inner()
                .overall_code
        }
    };
    let one = req_k(&["a"]).addend(1).to_proto();
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    let before = redis.decision_calls();
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(redis.decision_calls(), before + 1, "Redis said over");
    assert_eq!(with_local_cache(&server), 0);

    // Known over: answered here, Redis untouched, until the hour ends (T0 is 800 s into one).
    for _ in 0..5 {
        assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    }
    clock.advance(2_800 * SEC - 1);
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(redis.decision_calls(), before + 1, "no round trip");
    assert_eq!(with_local_cache(&server), 6);
    // Another descriptor in the request, not known over: the request goes to Redis whole.
    assert_eq!(
        code(req_k(&["a", "b"]).addend(1).to_proto()).await,
        Code::OverLimit as i32
    );
    assert_eq!(redis.decision_calls(), before + 2);

    // A limit override is another limit: not blocked by the entry.
    let mut raised = one.clone();
    raised.descriptors[0].limit = Some(sluice::proto::rate_limit_descriptor::RateLimitOverride {
        requests_per_unit: 50,
        unit: sluice::proto::rate_limit_response::rate_limit::Unit::Hour as i32,
    });
    assert_eq!(code(raised).await, Code::Ok as i32);
    assert_eq!(redis.decision_calls(), before + 3);

    // So is a raised limit after a reload.
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    let calls = redis.decision_calls();
    std::fs::write(&config, limit_of(10)).unwrap();
    assert!(server.reload());
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(redis.decision_calls(), calls + 1);

    // And the retry time comes: Redis decides again.
    std::fs::write(&config, limit_of(2)).unwrap();
    assert!(server.reload());
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    assert_eq!(code(one.clone()).await, Code::OverLimit as i32);
    let calls = redis.decision_calls();
    clock.advance(1);
    assert_eq!(code(one.clone()).await, Code::Ok as i32);
    assert_eq!(redis.decision_calls(), calls + 1);
    server.shutdown();
    server.wait().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Failure policies per domain and per rule.
// ---------------------------------------------------------------------------------------------
