//! `sluice-bench`: a gRPC load generator for any Envoy RLS v3 server, and the floors to
//! compare a rate limiter with (a no-op RLS server, alone or calling a floor script on Redis),
//! sluice's own Redis script under redis-benchmark (its side of the script comparisons), and
//! the in-memory store's bytes per key. README.md, "sluice-bench",
//! documents the command line; the JSON fields are a contract with bench/run.sh.

// A benchmark measures its own runs in real time: clippy.toml's clock rule is for sluice.
#![allow(clippy::disallowed_methods)]
// A binary exports nothing: `pub` would only hide dead code.
#![deny(unreachable_pub)]

mod args;
mod cpu;
mod grpc;
mod load;
mod memory;
mod noop;
mod redis_floor;
mod redis_info;
mod report;
mod rlqs;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use sluice::algorithm::Algorithm;

use args::{parse_duration, parse_host_port, DescriptorTemplate};
use load::{Mode, Plan};
use report::{per_request, Latency, LoadReport, RedisReport};

#[derive(Debug, Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "Load generator and floors for RLS servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// gRPC load on any RLS v3 server (closed loop, or open loop with --rate).
    Load(LoadArgs),
    /// The gRPC floor: an RLS server that answers OK at once, one status per descriptor.
    Noop(NoopArgs),
    /// The Redis floor: sluice's decision function by FCALL under redis-benchmark.
    RedisFloor(RedisFloorArgs),
    /// Bytes per active key of the in-memory store, per algorithm.
    Memory(MemoryArgs),
    /// RLQS at fleet scale: N streams of B buckets reporting each interval.
    Rlqs(rlqs::RlqsArgs),
}

#[derive(Debug, clap::Args)]
struct RedisFloorArgs {
    /// The Redis server, HOST:PORT (the script is loaded there).
    #[arg(long, value_parser = parse_host_port)]
    redis: String,
    #[arg(long, default_value = "fixed_window", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Commands in flight per redis-benchmark client (-P).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pipeline: u32,
    /// Script calls in total (-n).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// redis-benchmark connections (-c).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    clients: u32,
    /// Distinct keys (-r, through __rand_int__ in the key).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// The limit's requests per window (high by default, so calls are admitted and charged).
    #[arg(long, default_value_t = 1_000_000_000)]
    limit: u64,
    /// The limit's window.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    window: Duration,
    /// Whose clock the script uses, as sluice's --clock: `redis` passes no time (the script
    /// reads TIME); `local` passes a fixed time, as sluice passes its own.
    #[arg(long, default_value = "redis", value_parser = ["redis", "local"])]
    clock: String,
    /// The redis-benchmark executable.
    #[arg(long, default_value = "redis-benchmark")]
    redis_benchmark: String,
    /// Write the JSON result to this file ("-": stdout).
    #[arg(long)]
    json: Option<String>,
}

#[derive(Debug, clap::Args)]
struct MemoryArgs {
    /// Distinct keys to fill the store with.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    keys: u64,
    /// An algorithm to measure (repeatable; default: all).
    #[arg(long = "algorithm", value_parser = parse_algorithm)]
    algorithms: Vec<Algorithm>,
    /// Write the JSON result (an array, one object per algorithm) to this file ("-": stdout).
    #[arg(long)]
    json: Option<String>,
}

fn parse_algorithm(s: &str) -> Result<Algorithm, sluice::rules::vocab::UnknownWord> {
    sluice::rules::vocab::parse(s)
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// The server, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = parse_host_port)]
    target: String,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// Closed loop: concurrent requests per connection.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    in_flight: u32,
    /// Open loop: total requests per second, on a fixed schedule; latency is measured from
    /// each request's intended send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: most requests outstanding; requests due beyond it are not sent and are
    /// counted as `client_overload` errors.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    max_in_flight: u32,
    /// Measured interval (500ms, 10s, 1m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Load before the measured interval, not counted.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "bench")]
    domain: String,
    /// A descriptor of every request, "k=v,k2=v{i}"; repeat for several descriptors. `{i}`
    /// is a key index drawn uniformly from 0..--keys, one per request.
    #[arg(long = "descriptor", value_parser = DescriptorTemplate::parse)]
    descriptors: Vec<DescriptorTemplate>,
    /// The key space of `{i}`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// The request's hits_addend (0: unset).
    #[arg(long, default_value_t = 0)]
    hits_addend: u32,
    /// Per-request timeout (counted as DEADLINE_EXCEEDED).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    timeout: Duration,
    /// A server process whose CPU time to measure (repeatable: summed).
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// A Redis node whose INFO commandstats and cpu to read (repeatable: summed).
    #[arg(long = "redis", value_parser = parse_host_port)]
    redis: Vec<String>,
    /// A name for this run, copied into the result.
    #[arg(long)]
    label: Option<String>,
    /// Write the JSON result to this file ("-": stdout).
    #[arg(long)]
    json: Option<String>,
    /// Generator threads: 1 runs one current-thread runtime (the leanest); more run tokio's
    /// multi-thread runtime with that many workers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
}

