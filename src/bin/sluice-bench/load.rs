//! `sluice-bench load`: the gRPC load generator. One HTTP/2 connection ([`grpc`], lean on CPU)
//! per `--connections`, each driven by ONE task that keeps its calls in a `FuturesUnordered`:
//! closed loop keeps `--in-flight` calls outstanding, open loop starts calls on a fixed
//! schedule. Each task records latencies into its own HDR histogram; they are merged at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use tokio::time::Instant;

use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::service::code_name::grpc_code_name;

use crate::args::DescriptorTemplate;
use crate::grpc::{self, Client};

/// Requests the open loop did not send because `--max-in-flight` were outstanding: counted as
/// errors under this name (the server never saw them).
pub(crate) const CLIENT_OVERLOAD: &str = "client_overload";

/// The open loop sends what is due within this much of now: tokio's timer has a resolution of
/// 1 ms, so sleeping until each due time would add up to 1 ms of timer lag to every latency.
/// Sending up to this early instead keeps the rate and costs no latency (see [`drive`]).
const EARLY: Duration = Duration::from_millis(1);

/// The largest latency the histograms hold (longer ones are recorded as this): 1 hour in µs.
const MAX_LATENCY_US: u64 = 3_600_000_000;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// Keep this many calls outstanding per connection.
    Closed { in_flight: usize },
    /// Start `rate` calls per second in total; at most `max_in_flight` outstanding in total.
    Open { rate: f64, max_in_flight: usize },
}

/// What to send and for how long.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub target: String,
    pub connections: usize,
    pub mode: Mode,
    pub warmup: Duration,
    pub duration: Duration,
    pub timeout: Duration,
    pub domain: String,
    pub descriptors: Vec<DescriptorTemplate>,
    pub keys: u64,
    pub hits_addend: u32,
}

impl Plan {
    /// The request when no descriptor uses `{i}`: built and encoded once.
    fn fixed_request(&self) -> Option<Bytes> {
        (!self.descriptors.iter().any(|d| d.uses_index())).then(|| grpc::encode(&self.request(0)))
    }

    fn request(&self, index: u64) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .render(index)
                        .into_iter()
                        .map(|(key, value)| Entry { key, value })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend: self.hits_addend,
        }
    }
}

/// What the connections saw in the measured interval, merged.
pub(crate) struct Tally {
    pub latency_us: Histogram<u64>,
    pub ok: u64,
    pub over_limit: u64,
    pub unknown: u64,
    /// By gRPC code name (`DEADLINE_EXCEEDED`, ...) and [`CLIENT_OVERLOAD`].
    pub errors: BTreeMap<&'static str, u64>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("static histogram bounds are valid"),
            ok: 0,
            over_limit: 0,
            unknown: 0,
            errors: BTreeMap::new(),
        }
    }

    /// Answers (OK, OVER_LIMIT or UNKNOWN overall codes).
    pub(crate) fn answered(&self) -> u64 {
        self.ok + self.over_limit + self.unknown
    }

    /// Every request of the measured interval, answered or not.
    pub(crate) fn requests(&self) -> u64 {
        self.answered() + self.errors.values().sum::<u64>()
    }

    fn merge(&mut self, other: Tally) {
        // Same bounds on both sides: addition cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.unknown += other.unknown;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
    }

    fn record(&mut self, sent: Instant, done: Instant, outcome: Outcome) {
        let us = done.saturating_duration_since(sent).as_micros() as u64;
        self.latency_us.saturating_record(us.max(1));
        match outcome {
            Ok(code) if code == Code::Ok as i32 => self.ok += 1,
            Ok(code) if code == Code::OverLimit as i32 => self.over_limit += 1,
            Ok(_) => self.unknown += 1,
            Err(code) => *self.errors.entry(grpc_code_name(code)).or_default() += 1,
        }
    }
}

/// The overall code of an answer, or the gRPC code of a failed call.
type Outcome = Result<i32, tonic::Code>;

/// Opens one HTTP/2 connection per `--connections`.
pub(crate) async fn connect(plan: &Plan) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(plan.connections);
    for _ in 0..plan.connections {
        clients.push(grpc::connect(&plan.target).await?);
    }
    Ok(clients)
}

