//! `sluice-bench rlqs`: the Rate Limit Quota Service at fleet scale. Opens `streams` RLQS
//! streams (one per simulated Envoy) over a few HTTP/2 connections; each reports `buckets`
//! buckets every `interval` (Envoy's default is 5 s), with demand (each bucket's allowed
//! count varies per report), and waits for the answer. Reports the server's CPU per bucket
//! report (and bucket reports per second per core), its resident memory per stream and per
//! bucket (the growth from before the streams opened to when every bucket exists), and the
//! assignment latency (a report sent to its answer received). With `--redis`, what the
//! store's Redis nodes did per bucket report (their CPU and commands, from `INFO`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use sluice::proto::rlqs::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluice::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice::proto::rlqs::{BucketId, RateLimitQuotaUsageReports};

use crate::args::{parse_duration, parse_host_port};
use crate::cpu;
use crate::redis_info;
use crate::report::{self, Latency, RedisReport};

#[derive(Debug, clap::Args)]
pub(crate) struct RlqsArgs {
    /// The server, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = parse_host_port)]
    pub target: String,
    /// The server's PID, for its CPU time and resident memory (/proc).
    #[arg(long)]
    pub server_pid: u32,
    /// Streams (simulated Envoys).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub streams: u32,
    /// Buckets per stream, all reported in each report.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub buckets: u32,
    /// Each stream's report interval (Envoy's default: 5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Measured interval, after every bucket was reported once.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// HTTP/2 connections the streams share.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    #[arg(long, default_value = "bench")]
    pub domain: String,
    /// The bucket id's key (a rule of the domain must match it).
    #[arg(long, default_value = "k")]
    pub key: String,
    /// A Redis node the server's store uses, HOST:PORT (repeat for a Cluster): its CPU and
    /// commands per bucket report.
    #[arg(long = "redis", value_parser = parse_host_port)]
    pub redis: Vec<String>,
    /// Write the JSON result to this file ("-": stdout).
    #[arg(long)]
    pub json: Option<String>,
}

