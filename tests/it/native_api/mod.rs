//! The native API (`sluice.v1.RateLimiter`): every RPC and error as one table of cases, each
//! a sequence of calls with the answers expected, run on the in-memory store, a standalone
//! Redis and a 6-node Redis Cluster (one server per store; each case counts under its own
//! descriptor value). `replicas.rs`: a reservation made through one sluice settled through
//! another on the same Redis, and one surviving a restart. `client.rs`: the Rust client.
//! [`concurrency_reservations_release_their_leases`]: a Reserve on a `concurrency` limit takes
//! leases, and its Commit or Cancel releases them all.

mod bounds;
mod client;
mod replicas;
mod settle;

use sluice::model::Micros;
use sluice::proto::sluice::v1 as pb;
use sluice::proto::sluice::v1::rate_limiter_client::RateLimiterClient;
use tonic::transport::Channel;
use tonic::Code;

use crate::support::redis as redis_support;
use crate::support::{channel, Sluice, StoreKind, SEC};

/// `native` accepts reservations, `plain` does not; both limit `user` to 10 a minute.
pub const CONFIG: &str = "domain: native
allow_reservations: true
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
  - key: free
    rate_limit: {unlimited: true}
  - key: job
    rate_limit: {name: jobs, algorithm: concurrency, max_in_flight: 3, lease_time: 1m}
";

const PLAIN: &str = "domain: plain
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
";

/// One call and what it must answer. `hits: None` leaves the field unset (1).
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Check `user=<case name>`: allowed and remaining.
    Check {
        hits: Option<u64>,
        dry_run: bool,
        allowed: bool,
        remaining: u64,
    },
    /// Reserve `hits` for `ttl_ms`: allowed, remaining, and whether an id came back (kept in
    /// the case's list of reservations, numbered from 0).
    Reserve {
        hits: u64,
        ttl_ms: i64,
        allowed: bool,
        remaining: u64,
    },
    /// Commit reservation `n` of this case at `actual` hits.
    Commit {
        n: usize,
        actual: u64,
        code: Code,
    },
    Cancel {
        n: usize,
        code: Code,
    },
    /// Commit an id the server never gave.
    CommitId {
        id: &'static str,
        code: Code,
    },
    /// A request that is refused: `what` names it (see [`refused`]).
    Refused {
        what: &'static str,
        code: Code,
    },
    /// Moves the server's clock.
    Advance(Micros),
}

use Step::*;

const fn check(hits: u64, allowed: bool, remaining: u64) -> Step {
    Check {
        hits: Some(hits),
        dry_run: false,
        allowed,
        remaining,
    }
}

const fn dry(hits: u64, allowed: bool, remaining: u64) -> Step {
    Check {
        hits: Some(hits),
        dry_run: true,
        allowed,
        remaining,
    }
}

/// Look without counting (hits 0): what is left.
const fn left(remaining: u64) -> Step {
    check(0, true, remaining)
}

const fn hold(hits: u64, allowed: bool, remaining: u64) -> Step {
    Reserve {
        hits,
        ttl_ms: 60_000,
        allowed,
        remaining,
    }
}

