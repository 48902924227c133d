//! The result of `load`: the JSON object of the command-line contract, and its text summary.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::load::{Tally, CLIENT_OVERLOAD};

#[derive(Debug, Serialize)]
pub(crate) struct LoadReport {
    pub label: Option<String>,
    /// "closed" or "open".
    pub mode: &'static str,
    pub target: String,
    pub connections: usize,
    /// Closed loop: calls outstanding per connection. Open loop: null.
    pub in_flight: Option<usize>,
    /// Open loop: the offered rate (requests/s). Closed loop: null.
    pub rate: Option<f64>,
    /// Open loop: the cap on calls outstanding (an addition to the contract).
    pub max_in_flight: Option<usize>,
    pub duration_s: f64,
    /// Every request of the measured interval: answered, failed, or not sent (client_overload).
    pub requests: u64,
    /// Answered requests (any overall code) per second of the measured interval.
    pub throughput_rps: f64,
    pub ok: u64,
    pub over_limit: u64,
    pub unknown: u64,
    pub errors: BTreeMap<&'static str, u64>,
    pub latency_us: Latency,
    pub server_cpu_s: Option<f64>,
    pub server_cpu_us_per_request: Option<f64>,
    pub client_cpu_s: f64,
    /// An addition to the contract: the generator's CPU per answered request.
    pub client_cpu_us_per_request: Option<f64>,
    pub redis: Option<RedisReport>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct RedisReport {
    /// Calls per command name over the measured interval, summed over the nodes (the INFO
    /// commands of the readings left out).
    pub commands: BTreeMap<String, u64>,
    /// Microseconds inside each command over the measured interval, as Redis counts them
    /// (`INFO commandstats`; a script's time includes the commands it ran, which are also
    /// counted under their own names).
    pub usec: BTreeMap<String, u64>,
    /// All commands per answered request, those the scripts ran inside included (Redis
    /// counts them too).
    pub commands_per_request: Option<f64>,
    /// EVAL / EVALSHA / FCALL calls per answered request: the round trips (an addition to the
    /// contract).
    pub scripts_per_request: Option<f64>,
    pub cpu_s: f64,
    pub cpu_us_per_request: Option<f64>,
}

impl RedisReport {
    /// The report of what Redis did (`d`, the difference of two readings) for `answered`
    /// requests (or bucket reports).
    pub(crate) fn of(d: crate::redis_info::Sample, answered: u64) -> RedisReport {
        const SCRIPTS: [&str; 6] = [
            "eval",
            "evalsha",
            "eval_ro",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
        ];
        let total: u64 = d.calls.values().sum();
        let scripts: u64 = d
            .calls
            .iter()
            .filter(|(name, _)| SCRIPTS.contains(&name.as_str()))
            .map(|(_, n)| n)
            .sum();
        RedisReport {
            commands_per_request: per_request(total as f64, answered),
            scripts_per_request: per_request(scripts as f64, answered),
            cpu_us_per_request: per_request(d.cpu_s * 1e6, answered),
            cpu_s: d.cpu_s,
            commands: d.calls,
            usec: d.usec,
        }
    }
}

/// `x / answered`, or null when nothing was answered.
pub(crate) fn per_request(x: f64, answered: u64) -> Option<f64> {
    (answered > 0).then(|| x / answered as f64)
}

impl Latency {
    pub(crate) fn from_tally(t: &Tally) -> Latency {
        Latency::from_histogram(&t.latency_us)
    }

    pub(crate) fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency {
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                max: 0,
                mean: 0.0,
            };
        }
        Latency {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

impl LoadReport {
    /// The human summary (stderr).
    pub(crate) fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let label = self
            .label
            .as_deref()
            .map(|l| format!("[{l}] "))
            .unwrap_or_default();
        let shape = match (self.in_flight, self.rate) {
            (Some(n), _) => format!("closed loop, {} conn x {n} in flight", self.connections),
            (_, Some(r)) => format!(
                "open loop, {r} req/s offered over {} conn (max {} in flight)",
                self.connections,
                self.max_in_flight.unwrap_or(0)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{label}{} -> {} for {:.1}s",
            shape, self.target, self.duration_s
        );
        let _ = writeln!(
            s,
            "  requests {}  throughput {:.0} req/s  ok {}  over_limit {}  unknown {}",
            self.requests, self.throughput_rps, self.ok, self.over_limit, self.unknown
        );
        if !self.errors.is_empty() {
            let list: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(s, "  errors: {}", list.join(", "));
            if self.errors.contains_key(CLIENT_OVERLOAD) {
                let _ = writeln!(
                    s,
                    "  ({CLIENT_OVERLOAD}: requests NOT sent because --max-in-flight were outstanding)"
                );
            }
        }
        let l = &self.latency_us;
        let _ = writeln!(
            s,
            "  latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {:.1}{}",
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            l.mean,
            if self.rate.is_some() {
                "  (from intended send times)"
            } else {
                ""
            }
        );
        if let (Some(cpu), per) = (self.server_cpu_s, self.server_cpu_us_per_request) {
            let _ = writeln!(
                s,
                "  server CPU {cpu:.2}s = {} µs/request",
                per.map(|p| format!("{p:.2}")).unwrap_or("-".into())
            );
        }
        let _ = writeln!(
            s,
            "  client CPU {:.2}s = {} µs/request",
            self.client_cpu_s,
            self.client_cpu_us_per_request
                .map(|p| format!("{p:.2}"))
                .unwrap_or("-".into())
        );
        if let Some(r) = &self.redis {
            let list: Vec<String> = r.commands.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                s,
                "  redis: {} ({} scripts, {} commands in all per request), CPU {:.2}s = {} µs/request",
                if list.is_empty() {
                    "no commands".to_string()
                } else {
                    list.join(", ")
                },
                r.scripts_per_request
                    .map(|p| format!("{p:.3}"))
                    .unwrap_or("-".into()),
                r.commands_per_request
                    .map(|p| format!("{p:.3}"))
                    .unwrap_or("-".into()),
                r.cpu_s,
                r.cpu_us_per_request
                    .map(|p| format!("{p:.2}"))
                    .unwrap_or("-".into())
            );
        }
        s
    }
}

/// Writes `json` to `path` ("-": stdout), with a final newline.
pub(crate) fn write_json(path: &str, json: &impl Serialize) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut text = serde_json::to_string_pretty(json)?;
    text.push('\n');
    if path == "-" {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
    } else {
        std::fs::write(path, text).with_context(|| format!("cannot write {path}"))?;
    }
    Ok(())
}