#[derive(Debug, clap::Args)]
struct NoopArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    #[arg(long, value_enum, default_value_t = noop::RuntimeKind::Current)]
    runtime: noop::RuntimeKind,
    /// Threads of `multi` and `per-core` (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// HOST:PORT: answer each descriptor with one call of the seeds' fixed-window script on
    /// this Redis (the Redis floor served over gRPC; see `noop.rs`).
    #[arg(long, value_parser = parse_host_port)]
    seed_redis: Option<String>,
    /// With --seed-redis: a floor script file to call instead of the seeds' (its one key is
    /// the descriptor's values)...
    #[arg(long, requires = "seed_redis")]
    floor_script: Option<std::path::PathBuf>,
    /// ...and its arguments after the key, in order (repeatable).
    #[arg(long, requires = "floor_script", allow_hyphen_values = true)]
    floor_arg: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Load(a) => load_command(a),
        Cmd::Noop(a) => {
            let threads = a.threads.unwrap_or_else(available_cores).max(1);
            noop_command(a, threads)
        }
        Cmd::RedisFloor(a) => redis_floor_command(a),
        Cmd::Memory(a) => memory_command(a),
        Cmd::Rlqs(a) => rlqs::command(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn noop_command(a: NoopArgs, threads: usize) -> anyhow::Result<()> {
    let script = match &a.floor_script {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the floor script {}", path.display()))?,
        ),
        None => None,
    };
    let floor = a
        .seed_redis
        .map(|redis| noop::Floor::new(redis, script, a.floor_arg));
    noop::run(a.addr, a.runtime, threads, floor)
}