pub fn cases() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            "check_charges",
            vec![
                check(3, true, 7),
                Check {
                    hits: None,
                    dry_run: false,
                    allowed: true,
                    remaining: 6,
                },
                check(7, false, 0),
                check(6, true, 0),
            ],
        ),
        (
            "dry_run_charges_nothing",
            vec![
                dry(4, true, 6),
                dry(4, true, 6),
                dry(11, false, 0),
                left(10),
                check(10, true, 0),
                dry(1, false, 0),
            ],
        ),
        (
            "commit_under_gives_back_the_rest",
            vec![
                hold(5, true, 5),
                left(5),
                Commit {
                    n: 0,
                    actual: 2,
                    code: Code::Ok,
                },
                left(8),
            ],
        ),
        (
            "commit_exact_changes_nothing",
            vec![
                hold(4, true, 6),
                Commit {
                    n: 0,
                    actual: 4,
                    code: Code::Ok,
                },
                left(6),
            ],
        ),
        (
            "overrun_is_charged_as_debt",
            vec![
                hold(5, true, 5),
                Commit {
                    n: 0,
                    actual: 14,
                    code: Code::Ok,
                },
                check(1, false, 0),
                // The fixed window forgets the debt when it ends (T0 is 30.25 s into a minute).
                Advance(30 * SEC),
                check(1, true, 9),
            ],
        ),
        (
            "cancel_gives_back_everything",
            vec![
                hold(6, true, 4),
                Cancel {
                    n: 0,
                    code: Code::Ok,
                },
                left(10),
            ],
        ),
        (
            "settling_twice_is_an_error_that_changes_nothing",
            vec![
                hold(2, true, 8),
                hold(3, true, 5),
                Commit {
                    n: 0,
                    actual: 0,
                    code: Code::Ok,
                },
                left(7),
                Commit {
                    n: 0,
                    actual: 0,
                    code: Code::NotFound,
                },
                Cancel {
                    n: 0,
                    code: Code::NotFound,
                },
                left(7),
                Cancel {
                    n: 1,
                    code: Code::Ok,
                },
                Cancel {
                    n: 1,
                    code: Code::NotFound,
                },
                Commit {
                    n: 1,
                    actual: 9,
                    code: Code::NotFound,
                },
                left(10),
            ],
        ),
        (
            "an_expired_reservation_counts_as_used",
            vec![
                Reserve {
                    hits: 4,
                    ttl_ms: 5_000,
                    allowed: true,
                    remaining: 6,
                },
                Advance(5 * SEC),
                Cancel {
                    n: 0,
                    code: Code::NotFound,
                },
                left(6),
            ],
        ),
        (
            "a_rejected_reservation_holds_nothing",
            vec![hold(11, false, 0), left(10)],
        ),
        (
            "unknown_reservations",
            vec![
                CommitId {
                    id: "00112233445566778899aabbccddeeff",
                    code: Code::NotFound,
                },
                CommitId {
                    id: "not an id {x}",
                    code: Code::NotFound,
                },
                CommitId {
                    id: "",
                    code: Code::InvalidArgument,
                },
            ],
        ),
        (
            "refused_requests",
            vec![
                Refused {
                    what: "reserve in a domain without reservations",
                    code: Code::FailedPrecondition,
                },
                Refused {
                    what: "reserve in an unknown domain",
                    code: Code::FailedPrecondition,
                },
                Refused {
                    what: "reserve without ttl",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "reserve with a ttl over a day",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "check of an empty domain",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "check without descriptors",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "check with an empty key",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "check of too many hits",
                    code: Code::InvalidArgument,
                },
                Refused {
                    what: "commit of too many hits",
                    code: Code::InvalidArgument,
                },
                // Nothing above charged anything.
                left(10),
            ],
        ),
    ]
}

/// The native client of a running server.
/// 128 random bits in hex, then the hex tag of the record's Redis Cluster slot.
pub fn is_reservation_id(id: &str) -> bool {
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    id.split_once('.')
        .is_some_and(|(r, t)| r.len() == 32 && hex(r) && (1..=5).contains(&t.len()) && hex(t))
}

pub async fn client(s: &Sluice) -> RateLimiterClient<Channel> {
    RateLimiterClient::new(channel(s.server.grpc_addr).await)
}

pub fn descriptor(key: &str, value: &str, hits: Option<u64>) -> pb::Descriptor {
    pb::Descriptor {
        entries: vec![pb::Entry {
            key: key.into(),
            value: value.into(),
        }],
        hits,
    }
}

pub fn ttl_ms(ms: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: ms / 1000,
        nanos: (ms % 1000) as i32 * 1_000_000,
    })
}

pub async fn reserve(
    c: &mut RateLimiterClient<Channel>,
    domain: &str,
    user: &str,
    hits: u64,
    ttl: i64,
) -> Result<pb::ReserveResponse, tonic::Status> {
    c.reserve(pb::ReserveRequest {
        domain: domain.into(),
        descriptors: vec![descriptor("user", user, Some(hits))],
        ttl: ttl_ms(ttl),
    })
    .await
    .map(|r| r.into_inner())
}

