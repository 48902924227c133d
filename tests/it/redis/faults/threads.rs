//! The serving threads' own connections (sluice's RESP client, `store/redis/link.rs`), through
//! the real binary's wiring (`--grpc-threads 2`): replies reach their own callers, a thread
//! whose connection is not up sends on the shared pool and fails nothing, killed connections
//! come back, and TLS and a Sentinel failover are followed by them too.

use super::*;
use sluice::store::redis::CLIENT_NAME;

/// The `CLIENT LIST` lines of the serving threads' own connections.
fn own_connections(list: &str) -> Vec<String> {
    list.lines()
        .filter(|l| l.contains(&format!(" name={CLIENT_NAME} ")))
        .map(str::to_string)
        .collect()
}

/// A server on `url` (extra flags after), a config of one roomy descriptor `k` in domain `d`.
async fn serve(url: &str, extra: &[&str]) -> (sluice::app::Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n",
    )
    .unwrap();
    let server = sluice::app::start(
        serve_args(&config, url, extra),
        Arc::new(ManualClock::new(T0)),
    )
    .await
    .unwrap();
    let addr = server.grpc_addr;
    wait_until_async("SERVING", || async {
        health(addr).await == ServingStatus::Serving as i32
    })
    .await;
    (server, dir)
}

/// Sends `n` requests at once over 4 connections (so both serving threads take some), each on
/// a key of its own with `hits_addend` of its own; true when each got its own answer
/// (remaining = limit - its hits). Mismatched replies would answer with another's count.
async fn burst(addr: std::net::SocketAddr, n: usize, tag: &str) -> Result<(), String> {
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let calls = (0..n).map(|i| {
        let mut c = clients[i % clients.len()].clone();
        let hits = (i % 50 + 1) as u32;
        let mut req = req_k(&[&format!("{tag}-{i}")]).addend(1).to_proto();
        req.hits_addend = hits;
        async move {
            let r = c
                .should_rate_limit(req)
                .await
                .map_err(|e| format!("request {i}: {e}"))?
                .into_inner();
            let remaining = r.statuses.first().map(|s| s.limit_remaining);
            if r.overall_code == Code::Ok as i32 && remaining == Some(1_000_000 - hits) {
                Ok(())
            } else {
                Err(format!("request {i} ({hits} hits) got {r:?}"))
            }
        }
    });
    let failed: Vec<String> = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(f) => Err(format!("{} of {n} failed; first: {f}", failed.len())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_threads_decide_on_their_own_connections_and_each_reply_reaches_its_caller() {
    let redis = RedisNode::start();
    let (server, _dir) = serve(&redis.url(), &[]).await;
    wait_until("both threads' own connections", || {
        own_connections(&redis.cli(&["CLIENT", "LIST"])).len() == 2
    });
    let before = redis.decision_calls();
    burst(server.grpc_addr, 400, "own").await.unwrap();
    // The decisions of one scheduler tick leave as one FCALL: fewer round trips than requests.
    let calls = redis.decision_calls() - before;
    assert!(
        (1..400).contains(&calls),
        "{calls} round trips for 400 requests"
    );
    // The decisions went over the threads' own connections (their last command).
    let own = own_connections(&redis.cli(&["CLIENT", "LIST"]));
    assert!(
        own.iter().any(|l| l.contains(" cmd=fcall ")),
        "no FCALL on the threads' connections: {own:?}"
    );
    // The library flushed: the threads reconnect and load it again, and the requests that
    // met it missing go on the shared pool: nothing fails.
    redis.cli(&["FUNCTION", "FLUSH"]);
    burst(server.grpc_addr, 200, "flushed").await.unwrap();
    wait_until("the library loaded again", || {
        redis.cli(&["FUNCTION", "LIST"]).contains("sluice_")
    });
    burst(server.grpc_addr, 200, "reloaded").await.unwrap();
    server.shutdown();
    server.wait().await.unwrap();
}

/// Item 6 of issue 13: no request gets UNAVAILABLE because a thread's own connection is not up
/// while the shared pool is. Here it never comes up: the ACL refuses its `CLIENT SETNAME`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_threads_own_connections_refused_every_request_goes_on_the_pool() {
    let redis = RedisNode::start();
    redis.cli(&["ACL", "SETUSER", "default", "-client|setname"]);
    let (server, _dir) = serve(&redis.url(), &[]).await;
    wait_until("the threads' connections to have tried", || {
        redis.cli(&["ACL", "LOG"]).contains("setname")
    });
    for round in 0..3 {
        burst(server.grpc_addr, 200, &format!("pool{round}"))
            .await
            .unwrap();
    }
    assert!(own_connections(&redis.cli(&["CLIENT", "LIST"])).is_empty());
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_own_connections_come_back() {
    let redis = RedisNode::start();
    let (server, _dir) = serve(&redis.url(), &[]).await;
    let ids = |list: &str| -> Vec<String> {
        own_connections(list)
            .iter()
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_string)
            .collect()
    };
    wait_until("both threads' own connections", || {
        ids(&redis.cli(&["CLIENT", "LIST"])).len() == 2
    });
    let old = ids(&redis.cli(&["CLIENT", "LIST"]));
    for id in &old {
        redis.cli(&["CLIENT", "KILL", "ID", id]);
    }
    wait_until("new own connections", || {
        let now = ids(&redis.cli(&["CLIENT", "LIST"]));
        now.len() == 2 && now.iter().all(|i| !old.contains(i))
    });
    burst(server.grpc_addr, 200, "back").await.unwrap();
    let own = own_connections(&redis.cli(&["CLIENT", "LIST"]));
    assert!(own.iter().any(|l| l.contains(" cmd=fcall ")), "{own:?}");
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_connections_speak_tls_with_a_custom_ca() {
    let redis = RedisNode::start_tls();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = redis.tls_ca().unwrap().to_str().unwrap().to_string();
    let (server, _dir) = serve(&url, &["--redis-tls-ca", &ca]).await;
    wait_until("both threads' own connections", || {
        own_connections(&redis.cli(&["CLIENT", "LIST"])).len() == 2
    });
    burst(server.grpc_addr, 200, "tls").await.unwrap();
    let own = own_connections(&redis.cli(&["CLIENT", "LIST"]));
    assert!(own.iter().any(|l| l.contains(" cmd=fcall ")), "{own:?}");
    server.shutdown();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_connections_follow_a_sentinel_failover() {
    let (mut setup, replica) = sentinel_with_replica();
    let service = redis_support::SENTINEL_SERVICE;
    let (server, _dir) = serve(&setup.url(), &[]).await;
    wait_until("both threads' own connections to the primary", || {
        own_connections(&setup.master.cli(&["CLIENT", "LIST"])).len() == 2
    });
    burst(server.grpc_addr, 100, "before").await.unwrap();

    setup.master.kill();
    let want = replica.port.to_string();
    wait_until("the sentinel to promote the replica", || {
        setup
            .sentinel
            .cli(&["SENTINEL", "get-master-addr-by-name", service])
            .contains(&want)
    });
    wait_until("both threads' own connections to the new primary", || {
        own_connections(&replica.cli(&["CLIENT", "LIST"])).len() == 2
    });
    // Requests succeed again (the shared pool follows by itself; a burst may still meet it
    // reconnecting, so polled), and then the threads decide on their own connections.
    let addr = server.grpc_addr;
    let attempt = std::sync::atomic::AtomicUsize::new(0);
    wait_until_async("requests to succeed on the new primary", || async {
        let n = attempt.fetch_add(1, Ordering::Relaxed);
        burst(addr, 50, &format!("after{n}")).await.is_ok()
    })
    .await;
    let before = replica.decision_calls();
    burst(addr, 100, "own-after").await.unwrap();
    let calls = replica.decision_calls() - before;
    assert!(
        (1..=100).contains(&calls),
        "{calls} round trips for 100 requests"
    );
    let own = own_connections(&replica.cli(&["CLIENT", "LIST"]));
    assert!(own.iter().any(|l| l.contains(" cmd=fcall ")), "{own:?}");
    server.shutdown();
    server.wait().await.unwrap();
}

/// Where the function library cannot be loaded (here an ACL refuses `FUNCTION`; likewise a
/// Redis before 7.0 or a Valkey before 7.2): every decision is an `FCALL` of it, so no
/// connection is up, the store is not ready, the log names the refused permission, and
/// requests fail as a store outage (`--on-store-error`, here UNAVAILABLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_function_permission_the_store_is_not_ready_and_says_why() {
    let redis = RedisNode::start();
    redis.cli(&["ACL", "SETUSER", "default", "-function"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n",
    )
    .unwrap();
    let url = redis.url();
    let flags = [
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--grpc-threads",
        "2",
    ];
    let bin = crate::support::process::Binary::start(&config, &flags);
    wait_until("the refusal logged, naming the permission", || {
        bin.log.lock().unwrap().iter().any(|l| {
            l.contains("function library") && l.contains("function|load") && l.contains("7.0")
        })
    });
    assert_ne!(health(bin.grpc_addr).await, ServingStatus::Serving as i32);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", bin.grpc_addr))
        .await
        .unwrap();
    let status = client
        .should_rate_limit(req_k(&["nofunction"]).to_proto())
        .await
        .expect_err("no decision without the library");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(redis.command_calls("fcall"), 0);
    assert_eq!(redis.cli(&["DBSIZE"]), "0");
}

/// While a stalled Redis holds a thread's `FCALL`, the decisions queued behind it wait; one
/// whose caller gave up meanwhile (its timeout passed) is never sent, so nothing is charged
/// for an answer nobody got. The one that was out runs when Redis wakes, as any written call.
#[test]
fn a_decision_given_up_before_it_left_is_never_sent() {
    use std::io::{Read, Write};
    let redis = RedisNode::start();
    let opts =
        redis_support::store_options(&redis.url(), ClockSource::Local, Duration::from_millis(100));
    let (rt, store) = redis_support::on_a_serving_thread(&redis, opts);
    let limit = Limit::fixed_window(1_000, 3_600 * SEC).unwrap();
    let key = |v: &str| key_of("abandoned:", v, &limit);
    let (a, b, c) = (key("a"), key("b"), key("c"));
    let decide = |k: &[u8]| {
        let check = Check::new(k, &limit, Ask::take(1));
        rt.block_on(store.decide_checks(&[check], T0, Deadline::NONE))
    };

    // Redis asleep (0.6 s: under the link's 1 s stall check), known by a PING left unanswered.
    let port = redis.port;
    let sleeper = std::thread::spawn(move || {
        let status = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "0.6"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    });
    wait_until("Redis to sleep", || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        s.write_all(b"PING\r\n").unwrap();
        s.read(&mut [0; 16]).is_err()
    });
    // `a` leaves and waits in Redis; `b` queues behind it; both callers give up.
    assert!(decide(&a).is_err());
    assert!(decide(&b).is_err());
    sleeper.join().unwrap();
    // Redis answers again: `c` is decided, `a` ran when Redis woke, `b` never left.
    assert!(decide(&c).unwrap()[0].allowed);
    let exists = |k: &[u8]| redis.cli(&["EXISTS", std::str::from_utf8(k).unwrap()]) == "1";
    assert!(exists(&a) && exists(&c));
    assert!(!exists(&b), "a decision nobody waited for was sent");
}

/// An ACL that lets `FUNCTION LOAD` through but refuses `FCALL`: the library loads, but
/// every decision is refused, so requests fail as a store outage (`--on-store-error`, here
/// UNAVAILABLE): there is no other way to decide. Nothing is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fcall_refused_decisions_fail() {
    let redis = RedisNode::start();
    redis.cli(&["ACL", "SETUSER", "default", "-fcall"]);
    let (server, _dir) = serve(&redis.url(), &[]).await;
    let err = burst(server.grpc_addr, 20, "nofcall").await.unwrap_err();
    assert!(err.starts_with("20 of 20 failed"), "{err}");
    assert!(err.contains("unavailable"), "{err}");
    assert!(err.contains("NOPERM") && err.contains("'fcall'"), "{err}");
    assert_eq!(
        redis.command_calls("fcall"),
        0,
        "refused calls are not counted"
    );
    assert_eq!(redis.cli(&["DBSIZE"]), "0");
    server.shutdown();
    server.wait().await.unwrap();
}

/// A new build's function library replaces the previous builds' (`sluice_*` libraries other
/// than its own are deleted when it loads its own); other libraries stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_library_replaces_the_previous_builds() {
    let redis = RedisNode::start();
    let load = |name: &str| {
        let lib = format!(
            "#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)"
        );
        let out = redis.cli(&["FUNCTION", "LOAD", &lib]);
        assert_eq!(out.trim(), name, "{out}");
    };
    load("sluice_0ld0ld0ld0ld");
    load("theirs");
    let (server, _dir) = serve(&redis.url(), &[]).await;
    let ours = &sluice::store::redis::library::LIBRARY.name;
    let names = || -> Vec<String> {
        let list = redis.cli(&["FUNCTION", "LIST"]);
        let lines: Vec<&str> = list.lines().map(str::trim).collect();
        let mut names: Vec<String> = lines
            .windows(2)
            .filter(|w| w[0] == "library_name")
            .map(|w| w[1].to_string())
            .collect();
        names.sort();
        names
    };
    wait_until("only this build's sluice library, beside theirs", || {
        names() == [ours.clone(), "theirs".to_string()]
    });
    burst(server.grpc_addr, 200, "replaced").await.unwrap();
    server.shutdown();
    server.wait().await.unwrap();
}
