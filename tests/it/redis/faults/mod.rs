//! What Redis failures cost, against real `redis-server` processes (standalone, a 6-node
//! Cluster, Sentinel with a replica): a stall shorter than the command timeout fails nothing,
//! a longer one recovers within 100 ms of its end; a restart recovers within a bound; the
//! start-up race (requests sent the moment health says SERVING all succeed); a Cluster
//! primary killed costs only its own slots; a reshard under load; a Sentinel failover; a hot
//! sliding_log key beside other tenants.
//!
//! Load comes from a few concurrent workers, each pacing itself; every outcome is recorded
//! with its time so the assertions read the timeline. Waits poll with a bound.
//!
//! Modules: `standalone` (stall, restart, the start-up race), `cluster` (a primary killed, a
//! reshard), `sentinel` (a failover), `hot_key` (one key full at 10,000 entries), `threads` (the
//! serving threads' own connections).

mod cluster;
mod hot_key;
mod sentinel;
mod standalone;
mod threads;

use crate::support::req_k;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::poll::{wait_until, wait_until_async};
use crate::support::redis::{self as redis_support, ping, RedisCluster, RedisNode};
use redis_support::{connected, key_of};
use sluice::algorithm::{Ask, Limit};
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::store::redis::{ClockSource, RedisOptions, RedisStore};
use sluice::store::{Check, Deadline};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const SEC: Micros = 1_000_000;
const T0: Micros = 1_700_000_000 * SEC;

fn options(url: &str, command_timeout: Duration) -> RedisOptions {
    redis_support::store_options(url, ClockSource::Local, command_timeout)
}

/// A limit never reached: every answered call is allowed.
fn roomy() -> Limit {
    Limit::fixed_window(1_000_000_000, 3_600 * SEC).unwrap()
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
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Runs `f` on a thread of its own, on a current-thread runtime attached to `store` as a
/// serving thread is ([`RedisStore::attach_thread`]): its calls go on the thread's own
/// connections once they are up, as a server's do.
fn on_serving_thread<T, F, Fut>(store: RedisStore, f: F) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce(RedisStore) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            store.attach_thread().unwrap();
            f(store).await
        })
    })
}

/// What every worker of a [`Load`] shares.
#[derive(Clone)]
struct Worker {
    store: RedisStore,
    keys: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    opened: Arc<AtomicBool>,
    workers: usize,
    pause: Duration,
}

impl Worker {
    /// Worker `w`'s calls, until told to stop.
    async fn run(self, w: usize) {
        let limit = roomy();
        let mut i = w;
        while !self.stop.load(Ordering::Relaxed) {
            let k = i % self.keys.len();
            let check = [Check::new(&self.keys[k], &limit, Ask::take(1))];
            let started = crate::support::poll::real_now();
            let result = self.store.decide_checks(&check, T0, Deadline::NONE).await;
            let ok = result.is_ok();
            let error = result.err().map(|e| e.kind().as_str());
            let at = crate::support::poll::real_now();
            if self.store.status().breaker_open {
                self.opened.store(true, Ordering::Relaxed);
            }
            self.outcomes.lock().unwrap().push(Outcome {
                at,
                key: k,
                ok,
                took: at - started,
                error,
            });
            i += self.workers;
            tokio::time::sleep(self.pause).await;
        }
    }
}

impl Load {
    /// `workers` tasks on the test's runtime: every call on the store's shared pools.
    fn start(store: &RedisStore, keys: Arc<Vec<Vec<u8>>>, workers: usize, pause: Duration) -> Load {
        let (mut load, worker) = Load::new(store, keys, workers, pause);
        load.tasks = (0..workers)
            .map(|w| tokio::spawn(worker.clone().run(w)))
            .collect();
        load
    }

    /// `workers` tasks spread over `threads` threads, each with its own current-thread runtime
    /// attached to the store as a serving thread is ([`RedisStore::attach_thread`]): the
    /// calls go on the threads' own connections once up, as a server's do.
    fn on_threads(
        store: &RedisStore,
        keys: Arc<Vec<Vec<u8>>>,
        threads: usize,
        workers: usize,
        pause: Duration,
    ) -> Load {
        let (mut load, worker) = Load::new(store, keys, workers, pause);
        load.threads = (0..threads)
            .map(|t| {
                let worker = worker.clone();
                on_serving_thread(store.clone(), move |_| async move {
                    let mine: Vec<_> = (t..workers)
                        .step_by(threads)
                        .map(|w| tokio::spawn(worker.clone().run(w)))
                        .collect();
                    for m in mine {
                        m.await.unwrap();
                    }
                })
            })
            .collect();
        load
    }

    fn new(
        store: &RedisStore,
        keys: Arc<Vec<Vec<u8>>>,
        workers: usize,
        pause: Duration,
    ) -> (Load, Worker) {
        let load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            outcomes: Arc::new(Mutex::new(Vec::new())),
            opened: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
            threads: Vec::new(),
        };
        let worker = Worker {
            store: store.clone(),
            keys,
            stop: load.stop.clone(),
            outcomes: load.outcomes.clone(),
            opened: load.opened.clone(),
            workers,
            pause,
        };
        (load, worker)
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
        for t in self.threads {
            tokio::task::spawn_blocking(move || t.join().unwrap())
                .await
                .unwrap();
        }
        self.outcomes.lock().unwrap().clone()
    }
}

/// How long after a stall `ended` the first of the calls `which` picks succeeded again.
fn recovered(outcomes: &[Outcome], ended: Instant, which: impl Fn(&Outcome) -> bool) -> Duration {
    // Answers that were queued behind the stall may even land before redis-cli sees its own.
    let since = ended - Duration::from_millis(300);
    let first = outcomes
        .iter()
        .filter(|o| o.ok && which(o) && o.at > since)
        .map(|o| o.at)
        .min()
        .expect("calls succeed again");
    first.saturating_duration_since(ended)
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
        crate::support::poll::real_now()
    })
    .await
    .unwrap()
}

fn serve_args(config: &std::path::Path, url: &str, extra: &[&str]) -> sluice::settings::ServeArgs {
    let mut flags = vec!["--backend", "redis", "--redis-url", url];
    flags.extend_from_slice(&["--redis-command-timeout", "1s", "--grpc-threads", "2"]);
    flags.extend_from_slice(extra);
    crate::support::parse_serve(config, &flags)
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

/// A Sentinel setup with one synced replica that the sentinel knows, ready to fail over a second
/// after the primary stops answering.
fn sentinel_with_replica() -> (redis_support::RedisSentinel, RedisNode) {
    let setup = redis_support::RedisSentinel::start();
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
    (setup, replica)
}