/// What is left for `user` in `native` (a look: hits 0).
pub async fn remaining(c: &mut RateLimiterClient<Channel>, user: &str) -> u64 {
    let r = c
        .check(pb::CheckRequest {
            domain: "native".into(),
            descriptors: vec![descriptor("user", user, Some(0))],
            dry_run: false,
        })
        .await
        .expect("a look")
        .into_inner();
    r.statuses[0].remaining
}

/// The refused request named `what`, sent; its status code.
async fn refused(c: &mut RateLimiterClient<Channel>, what: &str, user: &str) -> Code {
    let check = |domain: &str, descriptors| pb::CheckRequest {
        domain: domain.into(),
        descriptors,
        dry_run: false,
    };
    let one = vec![descriptor("user", user, Some(1))];
    let r = match what {
        "reserve in a domain without reservations" => {
            reserve(c, "plain", user, 1, 1000).await.map(drop)
        }
        "reserve in an unknown domain" => reserve(c, "nowhere", user, 1, 1000).await.map(drop),
        "reserve without ttl" => reserve(c, "native", user, 1, 0).await.map(drop),
        "reserve with a ttl over a day" => {
            reserve(c, "native", user, 1, 86_400_001).await.map(drop)
        }
        "check of an empty domain" => c.check(check("", one)).await.map(drop),
        "check without descriptors" => c.check(check("native", vec![])).await.map(drop),
        "check with an empty key" => c
            .check(check("native", vec![descriptor("", user, Some(1))]))
            .await
            .map(drop),
        "check of too many hits" => c
            .check(check(
                "native",
                vec![descriptor("user", user, Some(1 << 32))],
            ))
            .await
            .map(drop),
        "commit of too many hits" => {
            let id = reserve(c, "native", user, 0, 1000)
                .await
                .expect("a reservation of nothing")
                .reservation_id;
            c.commit(pb::CommitRequest {
                reservation_id: id,
                actual_hits: 1 << 32,
            })
            .await
            .map(drop)
        }
        other => panic!("no refused request named {other:?}"),
    };
    r.err().map_or(Code::Ok, |s| s.code())
}

