//! `sluice-bench`, the built binary, against real servers: its own noop server, an in-process
//! sluice (exact OK / OVER_LIMIT counts), and a test-started redis-server (`redis-floor`).
//! Nothing here asserts speed: the figures it prints are for benchmarks.

use crate::support;
use crate::support::redis as redis_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value as Json;
use support::{Sluice, StoreKind};

const BENCH: &str = env!("CARGO_BIN_EXE_sluice-bench");

/// A `sluice-bench noop` child, stopped with SIGTERM on drop.
struct Noop {
    child: Child,
    addr: String,
}

impl Noop {
    fn start(extra: &[&str]) -> Noop {
        let mut child = Command::new(BENCH)
            .arg("noop")
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("sluice-bench runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line {line:?}"))
            .to_string();
        Noop { child, addr }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        terminate(&self.child);
        self.child.wait().expect("wait")
    }
}

impl Drop for Noop {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Runs `sluice-bench ARGS --json -` and parses its result; panics unless it exits 0.
fn bench_json(args: &[&str]) -> Json {
    let out = Command::new(BENCH)
        .args(args)
        .args(["--json", "-"])
        .output()
        .expect("sluice-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    eprintln!("{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stderr}"))
}

/// `sluice-bench load` on `target` for `duration` without warm-up, then `rest`: its result.
fn load_json(target: &str, duration: &str, rest: &[&str]) -> Json {
    let mut args = vec![
        "load",
        "--target",
        target,
        "--duration",
        duration,
        "--warmup",
        "0s",
    ];
    args.extend_from_slice(rest);
    bench_json(&args)
}

/// Runs sluice-bench from inside a tokio test without blocking the server in the same process.
async fn bench_json_async(args: Vec<String>) -> Json {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bench_json(&args)
    })
    .await
    .expect("the blocking task")
}

