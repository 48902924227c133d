//! A settlement applied whose answer was lost (the store's reply dropped with its connection):
//! its retry finds the marker the store left and succeeds; a different settlement does not.

use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::limiter::testing::{descriptor, request, rules};
use crate::limiter::LimiterOptions;
use crate::store::MemoryStore;

const YAML: &str = "domain: d
allow_reservations: true
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
";

fn limiter() -> Limiter<MemoryStore> {
    let limiter = Limiter::new(
        MemoryStore::new(1_000),
        Arc::new(ManualClock::new(1_000_000_000)),
        LimiterOptions::default(),
    );
    limiter.set_rules(Arc::new(rules(YAML)));
    limiter
}

/// Reserves 5 of the 10 hits; the reservation's id.
async fn reserve(l: &Limiter<MemoryStore>) -> String {
    let mut d = descriptor(&[("user", "u")]);
    d.hits = 5;
    let (r, id) = l
        .reserve(&request(vec![d]), 60_000_000, Deadline::NONE)
        .await
        .expect("reserved");
    assert!(r.allowed);
    id.expect("an id")
}

async fn remaining(l: &Limiter<MemoryStore>) -> u64 {
    let mut d = descriptor(&[("user", "u")]);
    d.hits = 0;
    let r = l.check(&request(vec![d]), false, Deadline::NONE).await;
    r.expect("a look").statuses[0].remaining
}

/// Applies reservation `id`'s Cancel in the store as a try whose answer was lost does.
async fn cancel_unanswered(l: &Limiter<MemoryStore>, id: &str) {
    let key = key::reservation(&l.options().key_prefix, id).expect("a key");
    let now = l.clock().now();
    let bytes = l.store().read(&key, now, Deadline::NONE).await;
    let record = Record::decode(&bytes.expect("read").expect("held")).expect("a record");
    let limits = record.limits().expect("limits");
    let checks = settlement(&record, &limits, 0);
    let marker = [SETTLED, b"cancel"].concat();
    let applied = l
        .store()
        .settle(&key, &checks, &marker, now, Deadline::NONE);
    assert!(applied.await.expect("applied"));
}

#[tokio::test]
async fn a_retried_settlement_succeeds_and_a_different_one_after_it_does_not() {
    let l = limiter();
    let id = reserve(&l).await;
    cancel_unanswered(&l, &id).await;
    assert_eq!(remaining(&l).await, 10, "given back");
    let other = l.commit(&id, 2, Deadline::NONE).await.unwrap_err();
    assert!(matches!(other, LimitError::NotFound(_)), "{other:?}");
    l.cancel(&id, Deadline::NONE)
        .await
        .expect("the retry succeeds");
    assert_eq!(remaining(&l).await, 10, "given back once");
    let again = l.cancel(&id, Deadline::NONE).await.unwrap_err();
    assert!(matches!(again, LimitError::NotFound(_)), "answered OK once");
}

#[tokio::test]
async fn a_settlement_answered_ok_is_not_answered_ok_again() {
    let l = limiter();
    let id = reserve(&l).await;
    l.commit(&id, 2, Deadline::NONE).await.expect("committed");
    assert_eq!(remaining(&l).await, 8, "3 of the 5 given back");
    for again in [
        l.commit(&id, 2, Deadline::NONE).await,
        l.cancel(&id, Deadline::NONE).await,
    ] {
        assert!(matches!(again, Err(LimitError::NotFound(_))), "{again:?}");
    }
    assert_eq!(remaining(&l).await, 8);
}
