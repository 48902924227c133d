//! Connections dropped between any two writes: Redis kills every normal client connection
//! (`CLIENT KILL TYPE normal`, sluice's pools and threads' links alike) every few ms while one
//! key, full, takes a rejected-heavy load beside a reservation's settlement and a refund. The
//! stored count stays exact: a request answered OK took effect once, a rejected one charged
//! nothing, a settlement answered an error is retried to success (or was applied: NOT_FOUND,
//! and the count shows it once), and the key never counts past its limit.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::proto::sluice::v1 as pb;
use sluice::proto::sluice::v1::rate_limiter_client::RateLimiterClient;
use tonic::transport::Channel;
use tonic::Code;

use super::support::*;
use crate::support::poll::wait_until_async;
use crate::support::redis::RedisNode;
use crate::support::{channel, Sluice, StoreKind};

const LIMIT: u64 = 10;
const HELD: u64 = 5;

/// An hour's window: the server's test clock stands still, but Redis expires the key in real
/// time at the window's end (half an hour after the test clock's time).
const CONFIG: &str = "domain: native
allow_reservations: true
allow_refunds: true
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
";

/// A thread killing every normal client connection of Redis every few ms while on; turning it
/// off waits for a kill under way to end (the switch is held while killing).
struct Killer {
    on: Arc<Mutex<bool>>,
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Killer {
    fn start(port: u16) -> Killer {
        let on = Arc::new(Mutex::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicU64::new(0));
        let (o, s, k) = (on.clone(), stop.clone(), kills.clone());
        let thread = std::thread::spawn(move || {
            // Its own connection is spared (`SKIPME yes`, the default).
            let conn = TcpStream::connect(("127.0.0.1", port)).expect("connect to Redis");
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut conn = conn;
            while !s.load(Ordering::Relaxed) {
                {
                    let on = o.lock().unwrap();
                    if *on {
                        conn.write_all(
                            b"*4\r\n$6\r\nCLIENT\r\n$4\r\nKILL\r\n$4\r\nTYPE\r\n$6\r\nnormal\r\n",
                        )
                        .unwrap();
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        let n: u64 = line.trim().trim_start_matches(':').parse().unwrap_or(0);
                        k.fetch_add(n, Ordering::Relaxed);
                    }
                }
                // The pace of the kills (this is the load, not a wait for a state).
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        Killer {
            on,
            stop,
            kills,
            thread: Some(thread),
        }
    }

    fn set(&self, on: bool) {
        *self.on.lock().unwrap() = on;
    }
}

impl Drop for Killer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn user() -> pb::Descriptor {
    pb::Descriptor {
        entries: vec![pb::Entry {
            key: "user".into(),
            value: "u".into(),
        }],
        hits: None,
    }
}

fn check(hits: u64) -> pb::CheckRequest {
    pb::CheckRequest {
        domain: "native".into(),
        descriptors: vec![pb::Descriptor {
            hits: Some(hits),
            ..user()
        }],
        dry_run: false,
    }
}

/// An Envoy RLS refund of `hits` to `user=u`.
fn refund(hits: u32) -> sluice::proto::RateLimitRequest {
    let mut r = take_request("u", hits, true);
    r.domain = "native".into();
    r.descriptors[0].entries[0].key = b"user".to_vec();
    r
}

/// The key's stored count (0 when absent), read while nothing is killed.
fn count(redis: &RedisNode) -> u64 {
    stored_entry(redis.port, "user=u").map_or(0, |(_, n)| n)
}

/// With kills off: waits until sluice decides again (a look answers), then takes or refunds
/// hits until the key counts `want`; what it counts then.
async fn settle_count_to(s: &Sluice, c: &RateLimiterClient<Channel>, redis: &RedisNode, want: u64) {
    wait_until_async("sluice to answer again", || {
        let mut c = c.clone();
        async move { c.check(check(0)).await.is_ok() }
    })
    .await;
    wait_until_async("the key to count what the test set", || async {
        let n = count(redis);
        if n > want {
            let _ = s.call(refund((n - want) as u32)).await;
        } else if n < want {
            let _ = c.clone().check(check(want - n)).await;
        }
        count(redis) == want
    })
    .await;
}

/// With kills off: a reservation of [`HELD`] on a key counting `LIMIT - HELD`; its id.
async fn hold(s: &Sluice, c: &mut RateLimiterClient<Channel>, redis: &RedisNode) -> String {
    for _ in 0..100 {
        settle_count_to(s, c, redis, LIMIT - HELD).await;
        let r = c
            .reserve(pb::ReserveRequest {
                domain: "native".into(),
                descriptors: vec![pb::Descriptor {
                    hits: Some(HELD),
                    ..user()
                }],
                ttl: Some(prost_types::Duration {
                    seconds: 600,
                    nanos: 0,
                }),
            })
            .await;
        if let Ok(r) = r {
            let r = r.into_inner();
            assert!(r.allowed, "room for the reservation: {r:?}");
            assert_eq!(count(redis), LIMIT);
            return r.reservation_id;
        }
    }
    panic!("a reservation within 100 tries (nothing killed)");
}

/// How a reservation is settled, and the hits it gives back.
#[derive(Clone, Copy, Debug)]
enum Settle {
    Commit(u64),
    Cancel,
}

impl Settle {
    fn gives_back(self) -> u64 {
        match self {
            Settle::Commit(actual) => HELD - actual,
            Settle::Cancel => HELD,
        }
    }
}

/// Settles `id` until an answer is final: OK (applied now), or NOT_FOUND after an error (an
/// earlier try was applied, its answer lost). Returns the failed tries, and whether it ended
/// on NOT_FOUND.
async fn settle(c: &mut RateLimiterClient<Channel>, id: &str, how: Settle) -> (u32, bool) {
    let mut failed = 0;
    let start = crate::support::poll::real_now();
    loop {
        let r = match how {
            Settle::Commit(actual) => c
                .commit(pb::CommitRequest {
                    reservation_id: id.into(),
                    actual_hits: actual,
                })
                .await
                .map(drop),
            Settle::Cancel => c
                .cancel(pb::CancelRequest {
                    reservation_id: id.into(),
                })
                .await
                .map(drop),
        };
        match r {
            Ok(()) => return (failed, false),
            Err(e) if e.code() == Code::NotFound && failed > 0 => return (failed, true),
            Err(e) => {
                assert_ne!(e.code(), Code::NotFound, "settled before it was: {e:?}");
                failed += 1;
                assert!(
                    crate::support::poll::real_since(start) < crate::support::poll::READY_WITHIN,
                    "a settlement succeeds within a minute ({failed} tries failed)"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_killed_every_few_ms_lose_no_hit_and_charge_none_twice() {
    let redis = RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(StoreKind::Redis(url), Some(CONFIG), &[]).await;
    let mut c = RateLimiterClient::new(channel(s.server.grpc_addr).await);
    let killer = Killer::start(redis.port);
    let plans = [Settle::Commit(HELD), Settle::Commit(2), Settle::Cancel];
    let mut retried = 0;
    for round in 0..9 {
        let id = hold(&s, &mut c, &redis).await;
        let how = plans[round % plans.len()];
        let refunding = round % 2 == 1;
        killer.set(true);
        // 16 checks in flight, three times, beside the settlement and perhaps a refund.
        let checks = async {
            let mut out = Vec::new();
            for _ in 0..3 {
                let got = futures::future::join_all((0..16).map(|_| {
                    let mut c = c.clone();
                    async move { c.check(check(1)).await.map(|r| r.into_inner().allowed) }
                }))
                .await;
                out.extend(got);
            }
            out
        };
        let refunded = async {
            match refunding {
                true => Some(s.call(refund(1)).await.is_ok()),
                false => None,
            }
        };
        let mut settler = c.clone();
        let (checks, (failed, _), refunded) =
            futures::join!(checks, settle(&mut settler, &id, how), refunded);
        killer.set(false);
        retried += failed;

        let allowed = checks.iter().filter(|r| matches!(r, Ok(true))).count() as u64;
        let errors = checks.iter().filter(|r| r.is_err()).count() as u64;
        let refund_ok = u64::from(refunded == Some(true));
        let refund_unknown = u64::from(refunded == Some(false));
        let want = LIMIT - how.gives_back() - refund_ok + allowed;
        let now = count(&redis);
        eprintln!(
            "round {round}: {how:?} after {failed} failed tries, refund {refunded:?}, checks \
             allowed {allowed}, failed {errors}: stored {now}, expected {want}"
        );
        assert!(now <= LIMIT, "never past the limit");
        assert!(
            want - refund_unknown <= now && now <= want + errors,
            "round {round}: stored {now}, expected {want} (+{errors} failed checks that may \
             have run, -{refund_unknown} failed refund)"
        );
        if how.gives_back() == 0 && !refunding {
            assert_eq!(allowed, 0, "a full key admits nothing");
            assert_eq!(now, LIMIT, "rejected takes charge nothing, dropped or not");
        }
    }
    let kills = killer.kills.load(Ordering::Relaxed);
    eprintln!("connections killed: {kills}, settlements retried: {retried}");
    assert!(kills > 0, "connections were killed");
    drop(killer);
    s.stop().await;
}

/// Issue 32 item 2, strictly: a Commit or Cancel answered with an error leaves the reservation
/// settleable, so its retry succeeds. Under connections killed every few ms, settlement after
/// settlement; each round's count is exact (nothing else touches the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_answered_an_error_is_retried_to_success_under_dropped_connections() {
    let redis = RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let s = Sluice::start(StoreKind::Redis(url), Some(CONFIG), &[]).await;
    let mut c = RateLimiterClient::new(channel(s.server.grpc_addr).await);
    let killer = Killer::start(redis.port);
    let (mut retried, mut applied_but_failed) = (0, 0);
    for round in 0..30 {
        let id = hold(&s, &mut c, &redis).await;
        let how = [Settle::Cancel, Settle::Commit(2)][round % 2];
        killer.set(true);
        let (failed, not_found) = settle(&mut c, &id, how).await;
        killer.set(false);
        retried += u64::from(failed > 0);
        applied_but_failed += u64::from(not_found);
        assert_eq!(
            count(&redis),
            LIMIT - how.gives_back(),
            "round {round}: {how:?} given back exactly once"
        );
    }
    eprintln!(
        "settlements retried after an error: {retried}; of them, answered NOT_FOUND because \
         the failed try had been applied: {applied_but_failed}"
    );
    assert_eq!(
        applied_but_failed, 0,
        "a settlement answered with an error had been applied: its retry answered NOT_FOUND"
    );
    drop(killer);
    s.stop().await;
}