fn u(j: &Json, field: &str) -> u64 {
    j[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {j}"))
}

#[test]
fn closed_loop_on_the_noop_server_answers_every_request_ok() {
    let noop = Noop::start(&[]);
    let pid = noop.pid();
    let j = bench_json(&[
        "load",
        "--target",
        &noop.addr,
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--connections",
        "2",
        "--in-flight",
        "8",
        "--descriptor",
        "k=v{i}",
        "--descriptor",
        "a=b",
        "--keys",
        "100",
        "--server-pid",
        &pid,
        "--label",
        "noop-test",
    ]);
    assert_eq!(j["mode"], "closed");
    assert_eq!(j["label"], "noop-test");
    assert_eq!(u(&j, "in_flight"), 8);
    assert_eq!(u(&j, "connections"), 2);
    assert!(j["rate"].is_null());
    let requests = u(&j, "requests");
    assert!(requests > 0);
    assert_eq!(u(&j, "ok"), requests);
    assert_eq!(u(&j, "over_limit") + u(&j, "unknown"), 0);
    assert_eq!(j["errors"], serde_json::json!({}));
    assert!(j["throughput_rps"].as_f64().unwrap() > 0.0);
    let lat = &j["latency_us"];
    assert!(u(lat, "p50") > 0 && u(lat, "p50") <= u(lat, "p99") && u(lat, "p99") <= u(lat, "max"));
    assert!(j["server_cpu_s"].as_f64().unwrap() > 0.0, "{j}");
    assert!(j["server_cpu_us_per_request"].as_f64().unwrap() > 0.0);
    assert!(j["client_cpu_s"].as_f64().is_some());
    assert!(j["redis"].is_null());
    assert!(noop.stop().success(), "the noop server exits 0 on SIGTERM");
}

#[test]
fn open_loop_sends_rate_times_duration_requests() {
    let noop = Noop::start(&["--runtime", "per-core", "--threads", "2"]);
    let j = bench_json(&[
        "load",
        "--target",
        &noop.addr,
        "--rate",
        "200",
        "--duration",
        "1s",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--descriptor",
        "k=v",
    ]);
    assert_eq!(j["mode"], "open");
    assert_eq!(j["rate"].as_f64(), Some(200.0));
    assert!(j["in_flight"].is_null());
    // The schedule has exactly 200 slots in the measured second; a stall would show as
    // latency, not as fewer requests.
    let requests = u(&j, "requests");
    assert!((150..=250).contains(&requests), "{requests} requests");
    assert_eq!(u(&j, "ok"), requests, "{j}");
}

#[test]
fn an_open_loop_far_behind_keeps_its_connection() {
    // Far more offered than one connection carries: thousands of answers wait unread at times.
    // Every request is answered or counted as not sent; none fails with the connection
    // (h2's default budget of small unread DATA frames closed it with ENHANCE_YOUR_CALM).
    // The generator's own per-request timeout is set long: on a busy host a request may wait
    // seconds behind the 5,000 before it, which is the generator's deadline, not the
    // connection failing.
    let noop = Noop::start(&["--runtime", "current"]);
    let j = load_json(
        &noop.addr,
        "1s",
        &[
            "--rate",
            "1000000",
            "--max-in-flight",
            "5000",
            "--timeout",
            "120s",
            "--connections",
            "1",
            "--descriptor",
            "k=v",
        ],
    );
    let errors = j["errors"].as_object().expect("errors");
    assert!(
        errors.keys().all(|k| k == "client_overload"),
        "errors other than client_overload: {j}"
    );
    assert!(u(&j, "ok") > 1000, "{j}");
}

#[test]
fn multi_thread_noop_and_generator_work_too() {
    let noop = Noop::start(&["--runtime", "multi", "--threads", "2"]);
    let j = load_json(
        &noop.addr,
        "300ms",
        &[
            "--threads",
            "2",
            "--connections",
            "3",
            "--descriptor",
            "k=v",
        ],
    );
    assert!(u(&j, "requests") > 0);
    assert_eq!(u(&j, "ok"), u(&j, "requests"));
}

const CONFIG: &str = "
domain: bench
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 5
      unit: hour
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_against_sluice_are_exact_for_one_key() {
    // The test's clock stands still, so the hour never ends: exactly 5 requests pass.
    let sluice = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let args: Vec<String> = [
        "load",
        "--target",
        &sluice.server.grpc_addr.to_string(),
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--connections",
        "2",
        "--in-flight",
        "8",
        "--descriptor",
        "k=v",
        "--server-pid",
        &std::process::id().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let j = bench_json_async(args).await;
    let requests = u(&j, "requests");
    assert!(requests > 5, "{j}");
    assert_eq!(u(&j, "ok"), 5, "{j}");
    assert_eq!(u(&j, "over_limit"), requests - 5, "{j}");
    assert_eq!(j["errors"], serde_json::json!({}));
    assert!(j["server_cpu_s"].as_f64().unwrap() > 0.0, "{j}");
    sluice.stop().await;
}

#[test]
fn bad_arguments_and_an_unreachable_target_fail() {
    for args in [
        &["load", "--descriptor", "k"][..],
        &["load", "--duration", "1w"],
        &["load", "--rate", "0"],
        &["load", "--target", "nohost"],
        &["memory", "--algorithm", "nope"],
    ] {
        let out = Command::new(BENCH).args(args).output().expect("runs");
        assert!(!out.status.success(), "{args:?} should fail");
    }
    // A port nobody listens on: bound then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = Command::new(BENCH)
        .args(["load", "--duration", "100ms", "--warmup", "0s"])
        .args(["--target", &format!("127.0.0.1:{port}")])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

#[test]
fn redis_floor_runs_the_decision_script_for_every_algorithm() {
    let redis = redis_support::RedisNode::start();
    let addr = format!("127.0.0.1:{}", redis.port);
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "leaky_bucket",
        "gcra",
        "distinct",
    ] {
        let j = bench_json(&[
            "redis-floor",
            "--redis",
            &addr,
            "--algorithm",
            algorithm,
            "--requests",
            "2000",
            "--pipeline",
            "16",
            "--keys",
            "10",
        ]);
        assert_eq!(j["algorithm"], algorithm);
        let calls = u(&j, "calls");
        assert!(calls >= 1000, "{algorithm}: {j}");
        assert!(j["usec_per_call"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["throughput_rps"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["command"].as_str().unwrap().contains("FCALL"));
    }
    // __rand_int__ spread the calls over at most --keys keys per algorithm (sliding_window
    // and the rest keep one key each).
    let keys: u64 = redis.cli(&["DBSIZE"]).trim().parse().expect("DBSIZE");
    assert!((7..=70).contains(&keys), "{keys} keys");
}

#[test]
fn memory_reports_bytes_per_key_for_every_algorithm() {
    let j = bench_json(&["memory", "--keys", "2000"]);
    let reports = j.as_array().expect("an array");
    assert_eq!(reports.len(), 8);
    for r in reports {
        assert_eq!(u(r, "keys"), 2000);
        let store = r["store_bytes_per_key"].as_f64().unwrap();
        assert!(store > 0.0, "{r}");
        assert!(r["rss_bytes_per_key"].as_f64().unwrap() >= 0.0, "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_counts_redis_commands_per_request() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let sluice = Sluice::start(StoreKind::Redis(url), Some(CONFIG), &[]).await;
    let args: Vec<String> = [
        "load",
        "--target",
        &sluice.server.grpc_addr.to_string(),
        "--duration",
        "500ms",
        "--warmup",
        "0s",
        "--in-flight",
        "4",
        "--descriptor",
        "k=v{i}",
        "--keys",
        "1000",
        "--redis",
        &format!("127.0.0.1:{}", redis.port),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let j = bench_json_async(args).await;
    let answered = u(&j, "ok") + u(&j, "over_limit");
    assert!(answered > 0, "{j}");
    let r = &j["redis"];
    // At most one script call per request (a serving thread's FCALL carries every decision
    // of its tick). Redis also counts the commands the scripts run inside (GET, SET, ...), so
    // those show up beside them.
    let count = |c: &str| r["commands"][c].as_u64().unwrap_or(0);
    let scripts = count("evalsha") + count("fcall");
    assert!((1..=answered).contains(&scripts), "{j}");
    let per_request = r["scripts_per_request"].as_f64().unwrap();
    assert!(per_request > 0.0 && per_request <= 1.0, "{j}");
    assert_eq!(per_request, scripts as f64 / answered as f64, "{j}");
    assert!(r["commands_per_request"].as_f64().unwrap() >= 1.0);
    assert!(r["cpu_s"].as_f64().unwrap() >= 0.0);
    sluice.stop().await;
}

/// `noop --seed-redis`: each descriptor is one `EVALSHA` of the seeds' fixed-window script on
/// that Redis (the floor of `bench/redis_cost.py`), its answer the script's; the limit (10^9)
/// is never reached, and a key's first call sets its 60 s expiry.
#[test]
fn noop_with_seed_redis_runs_the_seed_script_per_descriptor() {
    let redis = redis_support::RedisNode::start();
    let noop = Noop::start(&[
        "--runtime",
        "per-core",
        "--threads",
        "2",
        "--seed-redis",
        &format!("127.0.0.1:{}", redis.port),
    ]);
    let j = load_json(
        &noop.addr,
        "500ms",
        &[
            "--connections",
            "2",
            "--in-flight",
            "4",
            "--descriptor",
            "k=v{i}",
            "--descriptor",
            "k=w{i}",
            "--keys",
            "50",
            "--redis",
            &format!("127.0.0.1:{}", redis.port),
        ],
    );
    let answered = u(&j, "ok");
    assert!(answered > 0 && u(&j, "requests") == answered, "{j}");
    assert_eq!(j["errors"], serde_json::json!({}));
    // Two descriptors: two script calls per request.
    assert_eq!(
        j["redis"]["commands"]["evalsha"].as_u64(),
        Some(2 * answered),
        "{j}"
    );
    let ttl: i64 = redis.cli(&["PTTL", "bench|k=v7|"]).trim().parse().unwrap();
    assert!((1..=60_000).contains(&ttl), "{ttl}");
    noop.stop();
}

/// `noop --seed-redis --floor-script`: another algorithm's floor (bench/floors/sliding_log.lua,
/// a sorted set per key) with its `--floor-arg`s in order; its answers are the script's: a
/// limit of 3 in a 60 s window admits exactly 3 calls on the one key.
#[test]
fn noop_with_a_floor_script_calls_it_with_its_arguments() {
    let redis = redis_support::RedisNode::start();
    let script = format!(
        "{}/bench/floors/sliding_log.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    let noop = Noop::start(&[
        "--seed-redis",
        &format!("127.0.0.1:{}", redis.port),
        "--floor-script",
        &script,
        "--floor-arg",
        "60000000",
        "--floor-arg",
        "3",
    ]);
    let j = load_json(
        &noop.addr,
        "300ms",
        &["--in-flight", "4", "--descriptor", "k=v{i}", "--keys", "1"],
    );
    assert_eq!(u(&j, "ok"), 3, "{j}");
    assert!(u(&j, "over_limit") > 0, "{j}");
    assert_eq!(redis.cli(&["ZCARD", "bench|k=v0|"]).trim(), "3");
    noop.stop();
}