/// What to run.
pub(crate) struct Plan {
    pub target: String,
    pub server_pid: u32,
    pub streams: u32,
    pub buckets: u32,
    pub interval: Duration,
    pub duration: Duration,
    pub connections: u32,
    pub domain: String,
    /// The bucket id's key (a rule of `domain` matches it); values are unique per bucket.
    pub key: String,
    /// The store's Redis nodes (none: not read).
    pub redis: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct RlqsReport {
    pub streams: u32,
    pub buckets_per_stream: u32,
    pub interval_ms: u64,
    pub duration_s: f64,
    /// Reports answered in the measured interval, and the bucket reports they carried.
    pub reports: u64,
    pub bucket_reports: u64,
    pub bucket_reports_per_s: f64,
    pub server_cpu_s: f64,
    pub server_cpu_us_per_bucket_report: Option<f64>,
    /// Bucket reports per second one core of the server handles at this cost.
    pub bucket_reports_per_core_s: Option<f64>,
    pub server_rss_before_bytes: u64,
    pub server_rss_bytes: u64,
    pub rss_bytes_per_stream: f64,
    pub rss_bytes_per_bucket: f64,
    /// Report sent to its answer received, µs.
    pub assignment_latency_us: Latency,
    pub errors: u64,
    /// What the store's Redis did over the measured interval, per bucket report (its
    /// `_per_request` fields).
    pub redis: Option<RedisReport>,
}

/// Resident set of `pid`, bytes (/proc/PID/statm, 4 KiB pages).
fn rss_of(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .with_context(|| format!("cannot read /proc/{pid}/statm"))?;
    let pages: u64 = text
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("cannot parse statm")?;
    Ok(pages * 4096)
}

/// What every stream task shares.
struct Tally {
    /// Counting (after the warm-up).
    measuring: AtomicBool,
    stop: AtomicBool,
    reports: AtomicU64,
    bucket_reports: AtomicU64,
    errors: AtomicU64,
    /// Streams whose every bucket has been answered once.
    ready: AtomicU64,
    latency: Mutex<Histogram<u64>>,
    /// The first error's message, to say why a warm-up failed.
    first_error: Mutex<Option<String>>,
}

impl Tally {
    /// Counts an error, keeping the first one's message.
    fn error(&self, what: impl FnOnce() -> String) {
        if self.errors.fetch_add(1, Ordering::Relaxed) == 0 {
            *self.first_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(what());
        }
    }
}

pub(crate) async fn run(plan: Plan) -> anyhow::Result<RlqsReport> {
    let rss_before = rss_of(plan.server_pid)?;
    let mut channels = Vec::new();
    for _ in 0..plan.connections {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", plan.target))?
            .connect()
            .await
            .with_context(|| format!("cannot connect to {}", plan.target))?;
        channels.push(ch);
    }
    let tally = Arc::new(Tally {
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        reports: AtomicU64::new(0),
        bucket_reports: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        ready: AtomicU64::new(0),
        latency: Mutex::new(Histogram::new(3)?),
        first_error: Mutex::new(None),
    });
    let plan = Arc::new(plan);
    let mut tasks = Vec::new();
    for s in 0..plan.streams {
        let client =
            RateLimitQuotaServiceClient::new(channels[s as usize % channels.len()].clone());
        tasks.push(tokio::spawn(stream(plan.clone(), s, client, tally.clone())));
    }
    // Warm-up: every stream has reported each of its buckets once (so they all exist). Opening
    // thousands of streams takes a while on a busy machine: a bound on a broken server only.
    let deadline = Instant::now()
        + plan.interval * 4
        + Duration::from_millis(u64::from(plan.streams) * 20)
        + Duration::from_secs(30);
    while tally.ready.load(Ordering::Relaxed) < u64::from(plan.streams) {
        if Instant::now() > deadline {
            let first = tally
                .first_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(|| "none".into());
            anyhow::bail!(
                "only {} of {} streams answered within the warm-up ({} errors; the first: {first})",
                tally.ready.load(Ordering::Relaxed),
                plan.streams,
                tally.errors.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss = rss_of(plan.server_pid)?;
    let redis0 = redis_sample(&plan.redis).await?;
    let cpu0 = cpu::cpu_seconds(Some(plan.server_pid)).map_err(anyhow::Error::msg)?;
    let t0 = Instant::now();
    tally.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(plan.duration).await;
    tally.measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu::cpu_seconds(Some(plan.server_pid)).map_err(anyhow::Error::msg)? - cpu0;
    let redis1 = redis_sample(&plan.redis).await?;
    tally.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let bucket_reports = tally.bucket_reports.load(Ordering::Relaxed);
    let per = |x: f64| (bucket_reports > 0).then(|| x / bucket_reports as f64);
    let grown = rss.saturating_sub(rss_before) as f64;
    let streams = f64::from(plan.streams);
    let latency = tally.latency.lock().unwrap_or_else(|e| e.into_inner());
    Ok(RlqsReport {
        streams: plan.streams,
        buckets_per_stream: plan.buckets,
        interval_ms: u64::try_from(plan.interval.as_millis()).unwrap_or(u64::MAX),
        duration_s: elapsed,
        reports: tally.reports.load(Ordering::Relaxed),
        bucket_reports,
        bucket_reports_per_s: bucket_reports as f64 / elapsed,
        server_cpu_s: cpu,
        server_cpu_us_per_bucket_report: per(cpu * 1e6),
        bucket_reports_per_core_s: (cpu > 0.0).then(|| bucket_reports as f64 / cpu),
        server_rss_before_bytes: rss_before,
        server_rss_bytes: rss,
        rss_bytes_per_stream: grown / streams,
        rss_bytes_per_bucket: grown / (streams * f64::from(plan.buckets)),
        assignment_latency_us: Latency::from_histogram(&latency),
        errors: tally.errors.load(Ordering::Relaxed),
        redis: redis0
            .zip(redis1)
            .map(|(s, e)| RedisReport::of(e.since(&s), bucket_reports)),
    })
}

/// A reading of the store's Redis nodes, if any were named.
async fn redis_sample(addrs: &[String]) -> anyhow::Result<Option<redis_info::Sample>> {
    if addrs.is_empty() {
        return Ok(None);
    }
    Ok(Some(redis_info::sample(addrs).await?))
}

/// One simulated Envoy: a stream reporting every bucket each interval, from a random phase.
async fn stream(
    plan: Arc<Plan>,
    s: u32,
    mut client: RateLimitQuotaServiceClient<tonic::transport::Channel>,
    tally: Arc<Tally>,
) {
    let (tx, rx) = mpsc::channel(2);
    let mut inbound = match client
        .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(e) => {
            tally.error(|| format!("opening a stream: {e}"));
            return;
        }
    };
    let ids: Vec<BucketId> = (0..plan.buckets)
        .map(|b| BucketId {
            bucket: [(plan.key.clone(), format!("s{s}-b{b}"))].into(),
        })
        .collect();
    // Spread the streams over the interval, as a fleet's Envoys are.
    let phase = plan.interval.mul_f64(f64::from(s % 1000) / 1000.0);
    tokio::time::sleep(phase).await;
    let mut tick = tokio::time::interval(plan.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round: u64 = 0;
    // When the last report was sent, until its answer is read.
    let mut outstanding: Option<Instant> = None;
    while !tally.stop.load(Ordering::Relaxed) {
        // Read every message as it comes, as Envoy does: renewals the server sends between
        // reports (a grant's window ended) are read too, else they would wait in the server's
        // HTTP/2 buffers and be counted as its memory.
        tokio::select! {
            _ = tick.tick(), if outstanding.is_none() => {
                round += 1;
                if tx.send(report_of(&ids, round, &plan.domain)).await.is_err() {
                    tally.error(|| "the stream closed before a report was sent".into());
                    return;
                }
                outstanding = Some(Instant::now());
            }
            msg = inbound.message() => match msg {
                // The answer carries an action for every bucket reported; a smaller message is
                // a renewal the server sent on its own, not the answer.
                Ok(Some(m)) if m.bucket_action.len() >= ids.len() => {
                    let Some(sent) = outstanding.take() else {
                        continue;
                    };
                    if round == 1 {
                        tally.ready.fetch_add(1, Ordering::Relaxed);
                    }
                    if tally.measuring.load(Ordering::Relaxed) {
                        let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                        tally.reports.fetch_add(1, Ordering::Relaxed);
                        tally
                            .bucket_reports
                            .fetch_add(u64::from(plan.buckets), Ordering::Relaxed);
                        let _ = tally
                            .latency
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record(us.max(1));
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    tally.error(|| "the server ended the stream".into());
                    return;
                }
                Err(e) => {
                    tally.error(|| format!("the stream failed: {e}"));
                    return;
                }
            },
        }
    }
}

/// Report `round` (from 1) of every bucket of `ids`; the first names the domain.
fn report_of(ids: &[BucketId], round: u64, domain: &str) -> RateLimitQuotaUsageReports {
    let usages = ids
        .iter()
        .enumerate()
        .map(|(b, id)| BucketQuotaUsage {
            bucket_id: Some(id.clone()),
            time_elapsed: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            // Demand that moves from report to report and bucket to bucket.
            num_requests_allowed: (round * 7 + b as u64 * 13) % 50 + 1,
            num_requests_denied: 0,
        })
        .collect();
    RateLimitQuotaUsageReports {
        domain: if round == 1 {
            domain.to_string()
        } else {
            String::new()
        },
        bucket_quota_usages: usages,
    }
}

/// `sluice-bench rlqs`: runs the plan, prints the summary (stderr) and the JSON.
pub(crate) fn command(a: RlqsArgs) -> anyhow::Result<()> {
    let plan = Plan {
        target: a.target,
        server_pid: a.server_pid,
        streams: a.streams,
        buckets: a.buckets,
        interval: a.interval,
        duration: a.duration,
        connections: a.connections,
        domain: a.domain,
        key: a.key,
        redis: a.redis,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let r = runtime.block_on(run(plan))?;
    eprintln!(
        "rlqs: {} streams x {} buckets every {} ms: {:.0} bucket reports/s, server CPU {} us per \
         bucket report ({} per core-second), RSS {:.0} bytes per stream, {:.0} per bucket, \
         assignment latency p50 {} us p99 {} us, errors {}",
        r.streams,
        r.buckets_per_stream,
        r.interval_ms,
        r.bucket_reports_per_s,
        r.server_cpu_us_per_bucket_report
            .map_or("n/a".into(), |v| format!("{v:.2}")),
        r.bucket_reports_per_core_s
            .map_or("n/a".into(), |v| format!("{v:.0}")),
        r.rss_bytes_per_stream,
        r.rss_bytes_per_bucket,
        r.assignment_latency_us.p50,
        r.assignment_latency_us.p99,
        r.errors
    );
    if let Some(redis) = &r.redis {
        eprintln!(
            "rlqs: Redis {} us CPU, {} commands ({} scripts) per bucket report",
            redis
                .cpu_us_per_request
                .map_or("n/a".into(), |v| format!("{v:.2}")),
            redis
                .commands_per_request
                .map_or("n/a".into(), |v| format!("{v:.2}")),
            redis
                .scripts_per_request
                .map_or("n/a".into(), |v| format!("{v:.2}")),
        );
    }
    if let Some(path) = a.json {
        report::write_json(&path, &r)?;
    }
    Ok(())
}
