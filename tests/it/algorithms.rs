//! Every algorithm served over gRPC by an in-process sluice (in-memory store) in simulated
//! time: the boundary-burst demonstration, the bucket family, distinct, calendar windows,
//! several limits per descriptor, overrides, refunds and their permission.

use std::path::PathBuf;
use std::sync::Arc;

use sluice::app::Server;
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::rate_limit_response::{Code, DescriptorStatus};
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::Channel;

const SEC: Micros = 1_000_000;
/// A multiple of every window below (and of a UTC day): 2023-11-14T00:00:00Z.
const T0: Micros = 1_699_920_000 * SEC;

struct Sluice {
    server: Server,
    clock: ManualClock,
    client: RateLimitServiceClient<Channel>,
    dir: PathBuf,
}

impl Sluice {
    async fn start(name: &str, yaml: &str, now: Micros) -> Sluice {
        let dir = std::env::temp_dir().join(format!("sluice-alg-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.yaml"), yaml).unwrap();
        let args = crate::support::parse_serve(&dir, &[]);
        let clock = ManualClock::new(now);
        let server = sluice::app::start(args, Arc::new(clock.clone()))
            .await
            .unwrap();
        let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr))
            .await
            .unwrap();
        Sluice {
            server,
            clock,
            client,
            dir,
        }
    }

    async fn ask(&mut self, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> Vec<Status> {
        let r = self
            .client
            .should_rate_limit(RateLimitRequest {
                domain: domain.into(),
                descriptors,
                hits_addend: 0,
            })
            .await
            .unwrap()
            .into_inner();
        r.statuses.iter().map(Status::of).collect()
    }

    /// One descriptor of `entries`, one hit.
    async fn one(&mut self, domain: &str, entries: &[(&str, &str)]) -> Status {
        self.ask(domain, vec![desc(entries)]).await.remove(0)
    }

    async fn stop(self) {
        self.server.shutdown();
        self.server.wait().await.unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The parts of a descriptor status the tests compare.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Status {
    ok: bool,
    remaining: u32,
    /// duration_until_reset in ms.
    reset_ms: i64,
    name: String,
    rpu: u32,
    unit: i32,
}

impl Status {
    fn of(s: &DescriptorStatus) -> Status {
        let l = s.current_limit.clone().unwrap_or_default();
        let d = s.duration_until_reset.unwrap_or_default();
        Status {
            ok: s.code == Code::Ok as i32,
            remaining: s.limit_remaining,
            reset_ms: d.seconds * 1_000 + i64::from(d.nanos) / 1_000_000,
            name: l.name,
            rpu: l.requests_per_unit,
            unit: l.unit,
        }
    }
}

const DEMO: &str = r#"
domain: demo
descriptors:
  - key: fixed
    rate_limit: {requests_per_unit: 3, window: 5s}
  - key: sliding
    rate_limit: {requests_per_unit: 3, window: 5s, algorithm: sliding_window, precision: 5}
  - key: log
    rate_limit: {requests_per_unit: 3, window: 5s, algorithm: sliding_log}
"#;

/// The seeds' demonstration: 3 per 5 s, one request every 0.5 s from 3.5 s to 5.5 s, across
/// the window boundary at 5 s.
#[tokio::test]
async fn boundary_burst_fixed_window_passes_5_in_2_seconds_sliding_ones_3() {
    let mut s = Sluice::start("demo", DEMO, T0).await;
    for (key, want) in [("fixed", 5), ("sliding", 3), ("log", 3)] {
        let mut passed = Vec::new();
        for k in 0..5 {
            let at = 3 * SEC + SEC / 2 + k * SEC / 2;
            s.clock.set(T0 + at);
            if s.one("demo", &[(key, "x")]).await.ok {
                passed.push(at);
            }
        }
        assert_eq!(passed.len(), want, "{key}: passed at {passed:?}");
        if key == "fixed" {
            assert_eq!(passed[4] - passed[0], 2 * SEC);
        }
    }
    // window: 5s is not a whole Envoy unit: current_limit reports SECOND with the configured
    // requests_per_unit (ALGORITHMS.md says the window is the exact one).
    let st = s.one("demo", &[("log", "x")]).await;
    assert_eq!((st.rpu, st.unit), (3, Unit::Second as i32));
    s.stop().await;
}

const BUCKETS: &str = r#"
domain: buckets
descriptors:
  - key: token
    rate_limit: {name: tb, requests_per_unit: 10, unit: second, algorithm: token_bucket, burst: 3}
  - key: leaky
    rate_limit: {name: lb, requests_per_unit: 10, unit: second, algorithm: leaky_bucket, burst: 3}
  - key: gcra
    rate_limit: {name: gc, requests_per_unit: 10, unit: second, algorithm: gcra, burst: 3}
"#;

#[tokio::test]
async fn buckets_admit_burst_back_to_back_then_pace() {
    let mut s = Sluice::start("buckets", BUCKETS, T0).await;
    for (key, name) in [("token", "tb"), ("leaky", "lb"), ("gcra", "gc")] {
        s.clock.set(T0);
        let got: Vec<(bool, u32, i64)> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                let st = s.one("buckets", &[(key, "a")]).await;
                assert_eq!(
                    (st.name.as_str(), st.rpu, st.unit),
                    (name, 10, Unit::Second as i32)
                );
                v.push((st.ok, st.remaining, st.reset_ms));
            }
            v
        };
        // One hit refills every 100 ms: full again 100 ms per hit taken; the 4th retries in
        // 100 ms.
        assert_eq!(
            got,
            [
                (true, 2, 100),
                (true, 1, 200),
                (true, 0, 300),
                (false, 0, 100)
            ],
            "{key}"
        );
        s.clock.set(T0 + 100_000);
        assert!(s.one("buckets", &[(key, "a")]).await.ok, "{key} refilled");
        assert!(!s.one("buckets", &[(key, "a")]).await.ok, "{key} paced");
    }
    s.stop().await;
}

