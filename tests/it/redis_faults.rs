//! What Redis failures cost, against real `redis-server` processes (standalone, a 6-node
//! Cluster, Sentinel with a replica): a stall shorter than the command timeout fails nothing,
//! a longer one recovers within 100 ms of its end; a restart recovers within a bound; the
//! start-up race (requests sent the moment health says SERVING all succeed); a Cluster
//! primary killed costs only its own slots; a reshard under load; a Sentinel failover.
//!
//! Load comes from a few concurrent workers, each pacing itself; every outcome is recorded
//! with its time so the assertions read the timeline. Waits poll with a bound.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::poll::{wait_until, wait_until_async};
use crate::support::redis::{self as redis_support, ping, RedisCluster, RedisNode};
use clap::Parser;
use sluice::algorithm::{Ask, Limit};
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::settings::{Cli, Command as Sub};
use sluice::store::key::{self, Part};
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore};
use sluice::store::{Check, Deadline};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const SEC: Micros = 1_000_000;
const T0: Micros = 1_700_000_000 * SEC;

fn options(url: &str, command_timeout: Duration) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url: url.into(),
            tls_ca: None,
            tls_client: None,
            username: None,
            password: None,
            password_file: None,
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
        },
        command_timeout,
        clock: ClockSource::Local,
        breaker: BreakerOptions::default(),
    }
}

async fn connected(opts: RedisOptions) -> RedisStore {
    let store = RedisStore::connect(opts).expect("valid options");
    tokio::time::timeout(Duration::from_secs(60), store.ready())
        .await
        .expect("the store connects");
    store
}

fn key_of(prefix: &str, value: &str, limit: &Limit) -> Vec<u8> {
    let mut out = Vec::new();
    key::build(
        &mut out,
        prefix.as_bytes(),
        "d",
        [Part::Value {
            key: b"k",
            value: value.as_bytes(),
        }],
        limit,
        None,
    );
    out
}

/// A limit never reached: every answered call is allowed.
fn roomy() -> Limit {
    Limit::fixed_window(1_000_000_000, 3_600 * SEC)
}

/// One call's outcome: when it ended, which key (index) and whether Redis decided it.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    at: Instant,
    key: usize,
    ok: bool,
    took: Duration,
    /// The error's kind when not `ok`.
    error: Option<&'static str>,
}

/// Workers deciding `keys` round robin (one key per call), `pause` between calls each, until
/// stopped; their outcomes, and whether the store's breaker was ever seen open.
struct Load {
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    opened: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(store: &RedisStore, keys: Arc<Vec<Vec<u8>>>, workers: usize, pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let opened = Arc::new(AtomicBool::new(false));
        let tasks = (0..workers)
            .map(|w| {
                let (store, keys) = (store.clone(), keys.clone());
                let (stop, outcomes, opened) = (stop.clone(), outcomes.clone(), opened.clone());
                tokio::spawn(async move {
                    let limit = roomy();
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        let k = i % keys.len();
                        let check = [Check::new(&keys[k], &limit, Ask::take(1))];
                        let started = sluice::clock::monotonic();
                        let result = store.decide_checks(&check, T0, Deadline::NONE).await;
                        let ok = result.is_ok();
                        let error = result.err().map(|e| e.kind().as_str());
                        let at = sluice::clock::monotonic();
                        if store.status().breaker_open {
                            opened.store(true, Ordering::Relaxed);
                        }
                        outcomes.lock().unwrap().push(Outcome {
                            at,
                            key: k,
                            ok,
                            took: at - started,
                            error,
                        });
                        i += workers;
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            outcomes,
            opened,
            tasks,
        }
    }

    fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes.lock().unwrap().clone()
    }

    /// Waits until `n` more calls have ended (bounded).
    async fn more(&self, n: usize) {
        let from = self.outcomes.lock().unwrap().len();
        wait_until_async("more calls", || async {
            self.outcomes.lock().unwrap().len() >= from + n
        })
        .await;
    }

    async fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.outcomes.lock().unwrap().clone()
    }
}

/// `DEBUG SLEEP secs` on `port`, waited for off the runtime; the instant it returned.
async fn debug_sleep(port: u16, secs: &str) -> Instant {
    let secs = secs.to_string();
    tokio::task::spawn_blocking(move || {
        let status = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", &secs])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success());
        sluice::clock::monotonic()
    })
    .await
    .unwrap()
}

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
    let first_ok = outcomes
        .iter()
        .filter(|o| o.ok && o.at > ended - Duration::from_millis(300))
        .map(|o| o.at)
        .min()
        .expect("calls succeed again");
    // Answers that were queued behind the stall may even land before redis-cli sees its own.
    let late = first_ok.saturating_duration_since(ended);
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
    let back = sluice::clock::monotonic();
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

fn serve_args(config: &std::path::Path, url: &str, extra: &[&str]) -> sluice::settings::ServeArgs {
    let mut argv = vec![
        "sluice",
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--backend",
        "redis",
        "--redis-url",
        url,
        "--redis-command-timeout",
        "1s",
        "--grpc-threads",
        "2",
    ];
    argv.extend_from_slice(extra);
    let Sub::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("serve")
    };
    args
}