/// Runs every case against a server on `store`.
pub async fn run_cases(store: StoreKind) {
    // The second domain in a file of its own (one domain per file), a second `--config`.
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("plain.yaml");
    std::fs::write(&plain, PLAIN).expect("write config");
    let plain = plain.display().to_string();
    let s = Sluice::start(store, Some(CONFIG), &["--config", &plain]).await;
    let mut c = client(&s).await;
    for (name, steps) in cases() {
        let mut ids: Vec<String> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{store:?} case {name} step {i} {step:?}");
            match *step {
                Check {
                    hits,
                    dry_run,
                    allowed,
                    remaining,
                } => {
                    let r = c
                        .check(pb::CheckRequest {
                            domain: "native".into(),
                            descriptors: vec![descriptor("user", name, hits)],
                            dry_run,
                        })
                        .await
                        .unwrap_or_else(|e| panic!("{at}: {e}"))
                        .into_inner();
                    assert_eq!(
                        (r.allowed, r.statuses[0].allowed, r.statuses[0].remaining),
                        (allowed, allowed, remaining),
                        "{at}"
                    );
                    let limit = r.statuses[0].limit.as_ref().expect("a limit");
                    assert_eq!(
                        (
                            limit.name.as_str(),
                            limit.requests,
                            limit.algorithm.as_str()
                        ),
                        ("per_user", 10, "fixed_window"),
                        "{at}"
                    );
                    assert_eq!(
                        limit.window,
                        Some(prost_types::Duration {
                            seconds: 60,
                            nanos: 0
                        }),
                        "{at}"
                    );
                    // The IETF fields of the limit (the rule is per value: partitioned by it).
                    let policy = &r.headers["RateLimit-Policy"];
                    assert!(
                        policy.starts_with("\"per_user\";q=10;w=60;pk=:"),
                        "{at}: {policy}"
                    );
                    let state = &r.headers["RateLimit"];
                    let expected = format!("\"per_user\";r={remaining};t=");
                    assert!(state.starts_with(&expected), "{at}: {state}");
                    assert_eq!(r.statuses[0].retry_after.is_some(), !allowed, "{at}");
                }
                Reserve {
                    hits,
                    ttl_ms,
                    allowed,
                    remaining,
                } => {
                    let r = reserve(&mut c, "native", name, hits, ttl_ms)
                        .await
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(
                        (r.allowed, r.statuses[0].remaining),
                        (allowed, remaining),
                        "{at}"
                    );
                    assert_eq!(r.reservation_id.is_empty(), !allowed, "{at}");
                    if allowed {
                        assert!(is_reservation_id(&r.reservation_id), "{at}");
                        ids.push(r.reservation_id);
                    }
                }
                Commit { n, actual, code } => {
                    let r = c
                        .commit(pb::CommitRequest {
                            reservation_id: ids[n].clone(),
                            actual_hits: actual,
                        })
                        .await;
                    assert_eq!(r.err().map_or(Code::Ok, |e| e.code()), code, "{at}");
                }
                Cancel { n, code } => {
                    let r = c
                        .cancel(pb::CancelRequest {
                            reservation_id: ids[n].clone(),
                        })
                        .await;
                    assert_eq!(r.err().map_or(Code::Ok, |e| e.code()), code, "{at}");
                }
                CommitId { id, code } => {
                    let r = c
                        .commit(pb::CommitRequest {
                            reservation_id: id.into(),
                            actual_hits: 1,
                        })
                        .await;
                    assert_eq!(r.err().map_or(Code::Ok, |e| e.code()), code, "{at}");
                }
                Refused { what, code } => {
                    assert_eq!(refused(&mut c, what, name).await, code, "{at}");
                }
                Advance(us) => s.clock.advance(us),
            }
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn every_rpc_and_error_on_memory() {
    run_cases(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_and_error_on_redis() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    run_cases(StoreKind::Redis(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_and_error_on_cluster() {
    let cluster = tokio::task::spawn_blocking(redis_support::RedisCluster::start)
        .await
        .expect("cluster starts");
    let url: &'static str = Box::leak(cluster.url().into_boxed_str());
    run_cases(StoreKind::Redis(url)).await;
}

/// Reserve on a `concurrency` limit takes leases; Commit (whatever the actual hits) and Cancel
/// release them all, on every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_reservations_release_their_leases() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    for store in [StoreKind::Memory, StoreKind::Redis(url)] {
        let s = Sluice::start(store, Some(CONFIG), &[]).await;
        let mut c = client(&s).await;
        let job = |hits| pb::ReserveRequest {
            domain: "native".into(),
            descriptors: vec![descriptor("job", "export", Some(hits))],
            ttl: ttl_ms(60_000),
        };
        let in_flight = |r: &pb::ReserveResponse| (r.allowed, r.statuses[0].remaining);
        let a = c.reserve(job(2)).await.expect("reserved").into_inner();
        assert_eq!(in_flight(&a), (true, 1), "{store:?}");
        let limit = a.statuses[0].limit.as_ref().expect("a limit");
        assert_eq!(
            (limit.algorithm.as_str(), limit.requests),
            ("concurrency", 3)
        );
        assert!(a.headers["RateLimit-Policy"].contains("qu=\"concurrent-requests\""));
        let b = c.reserve(job(1)).await.expect("reserved").into_inner();
        assert_eq!(in_flight(&b), (true, 0), "{store:?}");
        let full = c.reserve(job(1)).await.expect("answered").into_inner();
        assert_eq!(in_flight(&full), (false, 0), "{store:?}: 3 in flight");

        // A commit ends the work: both leases of `a` come back, whatever it reports.
        c.commit(pb::CommitRequest {
            reservation_id: a.reservation_id,
            actual_hits: 7,
        })
        .await
        .expect("committed");
        let again = c.reserve(job(2)).await.expect("reserved").into_inner();
        assert_eq!(in_flight(&again), (true, 0), "{store:?}: 2 free again");
        c.cancel(pb::CancelRequest {
            reservation_id: b.reservation_id,
        })
        .await
        .expect("cancelled");
        c.cancel(pb::CancelRequest {
            reservation_id: again.reservation_id,
        })
        .await
        .expect("cancelled");
        let all = c.reserve(job(3)).await.expect("reserved").into_inner();
        assert_eq!(
            in_flight(&all),
            (true, 0),
            "{store:?}: every lease released"
        );
        s.stop().await;
    }
}
