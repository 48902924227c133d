//! `sluice-bench redis-floor`: the Redis floor. Loads the store's function library and runs
//! `redis-benchmark` calling, by `FCALL`, the function the Redis store calls for one decision
//! of one descriptor on its shared pool (the fast path of fixed_window, sliding_log and the
//! buckets, `decide` otherwise; a serving thread's own connection batches them instead, which
//! `bench/redis_cost.py` measures through the server), with exactly the KEYS and ARGV the
//! store sends (built by the library's own `script::fcall` from a `Check` like the
//! limiter's), with `__rand_int__` in the key so `-r K` spreads the calls over K keys.

use std::process::Command;

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use sluice::algorithm::{Algorithm, Ask, Limit};
use sluice::store::key::{self, Part};
use sluice::store::redis::library::LIBRARY;
use sluice::store::redis::resp::Value;
use sluice::store::redis::script::{self, Scope};
use sluice::store::{Charge, Check};

use crate::redis_info;

/// Stands for `__rand_int__` while the key is built: letters only, so the key encoding leaves
/// it as it is (it would percent-encode the underscores of `__rand_int__`).
const PLACEHOLDER: &str = "RANDINTPLACEHOLDER";

pub(crate) struct FloorArgs {
    pub redis: String,
    pub algorithm: Algorithm,
    pub pipeline: u32,
    pub requests: u64,
    pub clients: u32,
    pub keys: u64,
    pub limit: u64,
    pub window_us: i64,
    /// `Some(t)`: pass `t` as the script's time, like `--clock local`; `None`: the script
    /// reads Redis' clock, like the default `--clock redis`.
    pub now: Option<i64>,
    pub benchmark: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct FloorReport {
    pub algorithm: &'static str,
    pub pipeline: u32,
    pub clients: u32,
    pub keys: u64,
    pub requests: u64,
    /// As redis-benchmark reports it (its --csv), or script calls over wall time without it.
    pub throughput_rps: f64,
    /// FCALL calls Redis counted over the run.
    pub calls: u64,
    pub redis_cpu_s: f64,
    pub redis_cpu_us_per_call: Option<f64>,
    /// Redis' own `usec_per_call` of FCALL over the run (time inside the command).
    pub usec_per_call: Option<f64>,
    /// The redis-benchmark command line that ran.
    pub command: String,
}

/// The function the store calls for this decision, and the FCALL arguments after its name,
/// as text: numkeys, KEYS, ARGV.
pub(crate) fn fcall_args(a: &FloorArgs) -> anyhow::Result<(String, Vec<String>)> {
    // A bucket's burst is its limit.
    // The default limit is one nothing reaches; an algorithm that keeps less (sliding_log keeps
    // at most MAX_LOG timestamps per key) gets the largest it takes.
    let limit = Limit::new(a.algorithm, a.limit, a.window_us).or_else(|_| {
        Limit::new(
            a.algorithm,
            a.limit.min(sluice::algorithm::MAX_LOG),
            a.window_us,
        )
    })?;
    let mut k = Vec::new();
    let value = format!("v{PLACEHOLDER}");
    let parts: Vec<Part<'_>> = if a.algorithm.counts_values() {
        // distinct counts the values of its last entry, which stays out of the key.
        vec![
            Part::Value {
                key: b"k",
                value: value.as_bytes(),
            },
            Part::Counted { key: b"user" },
        ]
    } else {
        vec![Part::Value {
            key: b"k",
            value: value.as_bytes(),
        }]
    };
    key::build(&mut k, b"", "bench", parts, &limit, None);
    let ask = Ask {
        value: if a.algorithm.counts_values() {
            sluice::algorithm::distinct::hash(b"u1")
        } else {
            0
        },
        ..Ask::take(1)
    };
    let check = Check {
        key: &k,
        limit: &limit,
        ask,
        charge: Charge::IfAdmitted,
        group: 0,
        quota: false,
        on_error: None,
    };
    let local = a.now.unwrap_or(1_700_000_000_000_000);
    let args = script::fcall(&[&check], Scope::All, a.now, local);
    let function = value_text(&args[0]);
    let out = args[1..]
        .iter()
        .map(|v| value_text(v).replace(PLACEHOLDER, "__rand_int__"))
        .collect();
    Ok((function, out))
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Integer(i) => i.to_string(),
        Value::String(s) => s.to_string(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Null => String::new(),
    }
}

/// `FUNCTION LOAD`s the store's library into `addr` (already there: done).
async fn load_library(addr: &str) -> anyhow::Result<()> {
    let lua = &LIBRARY.source;
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to Redis at {addr}"))?;
    let mut stream = BufReader::new(stream);
    let cmd = format!(
        "*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n${}\r\n{lua}\r\n",
        lua.len()
    );
    stream.get_mut().write_all(cmd.as_bytes()).await?;
    match redis_info::read_bulk(&mut stream).await {
        Ok(name) if name == LIBRARY.name => Ok(()),
        Ok(other) => bail!("FUNCTION LOAD at {addr} answered {other:?}"),
        Err(e) if e.to_string().contains("already exists") => Ok(()),
        Err(e) => Err(e)
            .with_context(|| format!("FUNCTION LOAD at {addr} (Redis 7.0+ or Valkey 7.2+ needed)")),
    }
}