/// Runs the plan on `clients` from `t0`: warm-up, then the measured interval, then waits for
/// the calls still outstanding. Only calls sent (open loop: due) within the measured interval
/// are counted.
pub(crate) async fn run(plan: Arc<Plan>, clients: Vec<Client>, t0: Instant) -> Tally {
    let n = clients.len();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(conn, client)| tokio::spawn(drive(plan.clone(), client, conn, n, t0)))
        .collect();
    let mut total = Tally::new();
    for t in tasks {
        if let Ok(tally) = t.await {
            total.merge(tally);
        }
    }
    total
}

/// One call; answers with the slot (`due`: when it counts) and the time its latency is
/// measured from (`from`).
async fn call(
    client: &Client,
    req: Bytes,
    due: Instant,
    from: Instant,
    timeout: Duration,
) -> (Instant, Instant, Outcome) {
    let outcome = match tokio::time::timeout(timeout, client.should_rate_limit(req)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(tonic::Code::DeadlineExceeded),
    };
    (due, from, outcome)
}

/// One connection's loop.
async fn drive(
    plan: Arc<Plan>,
    client: Client,
    conn: usize,
    connections: usize,
    t0: Instant,
) -> Tally {
    let measure_start = t0 + plan.warmup;
    let end = measure_start + plan.duration;
    let fixed = plan.fixed_request();
    let mut rng = SplitMix64::new(conn as u64);
    let mut next_request = || match &fixed {
        Some(r) => r.clone(),
        None => grpc::encode(&plan.request(rng.below(plan.keys))),
    };
    let mut tally = Tally::new();
    let mut inflight = FuturesUnordered::new();
    match plan.mode {
        Mode::Closed { in_flight } => {
            let mut now = Instant::now();
            loop {
                if now < end {
                    while inflight.len() < in_flight {
                        let req = next_request();
                        inflight.push(call(&client, req, now, now, plan.timeout));
                    }
                }
                let Some((due, from, outcome)) = inflight.next().await else {
                    break;
                };
                now = Instant::now();
                if due >= measure_start {
                    tally.record(from, now, outcome);
                }
            }
        }
        Mode::Open {
            rate,
            max_in_flight,
        } => {
            // Each connection takes every `connections`-th slot of one global schedule:
            // slot k is due at t0 + k/rate.
            let cap = max_in_flight.div_ceil(connections).max(1);
            let mut k = conn as u64;
            let due = |k: u64| t0 + Duration::from_secs_f64(k as f64 / rate);
            let mut next = due(k);
            let sleep = tokio::time::sleep_until(next - EARLY);
            tokio::pin!(sleep);
            // Re-arming the timer costs a timer-wheel update: only when the slot changed.
            let mut armed = next;
            loop {
                let now = Instant::now();
                // Send everything due by now + EARLY (behind schedule: all that is late, at
                // once). Latency counts from the due time, or from the actual send when that
                // was earlier: never less than the server's own latency, and a late send
                // (a stalled generator or server) counts in full.
                while next <= now + EARLY && next < end {
                    if inflight.len() < cap {
                        let req = next_request();
                        let from = next.min(now);
                        inflight.push(call(&client, req, next, from, plan.timeout));
                    } else if next >= measure_start {
                        *tally.errors.entry(CLIENT_OVERLOAD).or_default() += 1;
                    }
                    k += connections as u64;
                    next = due(k);
                }
                if next < end {
                    if armed != next {
                        sleep.as_mut().reset(next - EARLY);
                        armed = next;
                    }
                    tokio::select! {
                        biased;
                        Some((due, from, outcome)) = inflight.next() => {
                            if due >= measure_start {
                                tally.record(from, Instant::now(), outcome);
                            }
                        }
                        _ = sleep.as_mut() => {}
                    }
                } else {
                    let Some((due, from, outcome)) = inflight.next().await else {
                        break;
                    };
                    if due >= measure_start {
                        tally.record(from, Instant::now(), outcome);
                    }
                }
            }
        }
    }
    tally
}

/// A small, fast PRNG for key indexes (no need for more: the point is spreading keys).
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(stream: u64) -> Self {
        SplitMix64(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(stream + 1) ^ std::process::id() as u64)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for any key count used).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n.max(1) as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_indexes_stay_in_range_and_spread() {
        let mut rng = SplitMix64::new(3);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[rng.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(rng.below(1), 0);
        assert_eq!(rng.below(0), 0);
    }
}
