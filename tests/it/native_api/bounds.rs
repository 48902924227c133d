//! Reservation records within bounds (issue 34): on the memory store they count against
//! `--memory-max-bytes` (half of it at most) and in its gauge; on every store one record is
//! held to `--max-reservation-bytes`. Each refusal is RESOURCE_EXHAUSTED naming the flag, and
//! gives back what the Reserve charged.

use sluice::proto::sluice::v1 as pb;
use tonic::Code;

use super::{client, descriptor, remaining, ttl_ms, CONFIG};
use crate::support::{Sluice, StoreKind};

/// A Reserve of three descriptors with 60 KB values (`n` keeps them apart).
fn big(n: usize) -> pb::ReserveRequest {
    let value = |i: usize| format!("{n}-{i}-{}", "v".repeat(60_000));
    pb::ReserveRequest {
        domain: "native".into(),
        descriptors: (0..3)
            .map(|i| descriptor("user", &value(i), Some(1)))
            .collect(),
        ttl: ttl_ms(600_000),
    }
}

async fn gauge(s: &Sluice) -> f64 {
    let (_, text) = crate::support::http::http_get(s.server.http_addr, "/metrics").await;
    crate::support::prom_text::parse_prometheus(&text)
        .into_iter()
        .find(|((n, _), _)| n == "sluice_store_memory_bytes")
        .map(|(_, v)| v)
        .expect("sluice_store_memory_bytes")
}

#[tokio::test]
async fn unsettled_reservations_are_held_within_the_memory_cap() {
    let cap = 8_388_608;
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &[
            "--memory-max-bytes",
            &cap.to_string(),
            "--max-reservation-bytes",
            "1048576",
        ],
    )
    .await;
    let mut c = client(&s).await;
    let mut held = 0;
    let status = loop {
        assert!(
            held < 1_000,
            "1,000 reservations of 3 x 60 KB held within {cap} bytes"
        );
        match c.reserve(big(held)).await {
            Ok(r) => {
                assert!(r.get_ref().allowed, "{r:?}");
                held += 1;
            }
            Err(status) => break status,
        }
        // A bystander is answered meanwhile.
        assert_eq!(remaining(&mut c, "bystander").await, 10);
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--memory-max-bytes"),
        "{status:?}"
    );
    // Each record holds its three keys (as JSON numbers, about 4 bytes per key byte).
    assert!(held >= 2, "only {held} held");
    let counted = gauge(&s).await;
    assert!(counted <= cap as f64, "the gauge reads {counted}");
    assert!(
        counted >= (held * 3 * 60_000) as f64,
        "the gauge reads {counted} for {held} records"
    );
    // The refused Reserve gave its hits back: the key it charged has all 10 left.
    let refused = format!("{held}-0-{}", "v".repeat(60_000));
    assert_eq!(remaining(&mut c, &refused).await, 10);
    s.stop().await;
}

#[tokio::test]
async fn a_reservation_record_is_held_to_max_reservation_bytes_on_every_store() {
    let redis = crate::support::redis::RedisNode::start();
    let url: &'static str = Box::leak(redis.url().into_boxed_str());
    for store in [StoreKind::Memory, StoreKind::Redis(url)] {
        let s = Sluice::start(store, Some(CONFIG), &[]).await;
        let mut c = client(&s).await;
        let status = c.reserve(big(0)).await.expect_err("refused");
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{store:?}: {status:?}"
        );
        assert!(
            status.message().contains("--max-reservation-bytes"),
            "{store:?}: {status:?}"
        );
        let charged = format!("0-0-{}", "v".repeat(60_000));
        assert_eq!(
            remaining(&mut c, &charged).await,
            10,
            "{store:?}: hits given back"
        );
        // A reservation of usual size is held.
        let ok = super::reserve(&mut c, "native", "small", 1, 60_000).await;
        assert!(ok.expect("held").allowed, "{store:?}");
        s.stop().await;
    }
}