fn load_command(a: LoadArgs) -> anyhow::Result<()> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            anyhow::bail!("--rate must be a positive number of requests per second");
        }
    }
    if a.duration.is_zero() {
        anyhow::bail!("--duration must be positive");
    }
    let mode = match a.rate {
        Some(rate) => Mode::Open {
            rate,
            max_in_flight: a.max_in_flight as usize,
        },
        None => Mode::Closed {
            in_flight: a.in_flight as usize,
        },
    };
    let plan = Arc::new(Plan {
        target: a.target.clone(),
        connections: a.connections as usize,
        mode,
        warmup: a.warmup,
        duration: a.duration,
        timeout: if a.timeout.is_zero() {
            Duration::from_secs(3600)
        } else {
            a.timeout
        },
        domain: a.domain.clone(),
        descriptors: a.descriptors.clone(),
        keys: a.keys,
        hits_addend: a.hits_addend,
    });
    // Fail on a bad PID before loading anything.
    cpu::sum_cpu_seconds(&a.server_pids).map_err(anyhow::Error::msg)?;
    let rt = if a.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(a.threads as usize)
            .enable_all()
            .build()?
    };
    let report = rt.block_on(async {
        let clients = load::connect(&plan).await?;
        // The start readings, taken when the warm-up ends (without a warm-up: before the first
        // request, so that every counted request falls between the readings).
        let start = if a.warmup.is_zero() {
            let r = Readings::take(&a.server_pids, &a.redis).await;
            tokio::spawn(async move { r })
        } else {
            let (pids, redis, at) = (
                a.server_pids.clone(),
                a.redis.clone(),
                tokio::time::Instant::now() + a.warmup,
            );
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                Readings::take(&pids, &redis).await
            })
        };
        let t0 = tokio::time::Instant::now();
        let tally = load::run(plan.clone(), clients, t0).await;
        // The end readings, once the last counted call is answered.
        let end = Readings::take(&a.server_pids, &a.redis).await?;
        let start = start.await.context("the sampler")??;
        let (server_start, client_start, redis_start) = (start.server, start.client, start.redis);
        let (server_end, client_end, redis_end) = (end.server, end.client, end.redis);
        let answered = tally.answered();
        let duration_s = plan.duration.as_secs_f64();
        let server_cpu_s = (!a.server_pids.is_empty()).then_some(server_end - server_start);
        let client_cpu_s = client_end - client_start;
        let redis = match (redis_start, redis_end) {
            (Some(s), Some(e)) => Some(RedisReport::of(e.since(&s), answered)),
            _ => None,
        };
        anyhow::Ok(LoadReport {
            label: a.label.clone(),
            mode: if a.rate.is_some() { "open" } else { "closed" },
            target: a.target.clone(),
            connections: plan.connections,
            in_flight: a.rate.is_none().then_some(a.in_flight as usize),
            rate: a.rate,
            max_in_flight: a.rate.is_some().then_some(a.max_in_flight as usize),
            duration_s,
            requests: tally.requests(),
            throughput_rps: answered as f64 / duration_s,
            ok: tally.ok,
            over_limit: tally.over_limit,
            unknown: tally.unknown,
            latency_us: Latency::from_tally(&tally),
            errors: tally.errors,
            server_cpu_us_per_request: server_cpu_s.and_then(|c| per_request(c * 1e6, answered)),
            server_cpu_s,
            client_cpu_s,
            client_cpu_us_per_request: per_request(client_cpu_s * 1e6, answered),
            redis,
        })
    })?;
    eprint!("{}", report.text());
    if let Some(path) = &a.json {
        report::write_json(path, &report)?;
    }
    Ok(())
}

fn redis_floor_command(a: RedisFloorArgs) -> anyhow::Result<()> {
    let window_us = i64::try_from(a.window.as_micros()).context("--window is too long")?;
    if window_us <= 0 {
        anyhow::bail!("--window must be positive");
    }
    let args = redis_floor::FloorArgs {
        redis: a.redis,
        algorithm: a.algorithm,
        pipeline: a.pipeline,
        requests: a.requests,
        clients: a.clients,
        keys: a.keys,
        limit: a.limit,
        window_us,
        // A fixed, plausible time: 2023-11-14.
        now: (a.clock == "local").then_some(1_700_000_000_000_000),
        benchmark: a.redis_benchmark,
    };
    let r = redis_floor::run(&args)?;
    eprintln!(
        "{} by FCALL, pipeline {}, {} client(s), {} key(s): {:.0} calls/s; Redis CPU {:.2}s = {:.2} µs/call; usec_per_call {:.2}",
        r.algorithm,
        r.pipeline,
        r.clients,
        r.keys,
        r.throughput_rps,
        r.redis_cpu_s,
        r.redis_cpu_us_per_call.unwrap_or(0.0),
        r.usec_per_call.unwrap_or(0.0)
    );
    if let Some(path) = &a.json {
        report::write_json(path, &r)?;
    }
    Ok(())
}

fn memory_command(a: MemoryArgs) -> anyhow::Result<()> {
    let algorithms = if a.algorithms.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        a.algorithms
    };
    let reports = memory::run(&algorithms, a.keys)?;
    eprint!("{}", memory::text(&reports));
    if let Some(path) = &a.json {
        report::write_json(path, &reports)?;
    }
    Ok(())
}

/// CPU seconds of the server processes and of this one, and the Redis counters.
struct Readings {
    server: f64,
    client: f64,
    redis: Option<redis_info::Sample>,
}

impl Readings {
    async fn take(pids: &[u32], redis: &[String]) -> anyhow::Result<Readings> {
        Ok(Readings {
            server: cpu::sum_cpu_seconds(pids).map_err(anyhow::Error::msg)?,
            client: cpu::cpu_seconds(None).map_err(anyhow::Error::msg)?,
            redis: if redis.is_empty() {
                None
            } else {
                Some(redis_info::sample(redis).await?)
            },
        })
    }
}
