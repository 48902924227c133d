//! Reservations live in Redis: one made through a sluice is settled through another (two
//! servers, one Redis, one key prefix, as replicas behind a load balancer are), and one made
//! before a restart is settled after it.

use sluice::proto::sluice::v1 as pb;
use tonic::Code;

use super::{client, remaining, reserve, CONFIG};
use crate::support::redis as redis_support;
use crate::support::{Sluice, StoreKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_made_through_one_replica_is_settled_through_another() {
    let redis = redis_support::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    let replica = || async {
        Sluice::start_with(StoreKind::Redis(url), Some(CONFIG), &[], |args| {
            args.key_prefix = "replicas:".into()
        })
        .await
    };
    let (a, b) = (replica().await, replica().await);
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);

    let r = reserve(&mut ca, "native", "u", 6, 60_000)
        .await
        .expect("reserved");
    assert!(r.allowed);
    assert_eq!(remaining(&mut cb, "u").await, 4, "b sees a's charge");
    cb.commit(pb::CommitRequest {
        reservation_id: r.reservation_id.clone(),
        actual_hits: 1,
    })
    .await
    .expect("b settles a's reservation");
    assert_eq!(remaining(&mut ca, "u").await, 9, "a sees b's refund");
    let again = ca
        .cancel(pb::CancelRequest {
            reservation_id: r.reservation_id,
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "settled once, through either");
    assert_eq!(remaining(&mut ca, "u").await, 9);

    // A restart loses no reservation: b goes, a new server settles what b reserved.
    let r = reserve(&mut cb, "native", "v", 3, 60_000)
        .await
        .expect("reserved");
    b.stop().await;
    let c = replica().await;
    let mut cc = client(&c).await;
    assert_eq!(remaining(&mut cc, "v").await, 7);
    cc.cancel(pb::CancelRequest {
        reservation_id: r.reservation_id,
    })
    .await
    .expect("settled after the restart");
    assert_eq!(remaining(&mut cc, "v").await, 10);
    a.stop().await;
    c.stop().await;
}