async fn health(addr: std::net::SocketAddr) -> i32 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("gRPC connects");
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .expect("health answers")
        .into_inner()
        .status
}

fn request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"k".to_vec(),
                value: value.as_bytes().to_vec(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

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
            match c.should_rate_limit(request(&format!("v{}", i % 30))).await {
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

/// Errors and calls per owning primary (by port), over `outcomes`.
fn per_node(outcomes: &[Outcome], owner: &[u16]) -> HashMap<u16, (usize, usize)> {
    let mut by: HashMap<u16, (usize, usize)> = HashMap::new();
    for o in outcomes {
        let e = by.entry(owner[o.key]).or_default();
        e.1 += 1;
        if !o.ok {
            e.0 += 1;
        }
    }
    by
}

/// The ports of the nodes that are primaries now (asked with `ROLE`, skipping dead ones).
fn primaries(cluster: &RedisCluster) -> Vec<u16> {
    cluster
        .nodes
        .iter()
        .filter(|n| ping(n.port) && n.cli(&["ROLE"]).starts_with("master"))
        .map(|n| n.port)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_costs_only_its_own_slots() {
    let mut cluster = RedisCluster::start();
    // Redis' default (`yes`) makes every node refuse every slot (CLUSTERDOWN) from the moment
    // the dead primary is marked failed until its replica is promoted: nothing a client can
    // route around. Operators who want healthy slots served set it to `no`.
    for n in &cluster.nodes {
        assert_eq!(
            n.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]),
            "OK"
        );
    }
    let store = connected(options(&cluster.url(), Duration::from_millis(300))).await;
    let limit = roomy();
    let keys: Vec<Vec<u8>> = (0..60)
        .map(|i| key_of("kill:", &i.to_string(), &limit))
        .collect();
    let owner: Vec<u16> = keys.iter().map(|k| cluster.owner(k)).collect();
    let victim = owner[0];
    let load = Load::start(&store, Arc::new(keys), 6, Duration::from_millis(5));
    load.more(200).await;

    let killed_at = sluice::clock::monotonic();
    let victim_node = cluster.nodes.iter_mut().find(|n| n.port == victim).unwrap();
    victim_node.kill();
    // The replica takes over after the cluster node timeout (5 s here).
    let promoted = tokio::task::spawn_blocking({
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
        move || {
            let start = sluice::clock::monotonic();
            loop {
                let masters = ports
                    .iter()
                    .filter(|&&p| ping(p) && redis_support::cli(p, &["ROLE"]).starts_with("master"))
                    .count();
                if masters == 3 {
                    return sluice::clock::monotonic();
                }
                assert!(
                    start.elapsed() < Duration::from_secs(50),
                    "no replica promoted"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })
    .await
    .unwrap();
    eprintln!("replica promoted {:?} after the kill", promoted - killed_at);
    wait_until_async("the dead primary's slots to answer again", || async {
        load.outcomes()
            .iter()
            .any(|o| o.ok && o.at > promoted && owner[o.key] == victim)
    })
    .await;
    load.more(200).await;
    let outcomes = load.stop().await;

    let during: Vec<Outcome> = outcomes
        .iter()
        .copied()
        .filter(|o| o.at >= killed_at)
        .collect();
    let by = per_node(&during, &owner);
    eprintln!("per primary (errors, calls) since the kill: {by:?}");
    let mut kinds: HashMap<(bool, &str), usize> = HashMap::new();
    for o in &during {
        if let Some(e) = o.error {
            *kinds.entry((owner[o.key] == victim, e)).or_default() += 1;
        }
    }
    eprintln!("errors by (on the dead primary, kind): {kinds:?}");
    for (port, (errors, calls)) in &by {
        if *port != victim {
            assert!(
                *errors * 100 <= *calls,
                "primary {port}: {errors} of {calls} calls failed while another primary died"
            );
        }
    }
    let back = during
        .iter()
        .filter(|o| o.ok && o.at > promoted && owner[o.key] == victim)
        .map(|o| o.at)
        .min()
        .unwrap();
    eprintln!(
        "dead primary's slots answered {:?} after the promotion",
        back - promoted
    );
    assert!(
        back - promoted <= Duration::from_secs(1),
        "the dead primary's slots answered {:?} after the promotion",
        back - promoted
    );
    assert_eq!(primaries(&cluster).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_load_fails_almost_nothing_and_never_stalls() {
    let cluster = RedisCluster::start();
    let store = connected(options(&cluster.url(), Duration::from_millis(500))).await;
    let limit = roomy();
    let keys: Vec<Vec<u8>> = (0..300)
        .map(|i| key_of("reshard:", &i.to_string(), &limit))
        .collect();
    let load = Load::start(&store, Arc::new(keys), 6, Duration::from_millis(2));
    load.more(200).await;

    let masters = primaries(&cluster);
    let id = |port: u16| redis_support::cli(port, &["CLUSTER", "MYID"]);
    let (from, to) = (id(masters[0]), id(masters[1]));
    let seed = format!("127.0.0.1:{}", masters[0]);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("redis-cli")
            .args(["--cluster", "reshard", &seed])
            .args(["--cluster-from", &from, "--cluster-to", &to])
            .args(["--cluster-slots", "1500", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster reshard")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "reshard failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    load.more(300).await;
    let outcomes = load.stop().await;
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap();
    eprintln!(
        "reshard: {failed} of {} calls failed; slowest call {slowest:?}",
        outcomes.len()
    );
    assert!(
        failed * 1000 <= outcomes.len(),
        "{failed} of {} calls failed",
        outcomes.len()
    );
    assert!(slowest <= Duration::from_secs(1), "a call took {slowest:?}");
}

// ---------------------------------------------------------------------------------------------
// Sentinel: the primary killed, its replica promoted.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed() {
    let mut setup = redis_support::RedisSentinel::start();
    let replica =
        RedisNode::start_with(&["--replicaof", "127.0.0.1", &setup.master.port.to_string()]);
    wait_until("the replica to sync", || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    let service = redis_support::SENTINEL_SERVICE;
    setup.sentinel.cli(&[
        "SENTINEL",
        "SET",
        service,
        "down-after-milliseconds",
        "1000",
    ]);
    wait_until("the sentinel to know the replica", || {
        setup
            .sentinel
            .cli(&["SENTINEL", "REPLICAS", service])
            .contains(&replica.port.to_string())
    });
    let store = connected(options(&setup.url(), Duration::from_millis(300))).await;
    let limit = roomy();
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..8)
            .map(|i| key_of("sentinel:", &i.to_string(), &limit))
            .collect(),
    );
    let load = Load::start(&store, keys, 4, Duration::from_millis(5));
    load.more(50).await;

    setup.master.kill();
    let killed = sluice::clock::monotonic();
    let want = replica.port.to_string();
    wait_until_async("the sentinel to promote the replica", || async {
        setup
            .sentinel
            .cli(&["SENTINEL", "get-master-addr-by-name", service])
            .contains(&want)
    })
    .await;
    let promoted = sluice::clock::monotonic();
    wait_until_async("calls to succeed on the new primary", || async {
        load.outcomes().iter().any(|o| o.ok && o.at > promoted)
    })
    .await;
    let outcomes = load.stop().await;
    let back = outcomes
        .iter()
        .filter(|o| o.ok && o.at > promoted)
        .map(|o| o.at)
        .min()
        .unwrap();
    eprintln!(
        "sentinel: promoted {:?} after the kill, calls back {:?} after that",
        promoted - killed,
        back - promoted
    );
    assert!(
        back - promoted <= Duration::from_secs(5),
        "back only after {:?}",
        back - promoted
    );
    assert!(replica.cli(&["ROLE"]).starts_with("master"));
}