const DISTINCT: &str = r#"
domain: distinct
descriptors:
  - key: user
    descriptors:
      - key: ip
        rate_limit: {name: ips, requests_per_unit: 2, unit: hour, algorithm: distinct}
"#;

#[tokio::test]
async fn distinct_counts_values_of_the_last_entry_per_parent() {
    let mut s = Sluice::start("distinct", DISTINCT, T0 + 10 * SEC).await;
    let ask = |u: &'static str, ip: &'static str| [("user", u), ("ip", ip)];
    assert!(s.one("distinct", &ask("alice", "1.1.1.1")).await.ok);
    assert!(s.one("distinct", &ask("alice", "1.1.1.1")).await.ok);
    let st = s.one("distinct", &ask("alice", "2.2.2.2")).await;
    assert_eq!((st.ok, st.remaining), (true, 0));
    let st = s.one("distinct", &ask("alice", "3.3.3.3")).await;
    assert_eq!(
        (st.ok, st.reset_ms),
        (false, 3_590_000),
        "until the hour ends"
    );
    assert!(
        s.one("distinct", &ask("alice", "2.2.2.2")).await.ok,
        "seen: allowed"
    );
    assert!(
        s.one("distinct", &ask("bob", "3.3.3.3")).await.ok,
        "per parent"
    );
    s.clock.set(T0 + 3_600 * SEC);
    assert!(
        s.one("distinct", &ask("alice", "3.3.3.3")).await.ok,
        "next hour"
    );
    s.stop().await;
}

const LOGIN: &str = r#"
domain: login
descriptors:
  - key: login
    rate_limits:
      - {name: per-second, requests_per_unit: 2, unit: second, algorithm: sliding_log}
      - {name: per-minute, requests_per_unit: 3, unit: minute}
"#;

#[tokio::test]
async fn several_limits_all_must_pass_and_a_rejection_consumes_none() {
    let mut s = Sluice::start("login", LOGIN, T0).await;
    let l = [("login", "u1")];
    let st = s.one("login", &l).await;
    // Allowed: reports the limit with the least remaining (per-second has 1, per-minute 2).
    assert_eq!(
        (st.ok, st.name.as_str(), st.remaining),
        (true, "per-second", 1)
    );
    assert!(s.one("login", &l).await.ok);
    let st = s.one("login", &l).await;
    assert_eq!(
        (st.ok, st.name.as_str(), st.reset_ms),
        (false, "per-second", 1_000)
    );
    // The rejected request took nothing from per-minute: one left there.
    s.clock.set(T0 + SEC);
    let st = s.one("login", &l).await;
    assert_eq!(
        (st.ok, st.name.as_str(), st.remaining),
        (true, "per-minute", 0)
    );
    // Now per-minute rejects (per-second would allow): it is reported, retry at the minute.
    let st = s.one("login", &l).await;
    assert_eq!(
        (st.ok, st.name.as_str(), st.reset_ms),
        (false, "per-minute", 59_000)
    );
    s.stop().await;
}

const OVERRIDE: &str = r#"
domain: over
descriptors:
  - key: log
    rate_limit: {requests_per_unit: 100, unit: minute, algorithm: sliding_log}
"#;

