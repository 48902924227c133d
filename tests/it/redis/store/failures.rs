//! The failure policy, the breaker and recovery, a lost function library, a stalled Redis, and the
//! per-domain and per-rule policies with Redis down.

use super::*;

/// How often the library was loaded (`FUNCTION LOAD`, whatever the answer).
fn library_loads(redis: &RedisNode) -> u64 {
    redis.command_calls("function|load")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_allow_policy_breaker_and_recovery_with_the_library_lost() {
    let mut redis = RedisNode::start();
    let mut opts = options(&redis.url(), ClockSource::Local);
    opts.breaker = BreakerOptions {
        threshold: 3,
        probe_every: Duration::from_millis(20),
    };
    let store = connected(opts).await;
    let f = Fallback::new(store.clone(), FailurePolicy::Allow, None);
    let limit = Limit::fixed_window(1, 3_600 * SEC).unwrap();
    let k = key_of("outage:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].charged);
    assert!(
        !f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed,
        "the limit of 1 holds"
    );

    redis.kill();
    // While down, the policy answers: allowed, nothing charged. The breaker opens.
    let mut calls = 0;
    while !store.status().breaker_open {
        let v = f
            .decide(&c, T0, Deadline::NONE)
            .await
            .expect("allow policy answers");
        assert!(v[0].allowed && !v[0].charged);
        calls += 1;
        assert!(calls < 1_000, "the breaker never opened");
    }
    // Open: calls are refused without touching the network (one probe at a time may pass).
    let mut refused_at_once = 0;
    for _ in 0..20 {
        match store.decide_checks(&c, T0, Deadline::NONE).await {
            Err(e) if e.kind() == ErrorKind::BreakerOpen => refused_at_once += 1,
            // The probe let through: the connection is down.
            Err(e) => assert_eq!(e.kind(), ErrorKind::Connection, "{e}"),
            Ok(_) => panic!("redis is down"),
        }
    }
    assert!(refused_at_once > 0);
    assert!(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);

    // Back (empty, no library): recovery without restarting anything, the library loaded
    // again by the connections that come back.
    redis.restart();
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0, Deadline::NONE).await.is_ok()
    })
    .await;
    assert!(library_loads(&redis) > 0, "the library was loaded again");
    let status = store.status();
    assert!(status.connected && !status.breaker_open, "{status:?}");
    // The restarted Redis is empty: the key counts from zero again, in Redis.
    assert!(!store.decide_checks(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);

    // FUNCTION FLUSH: the call that finds its function gone loads the library and is sent
    // again.
    assert_eq!(redis.cli(&["FUNCTION", "FLUSH"]), "OK");
    let before = library_loads(&redis);
    let k2 = key_of("outage:", "y", &limit);
    let other = [take(&k2, &limit, 1, 0)];
    assert!(
        store
            .decide_checks(&other, T0, Deadline::NONE)
            .await
            .unwrap()[0]
            .allowed
    );
    assert_eq!(library_loads(&redis), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_policy_counts_in_memory_while_redis_is_down() {
    let mut redis = RedisNode::start();
    let store = connected(options(&redis.url(), ClockSource::Local)).await;
    let local = Arc::new(sluice::store::MemoryStore::new(1_000));
    let f = Fallback::new(store.clone(), FailurePolicy::Local, Some(local));
    let limit = Limit::fixed_window(2, 3_600 * SEC).unwrap();
    let k = key_of("local:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    redis.kill();
    let v: Vec<bool> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(f.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
        }
        out
    };
    assert_eq!(v, [true, true, false], "the same rule, counted locally");
    let deny = Fallback::new(store, FailurePolicy::Deny, None);
    assert!(!deny.decide(&c, T0, Deadline::NONE).await.unwrap()[0].allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_costs_the_command_timeout_not_more() {
    let redis = RedisNode::start();
    let mut opts = options(&redis.url(), ClockSource::Local);
    opts.command_timeout = Duration::from_millis(300);
    let store = connected(opts).await;
    let limit = Limit::fixed_window(10, 3_600 * SEC).unwrap();
    let k = key_of("stall:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    store.decide_checks(&c, T0, Deadline::NONE).await.unwrap();

    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "3"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("redis to stall", || !ping(redis.port));
    let r = store.decide_checks(&c, T0, Deadline::NONE).await;
    assert_eq!(
        r.as_ref().map_err(|e| e.kind()).err(),
        Some(ErrorKind::Timeout),
        "a stalled redis is a timeout: {r:?}"
    );
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the call gave up while redis was still stalled"
    );
    sleeper.wait().unwrap();
    wait_until_async("redis decisions again", || async {
        store.decide_checks(&c, T0, Deadline::NONE).await.is_ok()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The server with `--backend redis`.
// ---------------------------------------------------------------------------------------------

const POLICIES: &str = r#"
domain: api
descriptors:
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: deny}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: report
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: unavailable}
  - key: upload
    rate_limit: {unit: hour, requests_per_unit: 1, on_store_error: local}
"#;

const CLOSED_DOMAIN: &str = r#"
domain: bank
on_store_error: deny
descriptors:
  - key: transfer
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: balance
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_error: allow}
"#;

/// With Redis down, each request is answered by the strictest policy among its limits': the
/// rule's, else its domain's, else `--on-store-error` (allow here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_per_domain_and_rule_with_redis_down() {
    let mut redis = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("api.yaml"), POLICIES).unwrap();
    std::fs::write(dir.path().join("bank.yaml"), CLOSED_DOMAIN).unwrap();
    let url = redis.url();
    let args = serve_on_redis(
        dir.path(),
        &url,
        &["--clock", "local", "--on-store-error", "allow"],
    );
    let server = sluice::app::start(args, Arc::new(ManualClock::new(T0)))
        .await
        .unwrap();
    server.store_ready().await;
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let ask = |domain: &str, keys: &[&str]| {
        let req = RateLimitRequest {
            domain: domain.into(),
            descriptors: keys
                .iter()
                .map(|k| RateLimitDescriptor {
                    entries: vec![Entry {
                        key: k.as_bytes().to_vec(),
                        value: b"x".to_vec(),
                    }],
                    ..Default::default()
                })
                .collect(),
            hits_addend: 1,
        };
        let mut client = client.clone();
        async move {
            match client.should_rate_limit(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
                    Ok((r.overall_code, codes))
                }
                Err(s) => Err(s.code()),
            }
        }
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    // Up: Redis decides everything.
    assert_eq!(ask("api", &["login", "path"]).await, Ok((ok, vec![ok, ok])));

    redis.kill();
    assert_eq!(ask("api", &["path"]).await, Ok((ok, vec![ok])), "the flag");
    assert_eq!(
        ask("api", &["login"]).await,
        Ok((over, vec![over])),
        "the rule"
    );
    assert_eq!(
        ask("api", &["path", "login"]).await,
        Ok((over, vec![over, over])),
        "deny wins over allow"
    );
    assert_eq!(
        ask("api", &["report", "path"]).await,
        Err(tonic::Code::Unavailable),
        "unavailable wins over allow"
    );
    assert_eq!(
        ask("api", &["report", "login"]).await,
        Ok((over, vec![over, over])),
        "deny wins over unavailable"
    );
    // Local: the same rule, counted in this instance (1 per hour).
    assert_eq!(ask("api", &["upload"]).await, Ok((ok, vec![ok])));
    assert_eq!(ask("api", &["upload"]).await, Ok((over, vec![over])));
    assert_eq!(
        ask("api", &["upload", "report"]).await,
        Err(tonic::Code::Unavailable),
        "unavailable wins over local"
    );
    // A domain's policy, and a rule overriding it.
    assert_eq!(ask("bank", &["transfer"]).await, Ok((over, vec![over])));
    assert_eq!(ask("bank", &["balance"]).await, Ok((ok, vec![ok])));
    server.shutdown();
    server.wait().await.unwrap();
}

/// A serving thread's connection dropped under 16 calls counts once toward the breaker (a
/// threshold of 5, no probe to close it meanwhile): it stays closed, and the other threads'
/// requests are not refused for one connection's drop.
#[test]
fn one_dropped_connection_counts_once_toward_the_breaker() {
    let redis = RedisNode::start();
    let mut opts = options(&redis.url(), ClockSource::Redis);
    opts.breaker = BreakerOptions {
        threshold: 5,
        probe_every: Duration::from_secs(600),
    };
    let (rt, store) = redis_support::on_a_serving_thread(&redis, opts);
    let limit = Limit::fixed_window(1_000_000, 3_600 * SEC).unwrap();
    let k = key_of("one-drop:", "x", &limit);
    let c = [take(&k, &limit, 1, 0)];
    assert!(
        rt.block_on(store.decide_checks(&c, 0, Deadline::NONE))
            .unwrap()[0]
            .allowed
    );
    // Writes wait: the 16 calls are written, then their connection is killed.
    redis.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    let own = || {
        redis
            .cli(&["CLIENT", "LIST"])
            .lines()
            .find(|l| l.contains("name=sluice-thread"))
            .map(str::to_string)
    };
    let got = rt.block_on(async {
        let calls =
            futures::future::join_all((0..16).map(|_| store.decide_checks(&c, 0, Deadline::NONE)));
        let kill = async {
            wait_until_async("the calls waiting on the pause", || async {
                own().is_some_and(|l| l.contains(" flags=b "))
            })
            .await;
            let line = own().unwrap();
            let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
            redis.cli(&["CLIENT", "KILL", "ID", id]);
        };
        futures::future::join(calls, kill).await.0
    });
    redis.cli(&["CLIENT", "UNPAUSE"]);
    let lost = got.iter().filter(|r| r.is_err()).count();
    assert!(lost > 1, "calls cut by the drop: {lost}");
    assert!(
        !store.status().breaker_open,
        "{lost} calls, one drop, one failure"
    );
}
