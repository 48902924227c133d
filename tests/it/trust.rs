//! What a caller may ask of a domain: limit overrides (allowed unless the domain sets
//! `allow_overrides: false`) and refunds (refused unless it sets `allow_refunds: true`).

use crate::support;

use sluice::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use support::*;

fn ask(domain: &str, limit: Option<u32>, refund: bool) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
            limit: limit.map(|n| RateLimitOverride {
                requests_per_unit: n,
                unit: Unit::Hour as i32,
            }),
            hits_addend: None,
            is_negative_hits: refund,
        }],
        hits_addend: 0,
    }
}

const RULE: &str = "descriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";

#[tokio::test]
async fn overrides_are_allowed_by_default_and_refunds_are_not() {
    let s = Sluice::start(StoreKind::Memory, Some(&format!("domain: d\n{RULE}")), &[]).await;
    // The override (3 per hour) replaces the configured 1 per hour.
    for _ in 0..3 {
        let r = s.call(ask("d", Some(3), false)).await.unwrap();
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(
            r.statuses[0]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            3
        );
    }
    let r = s.call(ask("d", Some(3), false)).await.unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let e = s.call(ask("d", None, true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(e.message().contains("allow_refunds"), "{}", e.message());
    s.stop().await;
}

#[tokio::test]
async fn a_domain_can_forbid_overrides_and_allow_refunds() {
    let config = format!("domain: d\nallow_overrides: false\nallow_refunds: true\n{RULE}");
    let s = Sluice::start(StoreKind::Memory, Some(&config), &[]).await;
    let e = s.call(ask("d", Some(1_000_000), false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(e.message().contains("allow_overrides"), "{}", e.message());
    // The refused override charged nothing: the configured limit of 1 is untouched.
    let r = s.call(ask("d", None, false)).await.unwrap();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let r = s.call(ask("d", None, false)).await.unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    // A refund gives the hit back.
    let r = s.call(ask("d", None, true)).await.unwrap();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let r = s.call(ask("d", None, false)).await.unwrap();
    assert_eq!(r.overall_code, Code::Ok as i32);
    s.stop().await;
}

/// With --merge-domains, one file that forbids overrides forbids them for the whole domain.
#[tokio::test]
async fn merged_files_forbid_overrides_when_any_file_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), format!("domain: d\n{RULE}")).unwrap();
    let args = serve_args(dir.path(), StoreKind::Memory, &["--merge-domains"]);
    let clock = std::sync::Arc::new(sluice::clock::ManualClock::new(T0));
    let server = sluice::app::start(args, clock).await.unwrap();
    let mut client = sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(
        channel(server.grpc_addr).await,
    );
    assert!(client
        .should_rate_limit(ask("d", Some(5), false))
        .await
        .is_ok());
    std::fs::write(
        dir.path().join("b.yaml"),
        "domain: d\nallow_overrides: false\ndescriptors:\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    )
    .unwrap();
    assert!(server.reload());
    let e = client
        .should_rate_limit(ask("d", Some(5), false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    server.shutdown();
    server.wait().await.unwrap();
}