#[tokio::test]
async fn an_override_keeps_the_algorithm_and_replaces_rate_and_unit() {
    let mut s = Sluice::start("override", OVERRIDE, T0).await;
    let with = |rpu: u32| RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit: Unit::Second as i32,
        }),
        ..desc(&[("log", "x")])
    };
    let mut got = Vec::new();
    for k in 0..3 {
        s.clock.set(T0 + 900_000 + k * 100_000);
        got.push(s.ask("over", vec![with(2)]).await.remove(0));
    }
    assert!(got[0].ok && got[1].ok && !got[2].ok);
    assert_eq!((got[2].rpu, got[2].unit), (2, Unit::Second as i32));
    // A sliding log would still hold the hits of 0.9 s and 1.0 s at 1.1 s: a fixed window of
    // one second would have reset at 1 s.
    assert_eq!(got[2].reset_ms, 800);
    // An override the algorithm cannot keep exactly is an invalid argument.
    let err = s
        .client
        .should_rate_limit(RateLimitRequest {
            domain: "over".into(),
            descriptors: vec![with(50_000)],
            hits_addend: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("sliding_window"),
        "{}",
        err.message()
    );
    s.stop().await;
}

const REFUNDS: &str = r#"
domain: refunds
allow_refunds: true
descriptors:
  - key: tb
    rate_limit: {requests_per_unit: 10, unit: minute, algorithm: token_bucket}
  - key: fw
    rate_limit: {requests_per_unit: 10, unit: minute}
"#;

const NO_REFUNDS: &str = r#"
domain: norefunds
descriptors:
  - key: fw
    rate_limit: {requests_per_unit: 10, unit: minute}
"#;

#[tokio::test]
async fn refunds_give_hits_back_only_where_the_domain_allows_them() {
    let mut s = Sluice::start("refunds", REFUNDS, T0).await;
    std::fs::write(s.dir.join("other.yaml"), NO_REFUNDS).unwrap();
    assert!(s.server.reload());
    let hits = |key: &str, n: u64, refund: bool| RateLimitDescriptor {
        hits_addend: Some(n),
        is_negative_hits: refund,
        ..desc(&[(key, "x")])
    };
    for key in ["tb", "fw"] {
        let st = s.ask("refunds", vec![hits(key, 8, false)]).await.remove(0);
        assert_eq!((st.ok, st.remaining), (true, 2), "{key}");
        let st = s.ask("refunds", vec![hits(key, 5, true)]).await.remove(0);
        assert_eq!((st.ok, st.remaining), (true, 7), "{key} refunded");
        let st = s.ask("refunds", vec![hits(key, 50, true)]).await.remove(0);
        assert_eq!(
            (st.ok, st.remaining),
            (true, 10),
            "{key}: never beyond full"
        );
    }
    let err = s
        .client
        .should_rate_limit(RateLimitRequest {
            domain: "norefunds".into(),
            descriptors: vec![hits("fw", 1, true)],
            hits_addend: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(err.message().contains("allow_refunds"), "{}", err.message());
    s.stop().await;
}

const CALENDAR: &str = r#"
domain: calendar
descriptors:
  - key: day
    rate_limit: {requests_per_unit: 2, unit: day, align: calendar, timezone: Asia/Shanghai}
"#;

#[tokio::test]
async fn calendar_days_end_at_local_midnight() {
    // T0 is 08:00 in Shanghai; local midnight is 16:00Z. Start one minute before it.
    let before_midnight = T0 + 16 * 3_600 * SEC - 60 * SEC;
    let mut s = Sluice::start("calendar", CALENDAR, before_midnight).await;
    let st = s.one("calendar", &[("day", "x")]).await;
    assert_eq!(
        (st.ok, st.reset_ms, st.unit),
        (true, 60_000, Unit::Day as i32)
    );
    assert!(s.one("calendar", &[("day", "x")]).await.ok);
    assert!(!s.one("calendar", &[("day", "x")]).await.ok);
    s.clock.advance(60 * SEC);
    let st = s.one("calendar", &[("day", "x")]).await;
    assert_eq!((st.ok, st.remaining, st.reset_ms), (true, 1, 86_400_000));
    s.stop().await;
}

#[test]
fn the_sample_config_shows_every_algorithm_and_loads() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("config/algorithms.yaml");
    let rules = sluice::config::load(std::slice::from_ref(&path), Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let dump = rules.dump();
    for a in sluice::algorithm::Algorithm::ALL {
        assert!(
            dump.contains(&format!("algorithm={}", a.as_str())),
            "{} missing from {}",
            a.as_str(),
            path.display()
        );
    }
}
