//! What the fault tests share: sluice processes (one may run ahead in time under libfaketime),
//! bursts of concurrent requests whose answers are counted into the window they were decided
//! in, a paced load that records every outcome, and the stored counts read back from Redis.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::clock::{Clock, SystemClock};
pub use sluice::model::Micros;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::channel;
use crate::support::dsl::req_k;
use crate::support::poll::wait_until_async;
use crate::support::process::{spawn_sluice, Spawned};
use crate::support::redis::fixed_window_state;
use crate::support::server::serve_argv;

pub use crate::support::SEC;

/// libfaketime's multi-threaded preload library (Debian's `faketime` package).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A config file in `dir`: domain `d`, descriptor `k` limited to `limit` per `window`
/// (`1s`, `1h`, ...).
pub fn config(dir: &Path, limit: u64, window: &str) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "domain: d\nallow_refunds: true\ndescriptors:\n  - key: k\n    \
             rate_limit: {{window: {window}, requests_per_unit: {limit}}}\n"
        ),
    )
    .expect("write config");
    path
}

/// An Envoy RLS request for `k=value`: `hits` taken, or given back when `refund`.
pub fn take_request(value: &str, hits: u32, refund: bool) -> RateLimitRequest {
    let mut r = req_k(&[value]).to_proto();
    r.descriptors[0].hits_addend = Some(u64::from(hits));
    r.descriptors[0].is_negative_hits = refund;
    r
}

fn allowed(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::Ok as i32
}

/// `sluice serve` as a process on Redis at `url`, on `--clock clock`, its wall clock `ahead`
/// of this machine's (libfaketime; the monotonic clock stays real).
pub struct Instance {
    /// Killed when dropped.
    #[allow(dead_code)] // kept for its Drop
    pub process: Spawned,
    pub client: RateLimitServiceClient<Channel>,
    pub ahead: Micros,
}

impl Instance {
    pub async fn start(config: &Path, url: &str, clock: &str, ahead: Micros) -> Instance {
        let mut args = serve_argv(
            config,
            &[
                "--log-format",
                "json",
                "--backend",
                "redis",
                "--redis-url",
                url,
                "--clock",
                clock,
                "--grpc-threads",
                "1",
            ],
        );
        // Generous: a small shared box; no case here is about timeouts.
        args.extend(["--redis-command-timeout".into(), "2s".into()]);
        let mut envs: Vec<(String, String)> = Vec::new();
        if ahead != 0 {
            assert!(
                Path::new(FAKETIME_LIB).exists(),
                "{FAKETIME_LIB} is missing: apt-get install faketime"
            );
            envs.push(("LD_PRELOAD".into(), FAKETIME_LIB.into()));
            envs.push((
                "FAKETIME".into(),
                format!("+{}.{:06}", ahead / SEC, ahead % SEC),
            ));
            envs.push(("DONT_FAKE_MONOTONIC".into(), "1".into()));
        }
        let process = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let envs: Vec<(&str, &str)> =
                envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            spawn_sluice(&args, &envs)
        })
        .await
        .unwrap();
        let ch = channel(process.grpc).await;
        wait_until_async("sluice to be SERVING (Redis up)", || {
            let ch = ch.clone();
            async move {
                let status = HealthClient::new(ch)
                    .check(HealthCheckRequest {
                        service: "ratelimit".into(),
                    })
                    .await;
                status.is_ok_and(|s| s.into_inner().status == ServingStatus::Serving as i32)
            }
        })
        .await;
        Instance {
            process,
            client: RateLimitServiceClient::new(ch),
            ahead,
        }
    }

    /// `n` requests for one hit of `k=value` at once; each answer with the window (of
    /// `window`) it was counted in, on this instance's clock.
    pub async fn burst(&self, value: &str, n: usize, window: Micros) -> Vec<Answer> {
        let before = SystemClock.now();
        let got = futures::future::join_all((0..n).map(|_| {
            let mut c = self.client.clone();
            async move { c.should_rate_limit(take_request(value, 1, false)).await }
        }))
        .await;
        let after = SystemClock.now();
        // Decided between `before` and `after` on this machine's clock, plus `ahead`.
        let decided = before + (after - before) / 2 + self.ahead;
        got.into_iter()
            .map(|r| {
                let r = r
                    .expect("no fault here: every request is decided")
                    .into_inner();
                let reset = r.statuses[0]
                    .duration_until_reset
                    .map_or(0, |d| d.seconds * SEC + i64::from(d.nanos) / 1_000);
                Answer {
                    allowed: allowed(&r),
                    window: (decided + reset + window / 2).div_euclid(window),
                }
            })
            .collect()
    }
}

/// One decided request: allowed or not, and the window it counted in (its end, in windows).
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub allowed: bool,
    pub window: i64,
}

/// Admitted per window of one key.
#[derive(Default, Debug)]
pub struct Tally {
    pub admitted: BTreeMap<i64, u64>,
}