pub(crate) fn run(a: &FloorArgs) -> anyhow::Result<FloorReport> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (host, port) = a
        .redis
        .rsplit_once(':')
        .context("--redis must be HOST:PORT")?;
    let (function, args) = fcall_args(a)?;
    rt.block_on(load_library(&a.redis))?;
    let mut cmd = Command::new(&a.benchmark);
    cmd.args(["-h", host, "-p", port])
        .args(["-n", &a.requests.to_string()])
        .args(["-c", &a.clients.to_string()])
        .args(["-P", &a.pipeline.to_string()])
        .args(["-r", &a.keys.to_string()])
        .arg("--csv")
        .args(["FCALL", &function])
        .args(args);
    let shown = shell_line(&cmd);
    eprintln!("running: {shown}");
    let before = rt.block_on(redis_info::sample(std::slice::from_ref(&a.redis)))?;
    let started = tokio::time::Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {} (is redis-tools installed?)", a.benchmark))?;
    let wall = started.elapsed().as_secs_f64();
    let after = rt.block_on(redis_info::sample(std::slice::from_ref(&a.redis)))?;
    if !out.status.success() {
        bail!(
            "redis-benchmark failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let d = after.since(&before);
    let calls = d.calls.get("fcall").copied().unwrap_or(0);
    if calls == 0 {
        bail!(
            "Redis counted no FCALL calls; redis-benchmark said: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Some(failed) = script_errors(&stdout) {
        bail!("the script failed under redis-benchmark: {failed}");
    }
    let usec = d.usec.get("fcall").copied().unwrap_or(0);
    Ok(FloorReport {
        algorithm: a.algorithm.as_str(),
        pipeline: a.pipeline,
        clients: a.clients,
        keys: a.keys,
        requests: a.requests,
        throughput_rps: csv_rps(&stdout).unwrap_or(calls as f64 / wall),
        calls,
        redis_cpu_s: d.cpu_s,
        redis_cpu_us_per_call: Some(d.cpu_s * 1e6 / calls as f64),
        usec_per_call: Some(usec as f64 / calls as f64),
        command: shown,
    })
}

/// The requests per second of redis-benchmark's `--csv` output: the second field of the
/// result line (`"test","rps",...` is the header).
fn csv_rps(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .filter(|l| !l.starts_with("\"test\""))
        .filter_map(|l| l.split("\",\"").nth(1))
        .filter_map(|f| f.trim_matches('"').parse().ok())
        .next_back()
}

/// redis-benchmark prints script errors (`ERR ...`) instead of failing.
fn script_errors(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find(|l| l.contains("ERR"))
        .map(str::to_string)
}

/// `cmd` as a shell line (arguments quoted where needed), to be copied and run again.
fn shell_line(cmd: &Command) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/=@%{}|,".contains(&b))
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::store::redis::script::ScriptId;

    fn args(algorithm: Algorithm, now: Option<i64>) -> FloorArgs {
        FloorArgs {
            redis: "127.0.0.1:1".into(),
            algorithm,
            pipeline: 32,
            requests: 10,
            clients: 1,
            keys: 100,
            limit: 1000,
            window_us: 60_000_000,
            now,
            benchmark: "redis-benchmark".into(),
        }
    }

    #[test]
    fn one_key_with_rand_int_and_the_store_layout() {
        let (function, a) = fcall_args(&args(Algorithm::Concurrency, None)).unwrap();
        assert_eq!(function, LIBRARY.function(ScriptId::Decide));
        assert_eq!(a[0], "1");
        assert_eq!(
            a[1],
            "sluice:v2:{bench|k=v__rand_int__}:concurrency:60000000"
        );
        // scope, now ('' = Redis' clock), number of checks, then 13 fields
        assert_eq!(&a[2..5], ["all", "", "1"]);
        assert_eq!(a.len(), 5 + 13);
        // key index 1, algorithm 8, limit, window
        assert_eq!(&a[5..9], ["1", "8", "1000", "60000000"]);
        let local = fcall_args(&args(Algorithm::Concurrency, Some(1_700_000_000_000_000)))
            .unwrap()
            .1;
        assert_eq!(local[3], "1700000000000000");
    }

    #[test]
    fn a_bucket_runs_its_fast_path_with_its_burst() {
        let (function, a) = fcall_args(&args(Algorithm::Gcra, None)).unwrap();
        assert_eq!(function, LIBRARY.function(ScriptId::Bucket));
        // numkeys, key, now, limit, window, hits, mode, burst
        assert_eq!(
            a,
            [
                "1",
                "sluice:v2:{bench|k=v__rand_int__}:gcra:60000000",
                "",
                "1000",
                "60000000",
                "1",
                "0",
                "1000"
            ]
        );
    }

    #[test]
    fn a_fixed_window_runs_the_fast_path() {
        let (function, a) = fcall_args(&args(Algorithm::FixedWindow, None)).unwrap();
        assert_eq!(function, LIBRARY.function(ScriptId::FixedWindow));
        // numkeys, key, now, limit, window, hits, mode
        assert_eq!(
            a,
            [
                "1",
                "sluice:v2:{bench|k=v__rand_int__}:fixed_window:60000000",
                "",
                "1000",
                "60000000",
                "1",
                "0"
            ]
        );
    }

    #[test]
    fn csv_output() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\"\n\"FCALL abc\",\"123456.78\",\"0.2\"\n";
        assert_eq!(csv_rps(out), Some(123456.78));
        assert_eq!(csv_rps(""), None);
    }
}