impl Tally {
    pub fn add(&mut self, answers: &[Answer]) {
        for a in answers {
            let n = self.admitted.entry(a.window).or_default();
            *n += u64::from(a.allowed);
        }
    }

    /// Asserts no window admitted more than `limit`.
    pub fn assert_at_most(&self, limit: u64) {
        assert!(
            self.admitted.values().all(|&n| n <= limit),
            "admitted per window of the key: {:?}",
            self.admitted
        );
    }

    /// Asserts that the stored window (`(start, count)`, None when the key is gone) counts
    /// exactly what was admitted in it: no hit lost, none charged twice.
    pub fn assert_stored(&self, stored: Option<(i64, u64)>, window: Micros) {
        if let Some((start, count)) = stored {
            let end = (start + window).div_euclid(window);
            let admitted = self.admitted.get(&end).copied().unwrap_or(0);
            assert_eq!(
                count, admitted,
                "the window ending at {end} stores {count}, admitted {admitted}: {:?}",
                self.admitted
            );
        }
    }
}

/// The fixed_window storage key of descriptor `k=value` on the Redis node at `port` (None
/// when absent).
pub fn key_on(port: u16, value: &str) -> Option<String> {
    key_of_entry(port, &format!("k={value}"))
}

/// The fixed_window storage key of the one-entry descriptor `entry` (`key=value`).
pub fn key_of_entry(port: u16, entry: &str) -> Option<String> {
    let pattern = format!("*{entry}}}:fixed_window*");
    let keys = crate::support::redis::cli(port, &["KEYS", &pattern]);
    let mut keys = keys.lines().map(str::trim).filter(|k| !k.is_empty());
    let key = keys.next()?.to_string();
    assert!(keys.next().is_none(), "one key for {entry}");
    Some(key)
}

/// The stored (window start, count) of fixed_window `k=value` on the node at `port`.
pub fn stored(port: u16, value: &str) -> Option<(i64, u64)> {
    stored_entry(port, &format!("k={value}"))
}

/// The stored (window start, count) of the fixed_window descriptor `entry`.
pub fn stored_entry(port: u16, entry: &str) -> Option<(i64, u64)> {
    let key = key_of_entry(port, entry)?;
    fixed_window_state(&crate::support::redis::cli(port, &["HGETALL", &key]))
}

/// This machine's (and so Redis') clock, read through `redis-cli TIME`.
pub fn redis_now(port: u16) -> Micros {
    let t = crate::support::redis::cli(port, &["TIME"]);
    let mut parts = t.lines().map(|l| l.trim().parse::<i64>().unwrap());
    let (s, us) = (parts.next().unwrap(), parts.next().unwrap());
    s * SEC + us
}

/// One request of a [`Load`]: when it started and ended, on which key (index), and its
/// answer: `Some(allowed)`, or None when it failed.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    pub started: Instant,
    pub ended: Instant,
    pub key: usize,
    pub allowed: Option<bool>,
}

/// `workers` tasks taking one hit of `k=<values[i]>` round robin, `pause` between calls each,
/// until stopped; every outcome recorded.
pub struct Load {
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(
        client: &RateLimitServiceClient<Channel>,
        values: &[String],
        workers: usize,
        pause: Duration,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let values = Arc::new(values.to_vec());
        let tasks = (0..workers)
            .map(|w| {
                let (mut c, stop, outcomes) = (client.clone(), stop.clone(), outcomes.clone());
                let values = values.clone();
                tokio::spawn(async move {
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        let key = i % values.len();
                        let started = crate::support::poll::real_now();
                        let r = c
                            .should_rate_limit(take_request(&values[key], 1, false))
                            .await;
                        outcomes.lock().unwrap().push(Outcome {
                            started,
                            ended: crate::support::poll::real_now(),
                            key,
                            allowed: r.ok().map(|r| allowed(&r.into_inner())),
                        });
                        i += 1;
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            outcomes,
            tasks,
        }
    }

    pub fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes.lock().unwrap().clone()
    }

    /// Waits (bounded) until `n` more requests have ended.
    pub async fn more(&self, n: usize) {
        let from = self.outcomes.lock().unwrap().len();
        wait_until_async("more requests", || async {
            self.outcomes.lock().unwrap().len() >= from + n
        })
        .await;
    }

    pub async fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.outcomes.lock().unwrap().clone()
    }
}

/// Per key: (allowed, failed) among `outcomes` that `which` picks.
pub fn per_key(
    outcomes: &[Outcome],
    keys: usize,
    which: impl Fn(&Outcome) -> bool,
) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0); keys];
    for o in outcomes.iter().filter(|o| which(o)) {
        match o.allowed {
            Some(a) => out[o.key].0 += u64::from(a),
            None => out[o.key].1 += 1,
        }
    }
    out
}
